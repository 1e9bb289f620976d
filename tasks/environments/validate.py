"""Validation suite for a synthesized environment.

Generated code never runs in this process: tools.py is only parsed here (`ast`, for the
signature check) and executed through `envs.episode.Environment`, i.e. in the sandbox worker.
For every tool: its signature matches its JSON Schema; it executes on the seed database with
grounded arguments: a read returns a non-error, non-empty result (`executes`; a search that
finds nothing does not count), a write returns without error and changes the state; a read
never changes the state. `runs` keeps the weaker figure (some call returned without error).
Then the environment's quality (tasks.environments.quality: id coherence, write observability)
is measured on the same sandboxed environment. The result is a per-tool report plus domain
counts (DomainSpec.report).
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agentscaler import pyast
from agentscaler.errors import TransientError
from envs.episode import Environment
from envs.spec import DomainSpec, ToolSpec
from tasks.environments.quality import environment_quality
from tasks.scenarios.arguments import StateView, ground_arguments, read_seed
from tasks.scenarios.quality import is_empty
from tasks.scenarios.values import valid

REASONS = ("syntax", "missing_function", "signature", "load", "tool_error", "no_state_change", "read_mutated",
           "invalid_arguments", "environment", "empty_result")


# --- static checks (parse only, never execute) ----------------------------------------------------
def functions(code: str | ast.Module) -> dict[str, ast.FunctionDef]:
    """Top-level functions by the name the worker will find them under (def name, or a
    `globals()["odd-name"] = fn` alias for tool names that are not Python identifiers).
    `code` is tools.py's text or its already parsed tree."""
    tree = pyast.parse(code) if isinstance(code, str) else code
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    out = dict(defs)
    for n in tree.body:
        if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Subscript)
                and isinstance(n.targets[0].value, ast.Call) and getattr(n.targets[0].value.func, "id", "") == "globals"
                and isinstance(n.targets[0].slice, ast.Constant) and isinstance(n.value, ast.Name)
                and n.value.id in defs):
            out[str(n.targets[0].slice.value)] = defs[n.value.id]
    return out


def check_signature(fn: ast.FunctionDef, tool: ToolSpec) -> str | None:
    """None when `fn` accepts exactly the tool's parameters (db first), else what is wrong."""
    a = fn.args
    pos = [x.arg for x in a.posonlyargs + a.args]
    if not pos or pos[0] != "db":
        return "first parameter must be db"
    props = tool.parameters.get("properties") or {}
    required = set(tool.parameters.get("required") or [])
    names = pos[1:] + [x.arg for x in a.kwonlyargs]
    if a.kwarg is not None and not names:
        return None  # def tool(db, **params): accepts every schema parameter by name
    n_pos_defaults = len(a.defaults)
    has_default = {x: i >= len(pos) - n_pos_defaults for i, x in enumerate(pos)}
    has_default.update({x.arg: d is not None for x, d in zip(a.kwonlyargs, a.kw_defaults)})
    missing = [p for p in props if p not in names and a.kwarg is None]
    if missing:
        return f"parameters {missing} not accepted"
    extra = [x for x in names if x not in props and not has_default.get(x)]
    if extra:
        return f"required parameters {extra} not in the schema"
    no_default = [p for p in props if p in names and p not in required and not has_default.get(p)]
    if no_default:
        return f"optional parameters {no_default} have no default"
    return None


def environment_files(domain_dir: Path) -> str:
    """A fingerprint of what an environment runs: tools.py, the seed database and the spec
    without its report (the report grows after validation; the rest is what the worker loaded)."""
    spec = DomainSpec.load(domain_dir)
    h = hashlib.sha256(spec.model_dump_json(exclude={"report"}).encode())
    for rel in (spec.code_path, spec.seed_path):
        h.update(b"\0" + (Path(domain_dir) / rel).read_bytes())
    return h.hexdigest()


# --- the suite ------------------------------------------------------------------------------------
def validate_environment(domain_dir: Path, spec: DomainSpec | None = None, tries: int = 8, seed: int = 0,
                         unsafe: bool = False, quality: bool = True,
                         keep: list[tuple[Environment, str]] | None = None) -> dict[str, Any]:
    """Run the validation suite on a domain folder; returns {"tools": {name: report}, counts...}.

    keep: when given, a sandbox worker left healthy is appended to it as (the open Environment,
    environment_files of domain_dir) instead of being closed; the caller closes it. A build then
    builds the domain's scenarios on the same worker once the files are in place (one sandbox start
    per domain, not two: flows/build_worker.build_one, Environment.moved)."""
    t0 = time.perf_counter()
    domain_dir = Path(domain_dir)
    spec = spec or DomainSpec.load(domain_dir)
    per: dict[str, dict[str, Any]] = {
        t.name: {"name": t.name, "kind": t.kind, "executes": False, "runs": False,
                 "changes_state": None if t.kind == "read" else False,
                 "read_mutated": False, "signature_ok": False, "calls": 0, "errors": [], "reason": None}
        for t in spec.tools}

    def fail_all(reason: str, msg: str) -> dict[str, Any]:
        for r in per.values():
            r["reason"] = r["reason"] or reason
            r["errors"].append(msg[:300])
        return _summary(spec, per, domain_dir, t0)

    code = (domain_dir / spec.code_path).read_text("utf-8")
    try:
        fns = functions(code)
    except SyntaxError as exc:
        return fail_all("syntax", f"tools.py line {exc.lineno}: {exc.msg}")
    for t in spec.tools:
        fn = fns.get(t.name)
        if fn is None:
            per[t.name]["reason"] = "missing_function"
            per[t.name]["errors"].append(f"no function {t.name} in tools.py")
            continue
        problem = check_signature(fn, t)
        per[t.name]["signature_ok"] = problem is None
        if problem:
            per[t.name]["reason"] = "signature"
            per[t.name]["errors"].append(problem)

    try:
        rows = read_seed(spec, domain_dir / spec.seed_path)
    except sqlite3.Error as exc:
        return fail_all("environment", f"seed database unreadable: {exc}")
    state = StateView(spec, rows=rows)

    try:
        env = Environment.open(domain_dir, unsafe=unsafe)
    except Exception as exc:  # noqa: BLE001 - a domain whose code cannot load is a reported failure
        if "failed to load" in str(exc):
            return fail_all("load", f"{type(exc).__name__}: {exc}")
        # no sandbox at all (missing isolation, worker did not start): the machine, not the domain
        raise TransientError(f"sandbox unavailable for {domain_dir.name}: {type(exc).__name__}: {exc}") from exc
    quality_report: dict[str, Any] = {}
    # a caller-given new key only helps a tool that creates (its plan says so when one exists)
    creates = {n: p.get("action") == "create" for n, p in ((spec.report or {}).get("plans") or {}).items()
               if isinstance(p, dict)}
    healthy = False
    try:
        env.reset()
        seed_hash = env.state_hash()
        oracle = env.state_oracle()
        # arguments come from the seed database (the calls here are unrelated, not a walk: nothing to
        # chain). Tries go in rounds: every tool still untried or unproven gets its next try, and the
        # round's calls run in one round trip, each from the seed with tools.py run afresh and the
        # image after it (Environment.replay(images=True): what call_from_seed does for one call, so
        # no fresh sandbox child per write and no round trip per call). Each tool draws from its own
        # random stream, so its arguments do not depend on how the tries are grouped.
        todo = [t for t in sorted(spec.tools, key=lambda t: (t.kind != "read", t.name))
                if per[t.name]["reason"] not in ("missing_function", "signature")]
        rngs = {t.name: random.Random(f"validate:{spec.id}:{seed}:{t.name}") for t in todo}
        for i in range(tries):
            batch: list[tuple[ToolSpec, dict[str, Any]]] = []
            for t in todo:
                r = per[t.name]
                args, _ = ground_arguments(t, state, [], rngs[t.name], optional_prob=0.5 if i % 2 == 0 else 0.9,
                                           fresh_key=t.kind == "write" and i % 2 == 1 and creates.get(t.name, True)
                                           or None)
                if not valid(args, t.parameters):
                    r["errors"].append(f"sampled arguments invalid: {json.dumps(args, default=str)[:200]}")
                    r["reason"] = "invalid_arguments"
                    continue
                batch.append((t, args))
            done: set[str] = set()
            got = env.replay([[(t.name, args)] for t, args in batch], images=True) if batch else []
            for (t, _args), (results, image) in zip(batch, got):
                r, res = per[t.name], results[0]
                r["calls"] += 1
                changed = oracle.hash(image) != seed_hash  # replay(images=True): every episode has its image
                if res.ok:
                    r["runs"] = True
                    if t.kind == "write" or not is_empty(res.content):
                        r["executes"] = True
                elif res.error and len(r["errors"]) < 3 and res.error[:300] not in r["errors"]:
                    r["errors"].append(res.error[:300])
                if t.kind == "read" and changed:
                    r["read_mutated"] = True
                if t.kind == "write" and changed:
                    r["changes_state"] = True
                if r["executes"] and (t.kind == "read" or r["changes_state"]):
                    done.add(t.name)
            todo = [t for t in todo if t.name not in done]
            if not todo:
                break
        for t in spec.tools:
            r = per[t.name]
            if r["reason"] in ("missing_function", "signature"):
                continue
            if r["read_mutated"]:
                r["reason"] = "read_mutated"
            elif r["runs"] and not r["executes"]:
                r["reason"] = "empty_result"
            elif not r["executes"]:
                r["reason"] = "load" if any("failed to load" in e for e in r["errors"]) else (
                    r["reason"] or "tool_error")
            elif t.kind == "write" and not r["changes_state"]:
                r["reason"] = "no_state_change"
            else:
                r["reason"] = None
        if quality:
            quality_report = environment_quality(env, spec, state, seed)
        healthy = True
    except Exception as exc:  # noqa: BLE001 - the worker died or the runtime broke: report, never crash
        for r in per.values():
            if not r["executes"] and r["reason"] is None:
                r["reason"] = "environment"
                r["errors"].append(f"{type(exc).__name__}: {exc}"[:300])
    finally:
        files = None
        if keep is not None and healthy:
            try:
                files = environment_files(domain_dir)
            except (OSError, ValueError):  # unreadable now: nobody can tell it is the same environment
                files = None
        if files is not None:
            keep.append((env, files))
        else:
            try:
                env.close()
            except Exception:  # noqa: BLE001
                pass
    return _summary(spec, per, domain_dir, t0, rows, quality_report)


def _summary(spec: DomainSpec, per: dict[str, dict[str, Any]], domain_dir: Path, t0: float,
             rows: dict[str, list] | None = None, quality: dict[str, Any] | None = None) -> dict[str, Any]:
    n = len(per)
    ex = sum(1 for r in per.values() if r["executes"])
    return {
        "tools_total": n,
        "executes": ex,
        "execute_rate": round(ex / n, 4) if n else 0.0,
        "runs": sum(1 for r in per.values() if r["runs"]),
        "quality": quality or {},
        "reads": sum(1 for t in spec.tools if t.kind == "read"),
        "writes": sum(1 for t in spec.tools if t.kind == "write"),
        "writes_change_state": sum(1 for r in per.values() if r["kind"] == "write" and r["changes_state"]),
        "reads_mutating": sum(1 for r in per.values() if r["read_mutated"]),
        "seed_rows": {k: len(v) for k, v in (rows or {}).items()},
        "failures": dict(Counter(r["reason"] for r in per.values() if r["reason"])),
        "tools": per,
        "validate_s": round(time.perf_counter() - t0, 4),
    }
