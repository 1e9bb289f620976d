"""Readers of the workspace's artifacts (and the writer of the tool corpus): one per file.

Every stage that needs another stage's output reads it here, so a file's format is parsed in
one place (docs/ARCHITECTURE.md lists which stage writes which file):

    corpus/tools.parquet                   save_tools / load_tools
    graph/domains.json                     load_domains
    domains/<id>/scenarios.jsonl           domain_scenarios, load_scenarios, scenario_map
    rollouts/<run>/trajectories.jsonl      trajectory_files, read_trajectories (read_trajectory_rows),
                                           load_trajectories
    reports/contamination.json             contamination_report, contaminated_ids, screening_key, unscreened

A bad line of a JSON Lines file is skipped by the loaders (a torn last line after a crash) and
reported with its file and line by `read_trajectories`, never raised.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Container, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
from pydantic import ValidationError

from agentscaler.hashing import content_hash
from agentscaler.models import Scenario, Tool, Trajectory
from agentscaler.workspace import Workspace, atomic_write_bytes, read_jsonl

SCENARIOS = "scenarios.jsonl"
TRAJECTORIES = "trajectories.jsonl"
CONTAMINATION = "contamination.json"

# --- corpus/tools.parquet: one row per Tool; JSON fields as strings ---------------------------

_JSON_FIELDS = ("parameters", "returns")
COLUMNS = list(Tool.model_fields)


def save_tools(path: Path, tools: list[Tool]) -> Path:
    rows = []
    for t in tools:
        row = t.model_dump()
        for f in _JSON_FIELDS:
            row[f] = json.dumps(row[f], sort_keys=True) if row[f] is not None else None
        rows.append(row)
    df = pd.DataFrame(rows, columns=COLUMNS)
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return atomic_write_bytes(Path(path), buf.getvalue())


def load_tools(path: Path) -> list[Tool]:
    df = pd.read_parquet(path)
    tools = []
    for row in df.to_dict(orient="records"):
        for f in _JSON_FIELDS:
            row[f] = json.loads(row[f]) if isinstance(row.get(f), str) else None
        row = {k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}  # NaN -> None
        tools.append(Tool.model_validate(row))
    return tools


# --- graph/domains.json ---------------------------------------------------------------------------

def load_domains(ws: Workspace) -> list[dict[str, Any]]:
    """The discovered domain records [{"domain", "tools", "names", "edges"}] ([] before discovery).
    Raises ValueError when the file is not a JSON list."""
    if not ws.domains_path.exists():
        return []
    data = json.loads(ws.domains_path.read_text("utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{ws.domains_path}: expected a JSON list of domain records")
    return data


# --- domains/<id>/scenarios.jsonl -----------------------------------------------------------------

def domain_label(ws: Workspace, domain_id: str) -> str:
    """A built domain as a person reads it: its name, then its id (just the id before it is built
    or when its spec.json cannot be read)."""
    try:
        name = json.loads((ws.domain_dir(domain_id) / "spec.json").read_text("utf-8")).get("name")
    except (OSError, ValueError, AttributeError):
        return domain_id
    return f"{name} {domain_id}" if name else domain_id


def domain_scenarios(domain_dir: Path, ids: Container[str] | None = None) -> list[Scenario]:
    """The scenarios of one domain folder (a workspace's domains/<id>/ or an exported one); [] if none.
    ids: only those with these ids, the other rows not validated (a verifier needs the scenarios
    its trajectories name; a domain's file holds its held-out ones too)."""
    p = Path(domain_dir) / SCENARIOS
    if not p.exists():
        return []
    return [Scenario.model_validate(r) for r in read_jsonl(p)
            if ids is None or (isinstance(r, dict) and isinstance(r.get("id"), str) and r["id"] in ids)]


def load_scenarios(ws: Workspace, domain_id: str | None = None) -> list[Scenario]:
    """Scenarios on disk, of one domain or of every finished environment."""
    out: list[Scenario] = []
    for d in [domain_id] if domain_id else ws.domain_ids():
        out.extend(domain_scenarios(ws.domain_dir(d)))
    return out


def scenario_map(ws: Workspace, domains: Iterable[str] | None = None) -> dict[str, Scenario]:
    """Scenario id -> Scenario over some domains (default all): how trajectories find their scenario."""
    return {s.id: s for d in (sorted(domains) if domains is not None else ws.domain_ids())
            for s in load_scenarios(ws, d)}


# --- rollouts/<run>/trajectories.jsonl ------------------------------------------------------------

def trajectory_files(ws: Workspace, run_ids: list[str] | None = None) -> list[Path]:
    """The trajectory files of some runs (None: every run), those that exist."""
    base = ws.root / "rollouts"
    if run_ids is not None:
        return [base / r / TRAJECTORIES for r in run_ids if (base / r / TRAJECTORIES).exists()]
    return sorted(base.glob(f"*/{TRAJECTORIES}"))


def read_trajectories(path: Path) -> Iterator[tuple[str, Trajectory | None, str | None, str]]:
    """(where, trajectory, reason, detail) for each non-empty line of a trajectories file.

    A line that cannot be read has trajectory None and reason "malformed_json" (not JSON, such as
    a torn last line) or "invalid_trajectory" (JSON, but not a Trajectory); `where` is file:line."""
    for where, traj, reason, detail, *_ in read_trajectory_rows(path):
        yield where, traj, reason, detail


# How our writers put a trajectory's tools (pydantic's field order: messages, tools, final_hash).
TOOLS_KEY, TOOLS_END = b',"tools":', b'],"final_hash":'
MAX_SHARED_TOOLS = 4096  # distinct tools lists remembered by one read (one per domain, in practice)
READ_BUFFER = 1 << 20


def _tools_span(line: bytes) -> tuple[int, int] | None:
    """(start, end) of the bytes that may be the line's tools list, as our writers place it: a
    guess, which _spliced checks before it is believed."""
    i = line.find(TOOLS_KEY)
    if i < 0:
        return None
    j = line.find(TOOLS_END, i)
    return None if j < 0 else (i, j + 1)


# A tools list read before is found by its first bytes (no hash of the whole list per line: a
# list is 70% of a line), then compared in place.
TOOLS_PREFIX = 64
KnownTools = dict[bytes, list[tuple[bytes, list[dict[str, Any]]]]]  # first bytes -> [(the list's bytes, the list)]


def _spliced(line: bytes, known: KnownTools) -> tuple[dict[str, Any], list, int] | None:
    """(the line's object without "tools", its tools list, where the members after the list start)
    without parsing the tools' bytes, when they equal a list read before; else None (parse the
    whole line). Sound for any line: the members before the cut parse as an object of their own
    (so the cut is at the top level, not inside a string or a nested value), the members after it
    too, and neither names "tools" or a key of the other, so the whole line is exactly that object
    with the known list as "tools"."""
    i = line.find(TOOLS_KEY)
    if i < 0:
        return None
    start = i + len(TOOLS_KEY)
    for raw, tools in known.get(line[start:start + TOOLS_PREFIX], ()):
        end = start + len(raw)  # just after the list's "]", where _tools_span would have cut
        if line.startswith(raw, start) and line.startswith(TOOLS_END[1:], end):
            break
    else:
        return None
    try:
        head = orjson.loads(line[:i] + b"}")
        tail = orjson.loads(b"{" + line[end + 1:])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(head, dict) or not head or not isinstance(tail, dict) \
            or "tools" in head or "tools" in tail or head.keys() & tail.keys():
        return None
    head.update(tail)
    return head, tools, end


def read_trajectory_rows(path: Path, share_tools: bool = False, take: Callable[[bytes], bool] | None = None
                         ) -> Iterator[tuple[str, Trajectory | None, str | None, str, bytes | None, int]]:
    """read_trajectories with each line as read (bytes, None where orjson refused it): a writer
    that changes only the verdict puts the new one into the line rather than encoding the whole
    trajectory again (tasks.verify.verify). Last, where a line's top-level members that may name
    "verdict" start: after the tools list for a line read with a known list (the members before it
    name none of the members after it, _spliced), else 0.

    Parsed with orjson, then validated (3x faster than pydantic's own JSON parser on these lines,
    most of whose bytes are the tools' schemas); a line orjson refuses (NaN, lone surrogates,
    bytes that are not UTF-8, or not JSON) goes to pydantic's parser, which decides as before.
    An integer over 64 bits reads as a float (orjson's reading; a verifier compares call
    arguments as json reads them, and writes a line back with its own bytes: tasks.verify.verify).

    share_tools: a line whose tools list is byte for byte one read before (every trajectory of a
    domain carries the same list: 70% of a line's bytes) gets that list object, shared and not
    parsed again: for readers that never change `.tools` (the verifier). Same trajectories.
    take: only the lines it accepts are read (a verifier process's share of a run)."""
    known: KnownTools = {}
    n_known = 0
    at = f"{path}:"
    # a large buffer: lines are longer than the default 8 kB, and reading one then took several
    # reads and joins (iterating the demo workspace's 35 MB took 3x as long)
    with open(path, "rb", buffering=READ_BUFFER) as fh:
        for lineno, line in enumerate(fh, 1):
            if line.isspace() or (take is not None and not take(line)):  # (isspace: no stripped copy)
                continue
            where = at + str(lineno)
            try:
                cut = _spliced(line, known) if share_tools and known else None
                if cut is not None:
                    traj = Trajectory.model_validate(cut[0])
                    traj.tools = cut[1]
                    yield where, traj, None, "", line, cut[2]
                    continue
                try:
                    raw = orjson.loads(line)
                except orjson.JSONDecodeError:
                    yield where, Trajectory.model_validate_json(line), None, "", None, 0
                else:
                    traj = Trajectory.model_validate(raw)
                    if share_tools and n_known < MAX_SHARED_TOOLS and (span := _tools_span(line)):
                        tb = line[span[0] + len(TOOLS_KEY):span[1]]
                        same = known.setdefault(tb[:TOOLS_PREFIX], [])
                        if all(raw != tb for raw, _ in same) and (tools := _tools_list(tb)) is not None:
                            same.append((tb, tools))
                            n_known += 1
                    yield where, traj, None, "", line, 0
            except ValidationError as exc:
                try:
                    json.loads(line)
                except ValueError as jexc:  # not JSON, or not UTF-8
                    yield where, None, "malformed_json", f"not JSON ({getattr(jexc, 'msg', None) or jexc})", None, 0
                    continue
                yield where, None, "invalid_trajectory", str(exc).splitlines()[0], None, 0


def _tools_list(data: bytes) -> list[dict[str, Any]] | None:
    """These bytes as a valid Trajectory.tools (a JSON list of objects), else None."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, list) and all(isinstance(t, dict) for t in value) else None


def load_trajectories(ws: Workspace, run_id: str) -> list[Trajectory]:
    """A run's trajectories (unreadable lines skipped; [] when the run has no file)."""
    path = ws.rollout_dir(run_id) / TRAJECTORIES
    return [t for _, t, _, _ in read_trajectories(path) if t is not None] if path.exists() else []


# --- reports/contamination.json -------------------------------------------------------------------

def contamination_report(ws: Workspace) -> dict[str, Any] | None:
    """The last contamination check's report (None when none was run)."""
    path = ws.reports_dir / CONTAMINATION
    return json.loads(path.read_text("utf-8")) if path.exists() else None


def contaminated_ids(ws: Workspace) -> set[str]:
    """Scenario ids flagged by the last contamination check (empty when none was run)."""
    return {f["scenario"] for f in (contamination_report(ws) or {}).get("flags", [])}


def screening_key(scenarios: list[Scenario]) -> str:
    """What a contamination check read: every scenario's id, split and intent (a rewritten intent
    is a new text to screen even when the scenario id, a hash of its gold calls, stays)."""
    return content_hash(sorted([s.id, s.split, s.intent] for s in scenarios))


def unscreened(ws: Workspace) -> str | None:
    """None when reports/contamination.json screened exactly the workspace's current scenarios;
    otherwise why not (never screened, or the scenarios changed since)."""
    report = contamination_report(ws)
    if report is None:
        return "its scenarios were never screened against the benchmarks' test items"
    scenarios = load_scenarios(ws)
    if report.get("scenarios_key") != screening_key(scenarios):
        return (f"its scenarios changed since the last contamination check ({report.get('scenarios', '?')} "
                f"screened, {len(scenarios)} now)")
    return None
