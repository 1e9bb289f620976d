"""Trajectories from elsewhere: OpenAI-format dialogues (another agent framework, an MCP client, an
edited run) matched to the workspace's scenarios and verified like our own runs (`agentscaler
verify --import FILE.jsonl`).

One JSON object per line:

    {"scenario_id": "<a scenario id of the workspace>", "messages": [...]}
    {"domain": "<domain id>", "intent": "<the scenario's intent>", "messages": [...]}

Without "scenario_id" the row is matched by domain and intent (whitespace-insensitive; without
"intent", the first user message is taken as it); an intent that names several scenarios of the
domain is ambiguous and rejected. Optional fields: "id" (kept in the report), "final_hash" (compared
with the replayed state: recorded_state_mismatch), "end_reason" (user_stop | turn_limit |
fatal_error; default user_stop when the last message is the user's and holds ###STOP###, else
turn_limit: the conversation was not finished), "agent_model" (default "imported").

`messages` are OpenAI chat messages: an optional system message, then user / assistant / tool.
Assistant tool calls are `{"id", "type": "function", "function": {"name", "arguments"}}` with the
arguments as JSON text or an object; a tool message has `tool_call_id` and `content`. Content may
be a string or a list of `{"type": "text", "text": ...}` parts (joined). A tool message must hold
what the domain's tool returns, shown the way our rollouts show it (envs.episode.ToolResult.text):
the result as JSON (`json.dumps(result, ensure_ascii=False)`), a string result as the string itself,
a failed call as "Error: <the environment's message>"; anything else is an output_mismatch.

Rows that cannot be matched are rejected with a reason (REJECTIONS) and counted; the rest are
written as run `import-<content hash of the file>` (rollouts/<run>/trajectories.jsonl, labelled
user_kind "imported" and agent_model as given) and verified like any run.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from agentscaler.artifacts import TRAJECTORIES, load_scenarios
from agentscaler.hashing import content_hash
from agentscaler.models import Scenario, Trajectory
from agentscaler.workspace import Workspace, atomic_write_json, atomic_write_text
from tasks.rollouts.conversation import END_REASONS, trajectory_id
from tasks.rollouts.users import STOP

REJECTIONS = ("unreadable", "not_an_object", "no_messages", "unknown_scenario", "domain_mismatch", "unknown_domain",
              "no_intent", "no_matching_scenario", "ambiguous_scenario", "bad_end_reason")
IMPORTED = "imported"


def _intent_key(text: str) -> str:
    return " ".join(text.split()).casefold()


def _text(content: Any) -> Any:
    """A list of text parts as one string; anything else as it is (the verifier judges it)."""
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    return content


class ScenarioIndex:
    """The workspace's scenarios by id and by (domain, intent)."""

    def __init__(self, ws: Workspace):
        self.by_id: dict[str, Scenario] = {}
        self.by_intent: dict[tuple[str, str], list[Scenario]] = {}
        self.domains: set[str] = set()
        for d in ws.domain_ids():
            for s in load_scenarios(ws, d):
                self.domains.add(s.domain)
                self.by_id[s.id] = s
                self.by_intent.setdefault((s.domain, _intent_key(s.intent)), []).append(s)

    def match(self, row: dict[str, Any], messages: list[Any]) -> tuple[Scenario | None, str, str]:
        """(scenario, "", "") or (None, rejection reason, detail)."""
        sid, domain = row.get("scenario_id"), row.get("domain")
        if sid is not None:
            s = self.by_id.get(str(sid))
            if s is None:
                return None, "unknown_scenario", f"no scenario {sid!r} in the workspace"
            if domain is not None and domain != s.domain:
                return None, "domain_mismatch", f"scenario {sid} is in domain {s.domain}, the row says {domain!r}"
            return s, "", ""
        if domain not in self.domains:
            return None, "unknown_domain", f"no domain {domain!r} with scenarios in the workspace"
        intent = row.get("intent")
        if intent is None:
            intent = next((_text(m.get("content")) for m in messages
                           if isinstance(m, dict) and m.get("role") == "user"), None)
        if not isinstance(intent, str) or not intent.strip():
            return None, "no_intent", "neither scenario_id nor intent, and no user message"
        found = self.by_intent.get((domain, _intent_key(intent)), [])
        if not found:
            return None, "no_matching_scenario", f"no scenario of {domain} has the intent {intent[:120]!r}"
        if len(found) > 1:
            return None, "ambiguous_scenario", f"{len(found)} scenarios of {domain} have this intent"
        return found[0], "", ""


def _end_reason(row: dict[str, Any], messages: list[dict[str, Any]]) -> str | None:
    given = row.get("end_reason")
    if given is not None:
        return given if given in END_REASONS else None
    last = messages[-1] if messages else {}
    said = last.get("content") if isinstance(last, dict) else None
    return "user_stop" if isinstance(last, dict) and last.get("role") == "user" and isinstance(said, str) \
        and STOP in said else "turn_limit"


def read_import(ws: Workspace, path: Path, run_id: str) -> tuple[list[Trajectory], list[dict[str, Any]]]:
    """(trajectories of the rows that match a scenario, rejected rows: {line, id, reason, detail})."""
    index = ScenarioIndex(ws)
    trajs: list[Trajectory] = []
    rejected: list[dict[str, Any]] = []
    trials: Counter = Counter()

    def reject(line: int, row: Any, reason: str, detail: str) -> None:
        rid = row.get("id") if isinstance(row, dict) else None
        rejected.append({"line": line, "id": rid, "reason": reason, "detail": detail[:300]})

    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                reject(n, None, "unreadable", f"not JSON: {exc}")
                continue
            if not isinstance(row, dict):
                reject(n, None, "not_an_object", f"a JSON {type(row).__name__}, not an object")
                continue
            messages = row.get("messages")
            if not isinstance(messages, list) or not messages:
                reject(n, row, "no_messages", "no list of messages")
                continue
            scenario, reason, detail = index.match(row, messages)
            if scenario is None:
                reject(n, row, reason, detail)
                continue
            msgs = [{**m, "content": _text(m["content"])} if isinstance(m, dict) and "content" in m else m
                    for m in messages]
            end = _end_reason(row, msgs)
            if end is None:
                reject(n, row, "bad_end_reason", f"end_reason {row.get('end_reason')!r} is not one of {END_REASONS}")
                continue
            trial = trials[scenario.id]
            trials[scenario.id] += 1
            trajs.append(Trajectory(
                id=trajectory_id(run_id, scenario.id, trial), run_id=run_id, scenario_id=scenario.id,
                domain=scenario.domain, trial=trial, messages=msgs, final_hash=str(row.get("final_hash") or ""),
                end_reason=end, agent_model=str(row.get("agent_model") or IMPORTED), user_kind=IMPORTED))
    return trajs, rejected


def import_run(ws: Workspace, path: Path, run_id: str | None = None) -> dict[str, Any]:
    """Write the matched rows of FILE.jsonl as a rollout run (rollouts/<run>/trajectories.jsonl, and
    import.json with every rejected row); returns the import summary. Verify the run afterwards.
    A run that already holds trajectories is never overwritten, except by a re-import of the same file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no file {path}")
    source = content_hash(path.read_bytes().decode("utf-8", "replace"))
    run_id = run_id or "import-" + source[:12]
    run_dir = ws.rollout_dir(run_id)
    if (run_dir / TRAJECTORIES).exists():  # only the same file's earlier import is replaced
        try:
            earlier = json.loads((run_dir / "import.json").read_text("utf-8")).get("source_hash")
        except (OSError, ValueError, AttributeError):
            earlier = None
        if earlier != source:
            raise FileExistsError(f"run {run_id} already holds other trajectories ({run_dir / TRAJECTORIES}); "
                                  f"import under another --run")
    trajs, rejected = read_import(ws, path, run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / TRAJECTORIES, "".join(t.model_dump_json() + "\n" for t in trajs))
    reasons = Counter(r["reason"] for r in rejected)
    summary = {"run_id": run_id, "file": str(path), "source_hash": source, "rows": len(trajs) + len(rejected), "matched": len(trajs),
               "rejected": {r: reasons.get(r, 0) for r in REJECTIONS}, "rejected_rows": rejected}
    atomic_write_json(run_dir / "import.json", summary)
    return summary
