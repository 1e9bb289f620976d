"""Verified trajectories -> SFT rows `{"messages": [...], "tools": "<json>"}` for TRL, per stage.

Why each step:
- only trajectories whose verdict passed are training data (the paper's filtering);
- `tool_calls[].function.arguments` arrive as the JSON *string* servers return; chat templates
  need a dict, so it is parsed here and a malformed one drops the row with a counted reason;
- tool schemas differ per row, and Arrow would unify them into one struct (adding `null` keys
  to every schema), so `tools` is stored as a JSON string column (TRL decodes it before
  templating) and each tool call is stored as `datasets.Json` for the same reason;
- rows longer than `max_length` tokens are dropped, never truncated (a cut trajectory teaches
  an unfinished conversation); duplicates (same messages and tools) are dropped;
- the eval split is held out by scenario, so trials of one scenario never straddle the split;
- the report counts agent experience and gold replays apart at every step (`by_origin`,
  `kept_by_origin`).

- trajectories of held-out scenarios (evaluation runs live in the same workspace) and of
  scenarios flagged by the contamination check (`agentscaler contamination`) stay out, counted by
  reason: `export_sft` reads both itself, so no caller can skip them; it refuses a workspace whose
  current scenarios were never screened (every flow screens before it exports);
- every row keeps its origin (`origin`: "agent" or "gold-replay", and `agent_model`: the model's
  name, `gold-replay` for demonstrations replayed from gold calls) and the report counts rows per
  origin, so demonstrations and experience are never mixed up in the data or in a count;
- `session_length` (optional) joins conversations of one domain and one origin into sessions of up
  to that many tokens: the domain's system prompt and tool schemas (most of a row's tokens: ~2-3k
  of ~3k) come once, followed by several user requests each handled to the end. On a CPU this
  trains on several times more demonstrations per token; the loss stays on assistant turns only,
  and train/eval splits are made before joining (a session never mixes them);
- `domains` (optional) keeps only rows of those domains (the environment-scaling curve trains on
  nested subsets of the train domains), `out_dir` writes somewhere other than `<ws>/sft/`.

Stage 1 = general domains, stage 2 = target verticals (`tau2-*` or a given list).
Layout: `<ws>/sft/stage{1,2}/{train,eval}.parquet`, `<ws>/sft/stage{1,2}/hf/` (DatasetDict via
`save_to_disk`), `<ws>/sft/stage{1,2}/report.json`, `<ws>/sft/stage{1,2}/README.md` (the dataset
card, tasks/sft/card.py: `datasets.load_dataset(<stage dir>)` reads the two parquet splits), and
`<ws>/sft/report.json` for the run.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agentscaler.artifacts import contaminated_ids, load_scenarios, read_trajectories, trajectory_files, unscreened
from agentscaler.hashing import content_hash
from agentscaler.models import ORIGINS, Trajectory
from agentscaler.workspace import Workspace, atomic_write_bytes, atomic_write_json
from tasks.sft.card import write_card
from training.config import default_config_path, load_config
from training.gguf_convert import load_tokenizer

ROLES = ("system", "user", "assistant", "tool")
DEFAULT_MAX_LENGTH = 2048
DEFAULT_EVAL_FRACTION = 0.1
MAX_ERRORS = 50


class UnscreenedError(RuntimeError):
    """The workspace's scenarios were not screened for contamination (or changed since): no export."""


class RowError(ValueError):
    """A trajectory that cannot become an SFT row; `reason` is the counted reason code."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def stage_of(domain: str, target_domains: Iterable[str] | None = None) -> int:
    """2 for target verticals (listed domains, or any `tau2-*` domain when no list is given), else 1."""
    if target_domains is not None:
        return 2 if domain in set(target_domains) else 1
    return 2 if domain.startswith(("tau2_", "tau2-")) else 1


def _text(content: Any) -> str:
    """Message content as text: None -> "", OpenAI content parts joined, anything else JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    return json.dumps(content, ensure_ascii=False, sort_keys=True)


def _parse_arguments(raw: Any, where: str) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and raw.strip() == ""):
        return {}  # servers send "" for a call without arguments
    if not isinstance(raw, str):
        raise RowError("malformed_arguments", f"{where}: arguments is {type(raw).__name__}, not a JSON string")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise RowError("malformed_arguments", f"{where}: arguments are not JSON ({exc.msg}): {raw[:80]!r}") from None
    if not isinstance(value, dict):
        raise RowError("malformed_arguments", f"{where}: arguments are JSON {type(value).__name__}, not an object")
    return value


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI-shaped messages -> the shape HF chat templates read (every key present, same types).

    Raises RowError naming the message and the problem.
    """
    out: list[dict[str, Any]] = []
    call_names: dict[str, str] = {}
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ROLES:
            raise RowError("bad_message", f"message {i}: role {role!r} is not one of {ROLES}")
        row: dict[str, Any] = {"role": role, "content": _text(m.get("content")), "tool_calls": None,
                               "tool_call_id": None, "name": None}
        if role == "assistant" and m.get("tool_calls"):
            calls = []
            for j, tc in enumerate(m["tool_calls"]):
                where = f"message {i} tool_call {j}"
                fn = tc.get("function") if isinstance(tc, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
                    raise RowError("malformed_tool_call", f"{where}: no function name")
                args = _parse_arguments(fn.get("arguments"), f"{where} ({fn['name']})")
                call = {"type": "function", "function": {"name": fn["name"], "arguments": args}}
                if tc.get("id"):
                    call["id"] = str(tc["id"])
                    call_names[str(tc["id"])] = fn["name"]
                calls.append(call)
            row["tool_calls"] = calls
        elif role == "tool":
            tcid = m.get("tool_call_id")
            name = m.get("name") or call_names.get(str(tcid))
            if not name:
                raise RowError("tool_without_name", f"message {i}: tool message without name or known tool_call_id")
            row["tool_call_id"] = str(tcid) if tcid is not None else None
            row["name"] = name
        out.append(row)
    while out and out[-1]["role"] != "assistant":  # trailing user/tool turns carry no loss
        out.pop()
    if not any(r["role"] == "assistant" and (r["content"] or r["tool_calls"]) for r in out):
        raise RowError("no_assistant_turn", "no assistant reply or tool call to learn from")
    return out


def row_from_trajectory(traj: Trajectory) -> dict[str, Any]:
    """One SFT row (messages normalized, tools as a JSON string) plus bookkeeping columns."""
    messages = normalize_messages(traj.messages)
    tools = [t for t in traj.tools]
    for k, t in enumerate(tools):
        if not (isinstance(t, dict) and isinstance(t.get("function"), dict) and t["function"].get("name")):
            raise RowError("malformed_tool_schema", f"tools[{k}] is not an OpenAI function schema")
    tools_json = json.dumps(tools, ensure_ascii=False, sort_keys=True)
    return {"id": content_hash({"messages": messages, "tools": tools}), "trajectory_id": traj.id,
            "scenario_id": traj.scenario_id, "domain": traj.domain, "origin": traj.origin,
            "agent_model": traj.agent_model, "messages": messages, "tools": tools_json,
            "trajectory_ids": [traj.id], "conversations": 1}


def count_tokens(tokenizer: Any, row: dict[str, Any]) -> int:
    """Token count of the row as the trainer will see it (same template, same tools)."""
    ids = tokenizer.apply_chat_template(row["messages"], tools=json.loads(row["tools"]) or None,
                                        tokenize=True, return_dict=True)["input_ids"]
    return len(ids)


def _eval_bucket(scenario_id: str) -> float:
    return int(content_hash({"eval_split": scenario_id}, 8), 16) / 16**8


def join_sessions(rows: list[dict], tokenizer: Any, session_length: int) -> list[dict]:
    """Join rows of one domain, origin and tool list (in id order) into sessions of <= session_length
    tokens: the first row whole, each next one without its system message (the same text)."""
    groups: dict[tuple[str, str, str, str], list[dict]] = {}
    for r in rows:
        system = r["messages"][0]["content"] if r["messages"] and r["messages"][0]["role"] == "system" else ""
        groups.setdefault((r["domain"], r["origin"], r["agent_model"] or "", r["tools"], system), []).append(r)
    out: list[dict] = []

    def close(cur: dict | None) -> None:
        if cur is not None:
            cur["id"] = content_hash({"messages": cur["messages"], "tools": cur["tools"]})
            out.append(cur)

    for (_, _, _, _, system), group in sorted(groups.items()):
        cur: dict | None = None
        for r in sorted(group, key=lambda x: x["id"]):
            if cur is not None and system:
                joined = {**cur, "messages": cur["messages"] + r["messages"][1:]}
                n = count_tokens(tokenizer, joined)
                if n <= session_length:
                    cur = {**joined, "n_tokens": n, "trajectory_ids": cur["trajectory_ids"] + r["trajectory_ids"],
                           "conversations": cur["conversations"] + 1}
                    continue
            close(cur)
            cur = dict(r)
        close(cur)
    return sorted(out, key=lambda r: r["id"])


def build_rows(files: list[Path], tokenizer: Any, max_length: int = DEFAULT_MAX_LENGTH,
               target_domains: list[str] | None = None, eval_fraction: float = DEFAULT_EVAL_FRACTION,
               exclude_scenarios: dict[str, str] | None = None, domains: list[str] | None = None,
               session_length: int | None = None, max_train_conversations: int | None = None,
               ) -> tuple[dict[int, dict[str, list[dict]]], dict[str, Any]]:
    """Read trajectory files and return ({stage: {"train": rows, "eval": rows}}, report).

    `exclude_scenarios`: scenario id -> reason (held-out split, contamination flag); such
    trajectories are kept out of training and counted under that reason. `domains`: only these
    (others are counted as `outside_domains`, not as dropped). `session_length`: join_sessions.
    `max_train_conversations`: each stage's train split cut to that many, drawn evenly over its
    domains (even_draw; the eval split is kept whole)."""
    keep_domains = set(domains) if domains is not None else None
    outside = 0
    dropped: Counter[str] = Counter()
    errors: list[str] = []
    read = skipped_unverified = 0
    seen: set[str] = set()
    by_stage: dict[int, list[dict]] = {1: [], 2: []}
    # agent experience and gold-replayed demonstrations, counted apart at every step
    by_origin: dict[str, Counter[str]] = {o: Counter() for o in ORIGINS}

    def drop(reason: str, where: str, detail: str, origin: str | None = None) -> None:
        dropped[reason] += 1
        if origin is not None:
            by_origin[origin][f"dropped_{reason}"] += 1
        if len(errors) < MAX_ERRORS:
            errors.append(f"{where}: {detail}")

    for path in files:
        for where, traj, bad, detail in read_trajectories(path):
            read += 1
            if traj is None:
                drop(bad or "invalid_trajectory", where, detail)
                continue
            where = f"{where} (trajectory {traj.id})"
            if keep_domains is not None and traj.domain not in keep_domains:
                outside += 1
                continue
            origin = traj.origin
            by_origin[origin]["read"] += 1
            if traj.verdict is None or not traj.verdict.passed:
                skipped_unverified += 1
                by_origin[origin]["skipped_unverified"] += 1
                continue
            if exclude_scenarios and traj.scenario_id in exclude_scenarios:
                reason = exclude_scenarios[traj.scenario_id]
                drop(reason, where, f"scenario {traj.scenario_id} is excluded from training ({reason})", origin)
                continue
            try:
                row = row_from_trajectory(traj)
            except RowError as exc:
                drop(exc.reason, where, exc.detail, origin)
                continue
            if row["id"] in seen:
                dropped["duplicate"] += 1
                by_origin[origin]["dropped_duplicate"] += 1
                continue
            try:
                n = count_tokens(tokenizer, row)
            except Exception as exc:  # a template error names the row, the export goes on
                drop("template_error", where, f"{type(exc).__name__}: {exc}", origin)
                continue
            if n > max_length:
                drop("too_long", where, f"{n} tokens > max_length {max_length}", origin)
                continue
            by_origin[origin]["kept"] += 1
            seen.add(row["id"])
            row["n_tokens"] = n
            row["stage"] = stage_of(traj.domain, target_domains)
            by_stage[row["stage"]].append(row)

    splits: dict[int, dict[str, list[dict]]] = {}
    for stage, rows in by_stage.items():
        rows.sort(key=lambda r: r["id"])
        ev = [r for r in rows if _eval_bucket(r["scenario_id"]) < eval_fraction]
        if not ev and eval_fraction > 0 and len({r["scenario_id"] for r in rows}) >= 2:
            first = min((r["scenario_id"] for r in rows), key=_eval_bucket)
            ev = [r for r in rows if r["scenario_id"] == first]
        ev_ids = {r["id"] for r in ev}
        splits[stage] = {"train": [r for r in rows if r["id"] not in ev_ids], "eval": ev}
    capped = {}
    if max_train_conversations is not None:
        for stage, sp in splits.items():
            before = sp["train"]
            sp["train"] = even_draw(before, max_train_conversations)
            capped[f"stage{stage}"] = {"cap": max_train_conversations, "before": _by_origin(before),
                                       "domains_before": len({r["domain"] for r in before}),
                                       "domains_after": len({r["domain"] for r in sp["train"]})}
    conversations = {f"stage{s}": {k: _by_origin(v) for k, v in sp.items()} for s, sp in splits.items()}
    if session_length:
        splits = {s: {k: join_sessions(v, tokenizer, session_length) for k, v in sp.items()}
                  for s, sp in splits.items()}
    report = {"files": [str(f) for f in files], "read": read, "skipped_unverified": skipped_unverified,
              "kept": {f"stage{s}": {k: len(v) for k, v in sp.items()} for s, sp in splits.items()},
              "conversations_by_origin": conversations, "session_length": session_length,
              "outside_domains": outside, "domains": sorted(keep_domains) if keep_domains is not None else None,
              "capped": capped,
              "kept_by_origin": {f"stage{s}": dict(Counter(r["origin"] for v in sp.values() for r in v))
                                 for s, sp in splits.items()},
              "by_origin": {o: dict(sorted(c.items())) for o, c in by_origin.items()},
              "dropped": dict(sorted(dropped.items())), "errors": errors, "max_length": max_length}
    return splits, report


def even_draw(rows: list[dict], n: int) -> list[dict]:
    """At most n rows, drawn round-robin over their domains (each domain's rows in a fixed order by a
    hash of the row id), in id order. Why: the points of an environment-scaling curve (nested domain
    sets) then train on as many conversations each and differ in how many domains those span, not in
    how much data there is (with the same steps, a few domains' rows are otherwise seen for more epochs)."""
    if n < 0:
        raise ValueError(f"max_train_conversations must be >= 0, got {n}")
    by: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: content_hash({"even_draw": r["id"]}, 12)):
        by.setdefault(r["domain"], []).append(r)
    queues = [by[d] for d in sorted(by, key=lambda d: content_hash({"even_draw_domain": d}, 12))]
    out: list[dict] = []
    for i in range(max((len(q) for q in queues), default=0)):
        out += [q[i] for q in queues if i < len(q)][:n - len(out)]
        if len(out) >= n:
            break
    return sorted(out, key=lambda r: r["id"])


def _by_origin(rows: list[dict]) -> dict[str, int]:
    """Conversations per origin (gold-replay demonstrations vs each model's experience)."""
    return dict(sorted(Counter(r["origin"] for r in rows).items()))


def _features():
    from datasets import Features, Json, List, Value  # the [train] extra, needed only to write datasets

    msg = {"role": Value("string"), "content": Value("string"), "tool_calls": List(Json()),
           "tool_call_id": Value("string"), "name": Value("string")}
    return Features({"id": Value("string"), "trajectory_id": Value("string"), "scenario_id": Value("string"),
                     "domain": Value("string"), "origin": Value("string"), "agent_model": Value("string"),
                     "stage": Value("int32"), "n_tokens": Value("int32"), "messages": List(msg),
                     "tools": Value("string"), "trajectory_ids": List(Value("string")),
                     "conversations": Value("int32")})


def _to_dataset(rows: list[dict]):
    from datasets import Dataset  # the [train] extra, as in _features

    feats = _features()
    if not rows:  # an empty split (no stage-2 domains, no eval rows): from_list([]) loses the columns
        return Dataset.from_dict({k: [] for k in feats}, features=feats)
    return Dataset.from_list([{k: r[k] for k in feats} for r in rows], features=feats)


def _replace_dir(src: Path, dst: Path) -> None:
    """Swap a finished folder into place (rename is atomic; the old one is removed after)."""
    old = dst.with_name(f".{dst.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if dst.exists():
        os.replace(dst, old)
    os.replace(src, dst)
    if old.exists():
        shutil.rmtree(old)


def write_stage(out_dir: Path, split_rows: dict[str, list[dict]], report: dict[str, Any]) -> dict[str, Any]:
    """Write parquet + save_to_disk layouts for one stage; skip when the same rows are already there."""
    from datasets import DatasetDict  # the [train] extra, as in _features
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()
    digest = content_hash({k: [[r["id"], r["origin"]] for r in v] for k, v in split_rows.items()})
    stage_report = {**report, "content_hash": digest,
                    "rows": {k: len(v) for k, v in split_rows.items()},
                    "rows_by_origin": {k: _by_origin(v) for k, v in split_rows.items()},
                    "tokens": {k: sum(r["n_tokens"] for r in v) for k, v in split_rows.items()}}
    rep_path = out_dir / "report.json"
    if rep_path.exists() and (out_dir / "hf").exists():
        try:
            if json.loads(rep_path.read_text()).get("content_hash") == digest:
                return {**stage_report, "skipped": True}
        except json.JSONDecodeError:
            pass
    out_dir.mkdir(parents=True, exist_ok=True)
    dd = DatasetDict({k: _to_dataset(v) for k, v in split_rows.items()})
    for split, ds in dd.items():
        buf = io.BytesIO()
        ds.to_parquet(buf)
        atomic_write_bytes(out_dir / f"{split}.parquet", buf.getvalue())
    tmp = Path(tempfile.mkdtemp(prefix=".hf.", dir=out_dir))
    dd.save_to_disk(str(tmp / "hf"))
    _replace_dir(tmp / "hf", out_dir / "hf")
    shutil.rmtree(tmp, ignore_errors=True)
    atomic_write_json(rep_path, stage_report)  # written last: its hash marks the stage finished
    return {**stage_report, "skipped": False}


def excluded_scenarios(ws: Workspace) -> dict[str, str]:
    """Scenario id -> why it never becomes training data: held out for evaluation, or contaminated."""
    exclude = {s.id: "heldout_scenario" for s in load_scenarios(ws) if s.split != "train"}
    exclude.update({sid: "contaminated" for sid in contaminated_ids(ws)})
    return exclude


def export_sft(ws: Workspace, tokenizer: Any | None = None, stages: tuple[int, ...] = (1, 2),
               run_ids: list[str] | None = None, max_length: int | None = None,
               target_domains: list[str] | None = None, eval_fraction: float = DEFAULT_EVAL_FRACTION,
               tokenizer_loader: Callable[[], Any] | None = None, domains: list[str] | None = None,
               session_length: int | None = None, out_dir: Path | None = None,
               max_train_conversations: int | None = None) -> dict[str, Any]:
    """Export verified trajectories of `ws` to `<ws>/sft/stage{n}/` (or `<out_dir>/stage{n}/`);
    returns the counts report.

    `max_length` defaults to the stage configs' (the smallest of `stages`), so export and training
    filter the same way (a session is at most min(max_length, session_length) tokens, so training
    keeps every session). Held-out and contaminated scenarios are always left out (excluded_scenarios),
    and a workspace whose current scenarios were not screened is refused (UnscreenedError)."""
    why = unscreened(ws)
    if why is not None:
        raise UnscreenedError(f"{ws.root}: {why}; run `agentscaler contamination` before exporting "
                              "(the pipeline, the demo and the train-sft flow run it themselves)")
    if max_length is None:
        max_length = min(load_config(default_config_path(s)).max_length for s in stages)
    if tokenizer is None:
        tokenizer = (tokenizer_loader or load_tokenizer)()
    base = Path(out_dir) if out_dir is not None else ws.sft_dir
    splits, report = build_rows(trajectory_files(ws, run_ids), tokenizer, max_length=max_length,
                                target_domains=target_domains, eval_fraction=eval_fraction,
                                exclude_scenarios=excluded_scenarios(ws), domains=domains,
                                session_length=min(session_length, max_length) if session_length else None,
                                max_train_conversations=max_train_conversations)
    result = {**report, "stages": {}}
    written = {s: write_stage(base / f"stage{s}", splits[s], report) for s in stages}
    for s, res in written.items():  # after every stage is on disk: the cards' funnel counts them all
        write_card(ws, base / f"stage{s}", s, res, report, {r["domain"] for v in splits[s].values() for r in v})
        result["stages"][f"stage{s}"] = {"dir": str(base / f"stage{s}"), "rows": res["rows"],
                                         "rows_by_origin": res["rows_by_origin"],
                                         "tokens": res["tokens"], "skipped": res["skipped"]}
    atomic_write_json(base / "report.json", result)
    return result
