"""Contamination check: generated scenarios that nearly duplicate tau2 or BFCL test items.

A scenario is flagged when its intent is within a cosine-similarity threshold of a benchmark
test item's user request (tasks.discover.embed's `fast` static embedding by default, `minilm` on request),
when its gold calls overlap a test item's gold calls (Jaccard of tool names and name.key=value
atoms; a static embedding of call text cannot tell `user_id=a` from `user_id=b`), or when the
normalized call text is identical. References:
- tau2: every task of every domain in the extracted wheel that is not in tau2's `train` split
  (intent = reason_for_call + task_instructions; calls = evaluation_criteria.actions);
- BFCL: the first-turn user request of every item of the Python single-turn categories, and its
  ground-truth calls (first allowed value of each parameter).

Flags go to `<ws>/reports/contamination.json`; `agentscaler.artifacts.contaminated_ids(ws)` is what the
export step calls to keep flagged scenarios out of training (an empty set when no check was run).
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from agentscaler.artifacts import CONTAMINATION, load_scenarios, screening_key
from agentscaler.hashing import content_hash
from agentscaler.models import Scenario
from agentscaler.workspace import Workspace, atomic_write_bytes, atomic_write_json
from envs.tau2.source import ensure_tau2
from tasks.discover.embed import get_embedder
from tasks.evaluation.bfcl import load_category

INTENT_THRESHOLD = 0.92
CALLS_THRESHOLD = 0.8
MAX_CHARS = 1000  # of an intent: its gist; BFCL live requests run to 10k chars
BFCL_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple", "live_multiple",
                   "live_parallel", "live_parallel_multiple", "irrelevance", "live_irrelevance")


def contamination_path(ws: Workspace) -> Path:
    return ws.reports_dir / CONTAMINATION


def _value_text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)


def calls_text(calls: list[tuple[str, dict[str, Any]]]) -> str:
    """A call sequence as one normalized text: 'name(key=value, ...); ...' (dots and case folded)."""
    parts = []
    for name, args in calls:
        inner = ", ".join(f"{k}={_value_text(v)}" for k, v in sorted((args or {}).items()))
        parts.append(f"{name.replace('.', '_').lower()}({inner})")
    return "; ".join(parts)


def call_atoms(calls: list[tuple[str, dict[str, Any]]]) -> frozenset[str]:
    """What a call sequence does, as a set: each tool name and each name.key=value."""
    atoms = set()
    for name, args in calls:
        n = name.replace(".", "_").lower()
        atoms.add(n)
        atoms.update(f"{n}.{k}={_value_text(v)}".lower() for k, v in (args or {}).items())
    return frozenset(atoms)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


# ----------------------------------------------------------------------------- references
def tau2_references() -> list[dict[str, Any]]:
    out = []
    base = ensure_tau2() / "tau2" / "data" / "tau2" / "domains"
    for tasks_file in sorted(base.glob("*/tasks.json")):
        domain = tasks_file.parent.name
        split_file = tasks_file.parent / "split_tasks.json"
        train = set(json.loads(split_file.read_text("utf-8")).get("train", [])) if split_file.exists() else set()
        for t in json.loads(tasks_file.read_text("utf-8")):
            if str(t.get("id")) in train:
                continue
            ins = (t.get("user_scenario") or {}).get("instructions") or {}
            intent = ins if isinstance(ins, str) else " ".join(
                str(ins[k]) for k in ("reason_for_call", "task_instructions") if ins.get(k))
            actions = (t.get("evaluation_criteria") or {}).get("actions") or []
            calls = [(a.get("name", ""), a.get("arguments") or {}) for a in actions]
            out.append({"source": "tau2", "id": f"{domain}/{t.get('id')}", "intent": intent,
                        "calls": calls_text(calls), "atoms": call_atoms(calls)})
    return out


def bfcl_references(categories: tuple[str, ...] = BFCL_CATEGORIES, root: Path | None = None) -> list[dict[str, Any]]:
    def first(v: Any) -> Any:
        if isinstance(v, list):
            v = next((x for x in v if x != ""), "")
        return {k: first(x) for k, x in v.items()} if isinstance(v, dict) else v

    out = []
    for cat in categories:
        for it in load_category(cat, root=root):
            intent = " ".join(m.get("content") or "" for m in it["messages"] if m.get("role") == "user")
            calls = [(name, {p: first(v) for p, v in params.items()}) for gt in it["ground_truth"] or []
                     for name, params in gt.items()]
            out.append({"source": "bfcl", "id": it["id"], "intent": intent, "calls": calls_text(calls),
                        "atoms": call_atoms(calls)})
    return out


# ---------------------------------------------------------------------------------- check
def _max_sim(queries: np.ndarray, refs: np.ndarray, chunk: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    best = np.full(len(queries), -1.0, np.float32)
    arg = np.zeros(len(queries), np.int64)
    if len(refs) == 0:
        return best, arg
    for i in range(0, len(queries), chunk):
        sims = queries[i:i + chunk] @ refs.T
        arg[i:i + chunk] = sims.argmax(axis=1)
        best[i:i + chunk] = sims.max(axis=1)
    return best, arg


def _embed_cached(texts: list[str], embedding: str, cache_dir: Path | None) -> np.ndarray:
    """Embeddings of the (fixed) reference texts, cached as .npy by content hash: tokenizing 3M chars takes seconds."""
    path = None
    if cache_dir is not None:
        path = Path(cache_dir) / f"contamination-{embedding}-{content_hash(texts)[:16]}.npy"
        if path.exists():
            return np.load(path)
    vecs = _embed_unique(texts, embedding)
    if path is not None:
        buf = io.BytesIO()
        np.save(buf, vecs)
        atomic_write_bytes(path, buf.getvalue())
    return vecs


def _embed_unique(texts: list[str], embedding: str) -> np.ndarray:
    """Embed each distinct text once (tau2 telecom's 2,211 test tasks have 60-odd distinct intents)."""
    uniq = list(dict.fromkeys(texts))
    vecs = get_embedder(embedding).embed(uniq)
    row = {t: i for i, t in enumerate(uniq)}
    return vecs[[row[t] for t in texts]] if texts else vecs


def find_contamination(scenarios: list[Scenario], references: list[dict[str, Any]], embedding: str = "fast",
                       intent_threshold: float = INTENT_THRESHOLD, calls_threshold: float = CALLS_THRESHOLD,
                       cache_dir: Path | None = None) -> list[dict[str, Any]]:
    """Flags {scenario, domain, split, kind: intent|calls|calls_exact, similarity, source, ref_id}, strongest per scenario.

    intent: cosine of the intent embeddings >= intent_threshold; calls: Jaccard of the call atoms
    (tool names and name.key=value) >= calls_threshold; calls_exact: identical normalized call text.
    """
    if not scenarios or not references:
        return []
    s_calls = [[(c.name, c.arguments) for c in s.gold_calls] for s in scenarios]
    exact = {r["calls"]: r for r in references if r["calls"]}
    si = _embed_unique([s.intent[:MAX_CHARS] for s in scenarios], embedding)
    ri = _embed_cached([r["intent"][:MAX_CHARS] for r in references], embedding, cache_dir)
    bi, ai = _max_sim(si, ri)
    by_atom: dict[str, list[int]] = {}  # inverted index: only references sharing an atom can be similar
    for j, r in enumerate(references):
        for a in r["atoms"]:
            by_atom.setdefault(a, []).append(j)
    flags = []
    for n, s in enumerate(scenarios):
        cands = []
        text = calls_text(s_calls[n])
        if text and text in exact:
            cands.append(("calls_exact", 1.0, exact[text]))
        if s.intent.strip() and bi[n] >= intent_threshold:
            cands.append(("intent", float(bi[n]), references[int(ai[n])]))
        atoms = call_atoms(s_calls[n])
        near = {j for a in atoms if "=" in a for j in by_atom.get(a, ())}
        if near:
            j = max(near, key=lambda j: jaccard(atoms, references[j]["atoms"]))
            sim = jaccard(atoms, references[j]["atoms"])
            if sim >= calls_threshold:
                cands.append(("calls", sim, references[j]))
        if cands:
            kind, sim, ref = max(cands, key=lambda c: c[1])
            flags.append({"scenario": s.id, "domain": s.domain, "split": s.split, "kind": kind,
                          "similarity": round(sim, 4), "source": ref["source"], "ref_id": ref["id"]})
    return flags


def check_contamination(ws: Workspace, embedding: str = "fast", intent_threshold: float = INTENT_THRESHOLD,
                        calls_threshold: float = CALLS_THRESHOLD, sources: tuple[str, ...] = ("tau2", "bfcl"),
                        bfcl_root: Path | None = None) -> dict[str, Any]:
    """Check every scenario of the workspace; write reports/contamination.json; return it.

    Cached by content: when the report on disk screened the same scenarios (ids, splits, intents)
    with the same settings, it is returned as is (`"skipped": True`). The references are the
    installed tau2 and BFCL test items."""
    t0 = time.perf_counter()
    scenarios = load_scenarios(ws)
    params = {"embedding": embedding, "intent_threshold": intent_threshold, "calls_threshold": calls_threshold,
              "sources": list(sources)}
    skey = screening_key(scenarios)
    input_key = content_hash({"scenarios": skey, "params": params})
    path = contamination_path(ws)
    if path.exists():
        old = json.loads(path.read_text("utf-8"))
        if old.get("input_key") == input_key:
            return {**old, "skipped": True}
    refs: list[dict[str, Any]] = []
    if "tau2" in sources:
        refs += tau2_references()
    if "bfcl" in sources:
        refs += bfcl_references(root=bfcl_root)
    flags = find_contamination(scenarios, refs, embedding, intent_threshold, calls_threshold, ws.cache_dir)
    by: dict[str, int] = {}
    for f in flags:
        key = f"{f['source']}:{f['kind']}"
        by[key] = by.get(key, 0) + 1
    report = {"params": params, "scenarios_key": skey, "input_key": input_key, "skipped": False,
              "scenarios": len(scenarios), "references": {s: sum(r["source"] == s for r in refs) for s in sources},
              "flagged": len(flags), "flagged_train": sum(f["split"] == "train" for f in flags), "by_kind": by,
              "flags": flags, "wall_s": round(time.perf_counter() - t0, 2)}
    atomic_write_json(contamination_path(ws), report)
    return report


def screened_summary(report: dict[str, Any]) -> dict[str, Any]:
    """A contamination report without its flag list (for flow summaries)."""
    return {k: v for k, v in report.items() if k != "flags"}
