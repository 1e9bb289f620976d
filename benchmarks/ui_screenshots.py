"""The Prefect UI, looked at: headless Chromium screenshots (Debian's `chromium` package) of what a
person sees after ingest, discover and a build recorded on a real Prefect server.

    python -m benchmarks.ui_screenshots [--corpus tests] [--per-domain 4] [--limit 12]

Starts a `prefect server start` on a free loopback port (temporary PREFECT_HOME), runs the three
commands against it (local mode: one flow run each, domains on the thread pool), then saves under
benchmarks/results/: ui-build-logs.png (the build's flow run page: its task runs named by domain
in the graph, its logs), ui-build-artifact.png (the per-domain table and the funnel),
ui-ingest-artifact.png and ui-discover-artifact.png. The first domain is made to fail on purpose
(its record names a tool the corpus lacks) so the pages show a failure too. `--corpus tests` uses the small fixture
corpora of tests/data/corpora; a corpus name (bfcl, tau2, nestful) uses the real one. Not a
benchmark: no figures, so `make bench` does not run it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
from prefect.settings import PREFECT_API_URL, temporary_settings

from agentscaler.workspace import Workspace
from tests.deployments.prefect_server import BIN, cli, prefect_server

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
FIXTURES = ROOT / "tests" / "data" / "corpora"


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    raise SystemExit("no chromium: apt-get install -y chromium")


def screenshot(url: str, path: Path, height: int = 1400) -> None:
    """One page, rendered by the UI's own JavaScript (virtual time lets its requests finish)."""
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--force-device-scale-factor=1",
           f"--window-size=1600,{height}", "--virtual-time-budget=25000", f"--screenshot={path}", url]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if res.returncode != 0 or not path.exists():
        raise RuntimeError(f"chromium failed on {url}: {res.stderr[-1500:]}")
    print(f"{path.relative_to(ROOT)}  <-  {url}")


async def _runs_and_artifacts(names: list[str]) -> dict[str, tuple[str, dict[str, str]]]:
    """flow name -> (its latest flow run id, artifact key -> artifact id)."""
    out = {}
    async with get_client() as client:
        flows = {f.id: f.name for f in await client.read_flows()}
        for run in await client.read_flow_runs(sort="START_TIME_DESC"):
            name = flows.get(run.flow_id)
            if name in names and name not in out:
                arts = await client.read_artifacts(artifact_filter=ArtifactFilter(
                    flow_run_id=ArtifactFilterFlowRunId(any_=[run.id])))
                out[name] = (str(run.id), {a.key: str(a.id) for a in arts if a.key})
    return out


def _break_first_domain(ws: Workspace) -> None:
    """On purpose, so the pages show how a failure reads: the first domain's record names a tool
    the corpus does not have (a stale domains.json), and its build fails with that error."""
    records = json.loads(ws.domains_path.read_text())
    records[0]["tools"] = ["no-such-tool-id"]
    records[0]["names"] = ["no_such_tool"]
    ws.domains_path.write_text(json.dumps(records))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="tests", help="tests (the fixture corpora) or a corpus name")
    ap.add_argument("--per-domain", type=int, default=4)
    ap.add_argument("--limit", type=int, default=12, help="domains built")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ui-shots-"))
    ws = root / "ws"
    sources = ([str(FIXTURES / n) for n in ("bfcl", "openai", "tau2", "toolbench", "xlam")] if a.corpus == "tests"
               else [a.corpus])
    home = root / "prefect-home"
    try:
        with prefect_server(home) as url:
            for args in (["ingest", "--flow", *sources], ["discover"],
                         ["build", "--per-domain", str(a.per_domain), "--limit", str(a.limit)]):
                if args[0] == "build":
                    _break_first_domain(Workspace(ws))
                res = cli(home, url, "-w", str(ws), "-q", *args, "--json")
                if res.returncode not in (0, 1):  # 1: some domains failed, which the pages should show
                    raise RuntimeError(f"{args[0]} exited {res.returncode}: {res.stderr[-2000:]}")
            with temporary_settings(updates={PREFECT_API_URL: url}):
                found = asyncio.run(_runs_and_artifacts(["ingest", "discover", "build-environments"]))
            ui = url.removesuffix("/api")
            OUT.mkdir(parents=True, exist_ok=True)
            run_id, arts = found["build-environments"]
            screenshot(f"{ui}/runs/flow-run/{run_id}", OUT / "ui-build-logs.png")
            screenshot(f"{ui}/artifacts/artifact/{arts['build-environments']}", OUT / "ui-build-artifact.png", 2000)
            for stage in ("ingest", "discover"):
                _, arts = found[stage]
                screenshot(f"{ui}/artifacts/artifact/{arts[stage]}", OUT / f"ui-{stage}-artifact.png")
            print(json.dumps({k: v[0] for k, v in found.items()}))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
