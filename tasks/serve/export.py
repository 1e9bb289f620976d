"""Environments outside the workspace: which folder a DOMAIN argument names, and
`agentscaler export-env DOMAIN --out DIR`, a standalone copy of one environment.

The exported folder is a domain folder of the environment contract (spec.json, models.py,
tools.py, seed.sqlite, scenarios.jsonl) plus a README and `run.py`, a tiny runner that replays
each scenario's gold calls and checks the gold state. It runs with this package installed
(`Environment.open(DIR)`, `agentscaler serve DIR --mcp`); the files are copied byte for byte, so
the state hashes and tool results are the original's. spec.json is written last, as in a workspace.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from agentscaler.artifacts import SCENARIOS, domain_scenarios
from agentscaler.workspace import Workspace, atomic_write_bytes, atomic_write_text
from envs.spec import DomainSpec
from tasks.evaluation.tau2 import DOMAINS as TAU2_DOMAINS, tau2_domain_dir

RUNNER = '''"""Replay this environment's scenarios from the seed and check each reaches its gold state.

Needs the agentscaler package installed (the sandbox worker runs tools.py). Usage:
    python run.py [--limit N]
"""

import argparse
from pathlib import Path

from agentscaler.artifacts import domain_scenarios
from envs.episode import Environment

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="At most this many scenarios.")
    limit = parser.parse_args().limit
    scenarios = domain_scenarios(HERE)[:limit]
    reached = 0
    with Environment.open(HERE) as env:
        print(f"{env.spec.id}: {len(env.spec.tools)} tools, seed state {env.state_hash()[:12]}")
        for s in scenarios:
            env.reset(s)
            results = [env.call(c.name, c.arguments) for c in s.gold_calls]
            ok = env.state_hash() == s.gold_hash
            reached += ok
            print(f"{s.id[:12]} {'ok ' if ok else 'BAD'} {len(results)} calls, "
                  f"{sum(not r.ok for r in results)} errors: {s.intent[:70]}")
    print(f"{reached}/{len(scenarios)} scenarios reach their gold state")
    return 0 if reached == len(scenarios) else 1


if __name__ == "__main__":
    raise SystemExit(main())
'''


class DomainNotFound(FileNotFoundError):
    """DOMAIN names no finished environment (not a folder with spec.json, not a workspace domain)."""


def domain_folder(ws: Workspace, domain: str) -> Path:
    """The folder DOMAIN names: a folder holding spec.json (an exported environment), a domain id
    of the workspace, or tau2_airline / tau2_retail (built into the workspace on first use)."""
    as_path = Path(domain)
    if (as_path / "spec.json").is_file():
        return as_path
    d = ws.domain_dir(domain)
    if (d / "spec.json").is_file():
        return d
    name = domain.removeprefix("tau2_").removeprefix("tau2-")
    if domain.startswith(("tau2_", "tau2-")) and name in TAU2_DOMAINS:
        return tau2_domain_dir(ws, name)
    raise DomainNotFound(f"no finished environment named {domain!r}: not a folder with spec.json, not in "
                         f"{ws.root / 'domains'}, not tau2_airline or tau2_retail")


def _readme(spec: DomainSpec, n_by_split: Counter) -> str:
    lines = [f"# {spec.name} ({spec.id})", "", spec.description or "", "",
             "A standalone agentscaler environment: SQLite state, tool code run in a sandbox worker, "
             "scenarios with gold calls and gold final states.", "",
             "## Use it (with `agentscaler` installed)", "", "```bash",
             "python run.py                      # replay each scenario's gold calls, check the gold state",
             "agentscaler serve . --mcp          # serve the tools to any MCP client (stdio)",
             "agentscaler serve . --mcp --http 8765   # streamable HTTP on 127.0.0.1:8765/mcp", "```", "",
             "```python", "from envs.episode import Environment", "env = Environment.open('.')",
             "env.reset(); print(env.call(env.spec.tools[0].name, {}).text(), env.state_hash())", "```", "",
             "## Files", "",
             "| file | what |", "|---|---|",
             "| spec.json | tools (JSON Schemas, read/write kind), tables, column policies of the state hash |",
             "| models.py | SQLAlchemy models of the tables |",
             "| tools.py | the tool code (runs only inside the sandbox worker) |",
             "| seed.sqlite | the seed database every episode starts from |",
             f"| {SCENARIOS} | scenarios: intent, user facts, gold calls, gold hash and diff "
             f"({', '.join(f'{k}: {v}' for k, v in sorted(n_by_split.items())) or 'none'}) |",
             "| run.py | the runner above |", "",
             f"## Tools ({len(spec.tools)})", "", "| tool | kind | description |", "|---|---|---|"]
    lines += [f"| `{t.name}` | {t.kind} | {' '.join(t.description.split())[:160].replace('|', '/')} |" for t in spec.tools]
    lines += ["", f"## Tables ({len(spec.tables)})", ""]
    lines += [f"- `{t.name}` ({', '.join(c.name for c in t.columns)})" for t in spec.tables]
    return "\n".join(lines) + "\n"


def export_env(ws: Workspace, domain: str, out: Path | str) -> dict[str, object]:
    """Write DOMAIN's environment to `out` (a new or empty folder); returns what was written."""
    src = domain_folder(ws, domain)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not an empty folder")
    spec = DomainSpec.load(src)
    scenarios = domain_scenarios(src)
    files = [spec.models_path, spec.code_path, spec.seed_path]
    files += [p.name for p in (src / SCENARIOS, src / "scenarios.meta.json") if p.exists()]
    for name in files:
        atomic_write_bytes(out / name, (src / name).read_bytes())
    atomic_write_text(out / "README.md", _readme(spec, Counter(s.split for s in scenarios)))
    atomic_write_text(out / "run.py", RUNNER)
    atomic_write_bytes(out / "spec.json", (src / "spec.json").read_bytes())  # last: the folder is finished
    return {"domain": spec.id, "out": str(out), "files": sorted([*files, "README.md", "run.py", "spec.json"]),
            "tools": len(spec.tools), "scenarios": len(scenarios)}
