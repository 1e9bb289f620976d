"""LLM environment synthesis with validation and a bounded repair loop (issue 5 item 4).

For one domain the model writes, in three strict steps, the same artifacts as the rule-based
synthesizer: the tables (JSON, checked against a JSON Schema and envs.spec.TableSpec) plus the
read/write kind of each tool, the tool code (one ```python block, tool code contract of
docs/ARCHITECTURE.md) and the seed rows (JSON, checked against the tables). Then the whole
environment is built in a temporary folder and run through tasks.environments.validate in the sandbox.
Any problem (a reply that is not the requested format, a syntax error, a forbidden import, a
wrong signature, a tool that fails on the seed database) is fed back to the model and that step
is asked again, for at most `max_rounds` rounds. A domain that still fails falls back to the
rule-based synthesizer (or raises SynthesisError), with rounds, tokens, errors and the reason
recorded in DomainSpec.report["synth_llm"].

Generated code never runs in this process: it is only `compile()`d and walked as an AST here
(imports outside ALLOWED_IMPORTS, dangerous builtins and dunder attributes are rejected before it
reaches the sandbox); it executes only in the sandbox worker through envs.episode.Environment.
Strict parsing: a malformed reply is an error with its raw text kept, never repaired into data.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from agentscaler.llm import LLMClient, LLMError, LLMFormatError, parse_json_reply
from agentscaler.models import Tool
from envs.spec import DomainSpec, Edge, TableSpec, ToolSpec
from tasks.environments import llm_prompt as P
from tasks.environments.synthesize import SynthesisError

STAGE = "synth_llm"
ALLOWED_IMPORTS = frozenset({"envs.toolkit", "json", "re", "math", "datetime", "decimal", "itertools",
                             "collections", "functools", "string", "statistics", "typing", "__future__"})
FORBIDDEN_NAMES = frozenset({"exec", "eval", "compile", "open", "__import__", "getattr", "setattr", "delattr",
                             "vars", "locals", "input", "breakpoint", "memoryview", "help", "exit", "quit",
                             "__builtins__", "__loader__", "__spec__"})
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)\n?```", re.DOTALL)


class SynthLLMConfig(BaseModel):
    """Knobs of the LLM synthesizer (defaults sized for a capable model behind vLLM)."""

    model_config = ConfigDict(extra="forbid")

    max_rounds: int = 3  # rounds of the generate -> validate -> repair loop
    max_tokens_tables: int = 1536
    max_tokens_code: int = 4096
    max_tokens_rows: int = 2048
    n_rows: int = 4  # seed rows asked per table
    temperature: float = 0.0
    accept_rate: float = 1.0  # share of tools that must execute (and no read may mutate) to accept
    json_schema: bool = True  # send response_format with the JSON Schema (vLLM / llama.cpp grammars)
    fallback: Literal["rules", "fail"] = "rules"


class StepError(Exception):
    """One step's reply was unusable: what is wrong, which step, and the raw reply kept as sent."""

    def __init__(self, step: str, message: str, raw: str | None = None):
        super().__init__(message)
        self.step, self.raw = step, raw


# --- strict parsing and static checks (data and text only; nothing generated is executed) --------
TABLES_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["tables", "tools"],
    "properties": {
        "tables": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False, "required": ["name", "primary_key", "columns"],
            "properties": {
                "name": {"type": "string"},
                "primary_key": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                "columns": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False, "required": ["name", "type"],
                    "properties": {"name": {"type": "string"},
                                   "type": {"enum": ["integer", "real", "text", "boolean", "json"]},
                                   "nullable": {"type": "boolean"},
                                   "foreign_key": {"type": ["string", "null"]}}}}}}},
        "tools": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["name", "kind"],
            "properties": {"name": {"type": "string"}, "kind": {"enum": ["read", "write"]}}}}}}


def parse_tables(text: str | None, tool_names: list[str]) -> tuple[list[TableSpec], dict[str, str]]:
    """The tables reply -> (TableSpecs, tool name -> kind). Raises StepError naming the problem."""
    try:
        value = parse_json_reply(text, TABLES_SCHEMA)
    except LLMFormatError as exc:
        raise StepError("tables", str(exc), text) from None
    problems: list[str] = []
    tables: list[TableSpec] = []
    for i, t in enumerate(value["tables"]):
        try:
            tables.append(TableSpec.model_validate(t))
        except ValidationError as exc:
            problems.append(f"tables[{i}]: {exc.errors()[0]['msg']}")
    by_name = {t.name: t for t in tables}
    if len(by_name) != len(tables):
        problems.append("duplicate table names")
    for t in tables:
        cols = [c.name for c in t.columns]
        for n in [t.name, *cols]:
            if not _IDENT.match(n):
                problems.append(f"name {n!r} (table {t.name}) is not a plain identifier")
        if len(set(cols)) != len(cols):
            problems.append(f"table {t.name}: duplicate column names")
        missing = [k for k in t.primary_key if k not in cols]
        if missing:
            problems.append(f"table {t.name}: primary key columns {missing} are not columns")
        for c in t.columns:
            if c.foreign_key:
                ref_t, _, ref_c = c.foreign_key.partition(".")
                if ref_t not in by_name or ref_c not in [x.name for x in by_name[ref_t].columns]:
                    problems.append(f"{t.name}.{c.name}: foreign key {c.foreign_key!r} names no column")
    kinds = {x["name"]: x["kind"] for x in value["tools"]}
    missing_tools = [n for n in tool_names if n not in kinds]
    unknown = [n for n in kinds if n not in tool_names]
    if missing_tools:
        problems.append(f"tools without a kind: {missing_tools}")
    if unknown:
        problems.append(f"unknown tools: {unknown}")
    if problems:
        raise StepError("tables", "; ".join(problems), text)
    return tables, kinds


def extract_code(text: str | None) -> str:
    """The reply must be exactly one ```python fenced block (whitespace around it only)."""
    if not text or not text.strip():
        raise StepError("code", "empty reply: expected one ```python fenced block", text)
    blocks = list(_FENCE.finditer(text))
    if len(blocks) != 1:
        raise StepError("code", f"expected exactly one ```python fenced block, found {len(blocks)}", text)
    outside = (text[:blocks[0].start()] + text[blocks[0].end():]).strip()
    if outside:
        raise StepError("code", f"text outside the code block: {outside[:120]!r}", text)
    return blocks[0].group(1) + "\n"


def _globals_alias_calls(tree: ast.Module) -> set[int]:
    """ids of the `globals()` calls used only as `globals()["odd-name"] = fn` at module level."""
    ok = set()
    for n in tree.body:
        if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Subscript)
                and isinstance(n.targets[0].value, ast.Call) and isinstance(n.targets[0].value.func, ast.Name)
                and n.targets[0].value.func.id == "globals" and not n.targets[0].value.args
                and isinstance(n.targets[0].slice, ast.Constant) and isinstance(n.value, ast.Name)):
            ok.add(id(n.targets[0].value.func))
    return ok


def static_check(code: str, tools: list[ToolSpec]) -> list[str]:
    """Problems of generated tool code found without running it: syntax (compile only), imports
    outside ALLOWED_IMPORTS, dangerous builtins, dunder attributes, missing functions, signatures."""
    from tasks.environments.validate import _functions, check_signature

    try:
        compile(code, "tools.py", "exec", dont_inherit=True)  # syntax only: the code object is dropped
        tree = ast.parse(code)
    except (SyntaxError, ValueError) as exc:
        return [f"syntax error line {getattr(exc, 'lineno', '?')}: {getattr(exc, 'msg', exc)}"]
    problems: list[str] = []
    aliases = _globals_alias_calls(tree)
    for node in ast.walk(tree):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name not in ALLOWED_IMPORTS:
                    problems.append(f"{where}: import {a.name} is not allowed (allowed: {sorted(ALLOWED_IMPORTS)})")
        elif isinstance(node, ast.ImportFrom):
            if node.level or node.module not in ALLOWED_IMPORTS:
                problems.append(f"{where}: from {'.' * node.level}{node.module or ''} import ... is not allowed")
        elif isinstance(node, ast.Name) and (node.id in FORBIDDEN_NAMES or node.id == "globals"):
            if id(node) not in aliases:
                problems.append(f"{where}: use of {node.id} is not allowed")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            problems.append(f"{where}: dunder attribute .{node.attr} is not allowed")
        elif isinstance(node, ast.Attribute) and node.attr == "conn":
            problems.append(f"{where}: .conn is not allowed (use the db helper methods)")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            problems.append(f"{where}: global/nonlocal state is not allowed")
    if problems:
        return problems
    fns = _functions(code)
    for t in tools:
        fn = fns.get(t.name)
        if fn is None:
            problems.append(f"no function for tool {t.name}")
        elif (p := check_signature(fn, t)) is not None:
            problems.append(f"tool {t.name}: {p}")
    return problems


_PY = {"integer": (int,), "real": (int, float), "text": (str,), "boolean": (bool,), "json": (dict, list)}


def rows_schema(tables: list[TableSpec], n_rows: int) -> dict[str, Any]:
    """JSON Schema of the rows reply, derived from the tables (so a grammar can constrain it)."""
    js = {"integer": "integer", "real": "number", "text": "string", "boolean": "boolean"}
    props = {}
    for t in tables:
        cols = {}
        for c in t.columns:
            s: dict[str, Any] = {"type": [js[c.type], "null"] if c.nullable else js[c.type]} if c.type in js else {}
            cols[c.name] = s
        props[t.name] = {"type": "array", "minItems": 1, "maxItems": max(n_rows * 3, 10),
                         "items": {"type": "object", "properties": cols, "required": list(t.primary_key),
                                   "additionalProperties": False}}
    return {"type": "object", "additionalProperties": False, "required": ["rows"],
            "properties": {"rows": {"type": "object", "properties": props, "required": [t.name for t in tables],
                                    "additionalProperties": False}}}


def parse_rows(text: str | None, tables: list[TableSpec], n_rows: int = 4) -> dict[str, list[dict[str, Any]]]:
    """The rows reply -> rows per table (types, unique primary keys, foreign keys that resolve)."""
    try:
        value = parse_json_reply(text, rows_schema(tables, n_rows))
    except LLMFormatError as exc:
        raise StepError("rows", str(exc), text) from None
    rows: dict[str, list[dict[str, Any]]] = value["rows"]
    problems: list[str] = []
    for t in tables:
        seen = set()
        for i, r in enumerate(rows[t.name]):
            for c in t.columns:
                v = r.get(c.name)
                if v is None:
                    if not c.nullable or c.name in t.primary_key:
                        problems.append(f"{t.name}[{i}].{c.name} is null")
                elif not isinstance(v, _PY[c.type]) or (c.type != "boolean" and isinstance(v, bool)):
                    problems.append(f"{t.name}[{i}].{c.name}: {v!r} is not {c.type}")
            key = tuple(json.dumps(r.get(k), sort_keys=True) for k in t.primary_key)
            if key in seen:
                problems.append(f"{t.name}[{i}]: duplicate primary key {key}")
            seen.add(key)
    by_name = {t.name: t for t in tables}
    for t in tables:
        for c in t.columns:
            if not c.foreign_key:
                continue
            ref_t, _, ref_c = c.foreign_key.partition(".")
            have = {json.dumps(r.get(ref_c)) for r in rows.get(ref_t, [])} if ref_t in by_name else set()
            for i, r in enumerate(rows[t.name]):
                if r.get(c.name) is not None and json.dumps(r[c.name]) not in have:
                    problems.append(f"{t.name}[{i}].{c.name}={r[c.name]!r} is not in {c.foreign_key}")
    if problems:
        raise StepError("rows", "; ".join(problems[:12]), text)
    return rows


# --- prompt rendering ----------------------------------------------------------------------------
def _tools_text(tools: list[ToolSpec], kinds: dict[str, str] | None = None) -> str:
    lines = []
    for t in tools:
        kind = f" [{kinds[t.name]}]" if kinds and t.name in kinds else ""
        lines.append(f"- {t.name}{kind}: {t.description.strip()[:300]}\n  parameters: "
                     f"{json.dumps(t.parameters, sort_keys=True)[:800]}")
    return "\n".join(lines)


def _schema_text(tables: list[TableSpec]) -> str:
    out = []
    for t in tables:
        cols = ", ".join(f"{c.name} {c.type}" + (f" -> {c.foreign_key}" if c.foreign_key else "") for c in t.columns)
        out.append(f"- {t.name}({cols}); primary key {t.primary_key}")
    return "\n".join(out)


def _validation_feedback(v: dict[str, Any], rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    out = []
    for r in v["tools"].values():
        if r["reason"]:
            errs = "; ".join(r["errors"][:2]) or "-"
            out.append(f"tool {r['name']} ({r['kind']}): {r['reason']}: {errs}")
    sample = {t: rs[:1] for t, rs in rows.items()}
    out.append(f"(seed rows, first of each table: {json.dumps(sample, default=str)[:600]})")
    return out


# --- the loop ------------------------------------------------------------------------------------
def _edges(names: set[str], given: list[dict[str, Any]] | None) -> list[Edge]:
    out: dict[tuple[str, str, str], Edge] = {}
    for g in given or []:
        try:
            src, dst = g["src"], g["dst"]
            kind = g.get("kind") if g.get("kind") in ("similar", "dataflow") else "dataflow"
            if src in names and dst in names and src != dst:
                out[(src, dst, kind)] = Edge(src=src, dst=dst, kind=kind, weight=float(g.get("weight", 1.0)))
        except (KeyError, TypeError, ValueError):
            continue
    return [out[k] for k in sorted(out)]


class _Session:
    """One domain's conversations with the model, and the bookkeeping for the report."""

    def __init__(self, client: LLMClient, cfg: SynthLLMConfig, domain_id: str):
        self.client, self.cfg, self.domain_id = client, cfg, domain_id
        self.report: dict[str, Any] = {"rounds": 0, "llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0,
                                       "cached_calls": 0, "llm_s": 0.0, "validate_s": 0.0, "errors": [],
                                       "status": "running", "fallback": None, "reason": None}
        self.convs: dict[str, list[dict[str, Any]]] = {}

    def start(self, step: str, user: str) -> None:
        self.convs[step] = [{"role": "system", "content": P.SYSTEM}, {"role": "user", "content": user}]

    def feedback(self, step: str, raw: str | None, errors: list[str], what: str) -> None:
        """Keep the first request, the last reply and the errors (bounded context)."""
        conv = self.convs[step][:2]
        if raw is not None:
            conv.append({"role": "assistant", "content": raw[:6000]})
        conv.append({"role": "user", "content": P.REPAIR.format(errors="\n".join(f"- {e}" for e in errors[:15]),
                                                                what=what)})
        self.convs[step] = conv

    async def ask(self, step: str, max_tokens: int, schema: dict[str, Any] | None = None) -> str | None:
        kwargs: dict[str, Any] = {}
        if schema is not None and self.cfg.json_schema:
            kwargs["response_format"] = {"type": "json_object", "schema": schema}
        t0 = time.perf_counter()
        try:
            reply = await self.client.chat(self.convs[step], temperature=self.cfg.temperature, max_tokens=max_tokens,
                                           stage=STAGE, cache_salt=f"{self.domain_id}:{step}", **kwargs)
        except LLMError as exc:
            if exc.transient:
                raise  # the server, not the domain: let the caller's retry policy decide
            raise StepError(step, f"{type(exc).__name__}: {exc}", getattr(exc, "raw", None)) from None
        finally:
            self.report["llm_s"] += time.perf_counter() - t0
        self.report["llm_calls"] += 1
        self.report["cached_calls"] += int(reply.cached)
        self.report["prompt_tokens"] += int(reply.usage.get("prompt_tokens") or 0)
        self.report["completion_tokens"] += int(reply.usage.get("completion_tokens") or 0)
        if reply.finish_reason == "length":
            raise StepError(step, f"reply cut at max_tokens={max_tokens} (finish_reason=length)", reply.content)
        return reply.content


async def _generate(client: LLMClient, domain_id: str, name: str, tools: list[Tool], seed: int,
                    cfg: SynthLLMConfig, unsafe: bool) -> tuple[DomainSpec | None, str, dict, dict[str, Any]]:
    from envs.store import build_seed
    from tasks.environments.validate import validate_environment

    ses = _Session(client, cfg, domain_id)
    base = [ToolSpec(name=t.name, description=t.description or t.name, parameters=t.parameters, returns=t.returns,
                     kind="read", source_tool_id=t.id or None) for t in tools]
    names = [t.name for t in base]
    ses.start("tables", P.TABLES.format(name=name, tools=_tools_text(base)))
    tables: list[TableSpec] | None = None
    kinds: dict[str, str] = {}
    specs: list[ToolSpec] = base
    code: str | None = None
    rows: dict[str, list[dict[str, Any]]] | None = None
    spec: DomainSpec | None = None
    for rnd in range(1, cfg.max_rounds + 1):
        ses.report["rounds"] = rnd
        step, raw = "tables", None
        try:
            if tables is None:
                raw = await ses.ask("tables", cfg.max_tokens_tables, TABLES_SCHEMA)
                tables, kinds = parse_tables(raw, names)
                specs = [s.model_copy(update={"kind": kinds[s.name]}) for s in base]
                schema_txt = _schema_text(tables)
                ses.start("code", P.CODE.format(name=name, schema=schema_txt, tools=_tools_text(specs, kinds),
                                                allowed=", ".join(sorted(ALLOWED_IMPORTS - {"envs.toolkit", "__future__"}))))
                ses.start("rows", P.ROWS.format(name=name, schema=schema_txt, n_rows=cfg.n_rows))
            if code is None:
                step = "code"
                raw = await ses.ask("code", cfg.max_tokens_code)
                candidate = extract_code(raw)
                problems = static_check(candidate, specs)
                if problems:
                    raise StepError("code", "; ".join(problems[:10]), raw)
                code = candidate
            if rows is None:
                step = "rows"
                raw = await ses.ask("rows", cfg.max_tokens_rows, rows_schema(tables, cfg.n_rows))
                rows = parse_rows(raw, tables, cfg.n_rows)
            step = "validate"
            spec = DomainSpec(id=domain_id, name=name, description=f"LLM-synthesized environment over "
                              f"{', '.join(t.name for t in tables)}.", tools=specs, tables=tables,
                              synthesizer="llm", seed=seed)
            v = _validate(spec, code, rows, unsafe, build_seed, validate_environment)
            ses.report["validate_s"] += v["validate_s"]
            ses.report["last_validation"] = {k: v[k] for k in ("executes", "tools_total", "execute_rate",
                                                                "reads_mutating", "writes_change_state", "failures")}
            if v["execute_rate"] >= cfg.accept_rate and v["reads_mutating"] == 0:
                ses.report["status"] = "ok"
                return spec, code, rows, ses.report
            fb = _validation_feedback(v, rows)
            ses.report["errors"].append({"round": rnd, "step": "validate", "error": "; ".join(fb[:-1])[:1500]})
            ses.feedback("code", code and f"```python\n{code}```", fb, "tools.py")
            code = None
        except StepError as exc:
            ses.report["errors"].append({"round": rnd, "step": exc.step, "error": str(exc)[:1500],
                                         "raw": (exc.raw or "")[:2000]})
            if exc.step == "rows":
                rows = None  # also when the store refused the rows: ask for them again
            ses.feedback(exc.step, exc.raw, [str(exc)],
                         {"tables": "JSON object", "code": "tools.py", "rows": "JSON object"}[exc.step])
    ses.report["status"] = "failed"
    last = ses.report["errors"][-1] if ses.report["errors"] else {"step": "-", "error": "-"}
    ses.report["reason"] = f"no valid environment after {cfg.max_rounds} rounds (last: {last['step']}: {last['error'][:300]})"
    return None, "", {}, ses.report


def _validate(spec: DomainSpec, code: str, rows: dict, unsafe: bool, build_seed, validate_environment) -> dict:
    """Build the environment in a temporary folder and run the validation suite (in the sandbox)."""
    stage = Path(tempfile.mkdtemp(prefix=f"synth_llm_{spec.id}_"))
    try:
        (stage / "tools.py").write_text(code, "utf-8")
        try:
            build_seed(spec, rows, stage / "seed.sqlite")
        except Exception as exc:  # noqa: BLE001 - bad rows or schema the store refuses: a step error
            raise StepError("rows", f"seed database build failed: {type(exc).__name__}: {str(exc)[:300]}") from None
        (stage / "spec.json").write_text(spec.model_dump_json(), "utf-8")
        return validate_environment(stage, spec, seed=spec.seed, unsafe=unsafe)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def synthesize_llm(domain_id: str, tools: list[Tool], record: dict[str, Any] | None = None, seed: int = 0,
                   client: LLMClient | None = None, config: SynthLLMConfig | dict | None = None,
                   unsafe: bool | None = None):
    """The LLM synthesis of one domain -> tasks.environments.rules.Synthesis (same artifacts as the rules).

    client: an LLMClient (default: AGENTSCALER_LLM_URL / AGENTSCALER_LLM_MODEL; without a URL the
    local llama.cpp server is started for this call). On failure after max_rounds the domain falls
    back to the rule-based synthesizer (config.fallback="rules", recorded in the report) or raises
    SynthesisError (fallback="fail"; the report rides on the exception as `.report`).
    """
    from envs.sandbox import unsafe_from_env
    from envs.store import render_models_py
    from tasks.environments.rules import Synthesis, synthesize_rules

    cfg = config if isinstance(config, SynthLLMConfig) else SynthLLMConfig.model_validate(config or {})
    record = record or {}
    unsafe = unsafe_from_env() if unsafe is None else unsafe
    from tasks.environments.rules import dedupe_tools

    members, skipped = dedupe_tools(sorted(tools, key=lambda t: t.name))
    if not members:
        raise SynthesisError(f"domain {domain_id}: no tools to synthesize")
    name = str(record.get("name") or "") or "_".join(t.name for t in members[:3])
    t0 = time.perf_counter()
    spec, code, rows, report = _run(client, domain_id, name, members, seed, cfg, unsafe)
    report["wall_s"] = round(time.perf_counter() - t0, 3)
    report["llm_s"] = round(report["llm_s"], 3)
    report["validate_s"] = round(report["validate_s"], 3)
    if spec is not None:
        spec = spec.model_copy(update={"edges": _edges({t.name for t in spec.tools}, record.get("edges")),
                                       "report": {"synth_llm": report, "fallback": None}})
        return Synthesis(spec=spec, models_py=render_models_py(spec), tools_py=code, rows=rows, skipped=skipped)
    if cfg.fallback == "rules":
        report["fallback"] = "rules"
        syn = synthesize_rules(domain_id, tools, name=str(record.get("name") or ""),
                               given_edges=record.get("edges"), seed=seed)
        syn.spec.report.update({"synth_llm": report, "fallback": "rules", "fallback_reason": report["reason"]})
        return syn
    err = SynthesisError(f"domain {domain_id}: LLM synthesis failed: {report['reason']}")
    err.report = report  # type: ignore[attr-defined]
    raise err


def _run(client: LLMClient | None, domain_id: str, name: str, tools: list[Tool], seed: int, cfg: SynthLLMConfig,
         unsafe: bool):
    async def go(c: LLMClient):
        return await _generate(c, domain_id, name, tools, seed, cfg, unsafe)

    if client is not None:
        return asyncio.run(go(client))
    from agentscaler.settings import Settings

    s = Settings.from_env()
    if s.llm_url:
        async def owned():
            async with LLMClient(s.llm_url, model=s.llm_model, timeout=300) as c:
                return await go(c)
        return asyncio.run(owned())
    from agentscaler.llm_server import local_server

    with local_server() as url:
        async def local():
            async with LLMClient(url, model=s.llm_model, timeout=300) as c:
                return await go(c)
        return asyncio.run(local())
