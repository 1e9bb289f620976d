"""LLM environment synthesis with validation and a bounded repair loop (issue 5 item 4).

For one domain: the plan first (the rules' entity and verb contract, tasks.environments.contract:
the entities' tables and keys, each tool's kind, action, state moves and effects), then the model
writes, in three strict steps, the same artifacts as the rule-based synthesizer: the tables
(JSON, checked against a JSON Schema, envs.spec.TableSpec and the plan) plus the read/write kind
of each tool, the tool code (one ```python block, tool code contract of docs/ARCHITECTURE.md)
and the seed rows (JSON, checked against the tables). Then the whole environment is built in a
temporary folder and run through tasks.environments.validate in the sandbox, which also measures
its quality (every read finds something for seed values, ids resolve, writes are observable).
Any problem (a reply that is not the requested format, a schema that breaks the plan, a syntax
error, a forbidden import, a wrong signature, a tool that fails on the seed database, an
unresolved id, a write no read shows) is fed back to the model and that step is asked again, for
at most `max_rounds` rounds. A domain that still fails falls back to the
rule-based synthesizer (or raises SynthesisError), with rounds, tokens, errors and the reason
recorded in DomainSpec.report["synth_llm"].

Generated code never runs in this process: it is only `compile()`d and walked as an AST
(tasks.environments.llm_parse: strict parsing of every reply, static checks of the code); it
executes only in the sandbox worker through envs.episode.Environment.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from agentscaler.endpoints import serve
from agentscaler.llm import LLMClient, LLMError
from agentscaler.models import Tool
from agentscaler.settings import Settings
from envs.sandbox import unsafe_from_env
from envs.spec import DomainSpec, TableSpec, ToolSpec
from envs.store import build_seed, render_models_py
from tasks.environments import llm_prompt as P
from tasks.environments.llm_parse import (ALLOWED_IMPORTS, TABLES_SCHEMA, StepError, extract_code, parse_rows,
                                          parse_tables, rows_schema, static_check)
from tasks.environments.contract import contract_problems, entities_text, semantics_text
from tasks.environments.plan import Entity, Plan, plan_tools
from tasks.environments.dedupe import alias_report
from tasks.environments.rules import domain_name, infer_edges, prepare_tools, synthesize_rules
from tasks.environments.synthesis import Synthesis, SynthesisError
from tasks.environments.validate import validate_environment

STAGE = "synth_llm"
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
    min_quality: float = 0.95  # id coherence and write observability needed to accept (where measurable)
    json_schema: bool = True  # send response_format with the JSON Schema (vLLM / llama.cpp grammars)
    fallback: Literal["rules", "fail"] = "rules"


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


def _quality_problems(v: dict[str, Any], cfg: "SynthLLMConfig", readable: set[str]) -> list[str]:
    """Where the built environment misses the contract's quality bar: ids that resolve, and writes
    that a read shows (`readable`: the writes the plan gives a read tool to show them)."""
    q = v.get("quality") or {}
    out = []
    if q.get("id_coherence") is not None and q["id_coherence"] < cfg.min_quality:
        out.append(f"id parameters that name no seed row and no created id: {q.get('unresolved_ids')}")
    missed = {k: why for k, why in (q.get("unobserved") or {}).items() if k in readable}
    if readable and len(missed) > (1 - cfg.min_quality) * len(readable):
        out += [f"write {k}: {why} (a read tool must show what it changed)" for k, why in list(missed.items())[:8]]
    return out


def _readable_writes(plans: list[Plan], entities: dict[str, Entity]) -> set[str]:
    """Writes whose entity (or what they take from) some read tool of the plan is about."""
    read_tables = {entities[pl.entity].table for pl in plans if pl.kind == "read"}
    out = set()
    for pl in plans:
        if pl.kind != "write":
            continue
        touched = {entities[pl.entity].table} | {entities[e["ref"]].table for e in pl.effects if e.get("ref") in entities}
        if touched & read_tables:
            out.add(pl.name)
    return out


def _validation_feedback(v: dict[str, Any], rows: dict[str, list[dict[str, Any]]],
                         quality: list[str] | None = None) -> list[str]:
    out = []
    for r in v["tools"].values():
        if r["reason"]:
            errs = "; ".join(r["errors"][:2]) or ("a search that finds nothing for seed values"
                                                   if r["reason"] == "empty_result" else "-")
            out.append(f"tool {r['name']} ({r['kind']}): {r['reason']}: {errs}")
    out += quality or []
    sample = {t: rs[:1] for t, rs in rows.items()}
    out.append(f"(seed rows, first of each table: {json.dumps(sample, default=str)[:600]})")
    return out


# --- the loop ------------------------------------------------------------------------------------
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
                    cfg: SynthLLMConfig, unsafe: bool, plans: list[Plan], entities: dict[str, Entity]
                    ) -> tuple[DomainSpec | None, str, dict, dict[str, Any]]:
    ses = _Session(client, cfg, domain_id)
    ses.report["plan"] = {"entities": {e.name: e.table for _, e in sorted(entities.items())},
                          "kinds": {pl.name: pl.kind for pl in plans}}
    base = [ToolSpec(name=t.name, description=t.description or t.name, parameters=t.parameters, returns=t.returns,
                     kind="read", source_tool_id=t.id or None) for t in tools]
    names = [t.name for t in base]
    plan_kinds = "\n".join(f"- {pl.name}: {pl.kind}" for pl in plans)
    ses.start("tables", P.TABLES.format(name=name, tools=_tools_text(base), entities=entities_text(plans, entities),
                                        kinds=plan_kinds))
    tables: list[TableSpec] | None = None
    kinds: dict[str, str] = {}
    specs: list[ToolSpec] = base
    code: str | None = None
    rows: dict[str, list[dict[str, Any]]] | None = None
    spec: DomainSpec | None = None
    for rnd in range(1, cfg.max_rounds + 1):
        ses.report["rounds"] = rnd
        raw = None
        try:
            if tables is None:
                raw = await ses.ask("tables", cfg.max_tokens_tables, TABLES_SCHEMA)
                tables, kinds = parse_tables(raw, names)
                broken = contract_problems(tables, kinds, plans, entities)
                if broken:
                    tables = None
                    raise StepError("tables", "the schema breaks the plan: " + "; ".join(broken[:10]), raw)
                specs = [s.model_copy(update={"kind": kinds[s.name]}) for s in base]
                schema_txt = _schema_text(tables)
                ses.start("code", P.CODE.format(name=name, schema=schema_txt, tools=_tools_text(specs, kinds),
                                                semantics=semantics_text(plans, entities),
                                                allowed=", ".join(sorted(ALLOWED_IMPORTS - {"envs.toolkit", "__future__"}))))
                ses.start("rows", P.ROWS.format(name=name, schema=schema_txt, n_rows=cfg.n_rows))
            if code is None:
                raw = await ses.ask("code", cfg.max_tokens_code)
                candidate = extract_code(raw)
                problems = static_check(candidate, specs)
                if problems:
                    raise StepError("code", "; ".join(problems[:10]), raw)
                code = candidate
            if rows is None:
                raw = await ses.ask("rows", cfg.max_tokens_rows, rows_schema(tables, cfg.n_rows))
                rows = parse_rows(raw, tables, cfg.n_rows)
            spec = DomainSpec(id=domain_id, name=name, description=f"LLM-synthesized environment over "
                              f"{', '.join(t.name for t in tables)}.", tools=specs, tables=tables,
                              synthesizer="llm", seed=seed, report={"plans": _plan_report(plans, entities)})
            v = _validate(spec, code, rows, unsafe)
            ses.report["validate_s"] += v["validate_s"]
            ses.report["last_validation"] = {k: v[k] for k in ("executes", "tools_total", "execute_rate",
                                                                "reads_mutating", "writes_change_state", "failures")}
            ses.report["last_validation"]["quality"] = {k: (v.get("quality") or {}).get(k) for k in
                                                        ("id_coherence", "write_observability")}
            quality = _quality_problems(v, cfg, _readable_writes(plans, entities))
            if v["execute_rate"] >= cfg.accept_rate and v["reads_mutating"] == 0 and not quality:
                ses.report["status"] = "ok"
                ses.report["validation"] = v
                return spec, code, rows, ses.report
            fb = _validation_feedback(v, rows, quality)
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


def _plan_report(plans: list[Plan], entities: dict[str, Entity]) -> dict[str, Any]:
    """The plan as DomainSpec.report["plans"] (the table a tool is about grounds its scenario arguments)."""
    return {pl.name: {"kind": pl.kind, "kind_reason": pl.kind_reason, "action": pl.action, "entity": pl.entity,
                      "table": entities[pl.entity].table, "verb": pl.verb,
                      **({"anchor": entities[pl.anchor].table} if pl.anchor else {}),
                      **({"states": {pl.status_col: list(pl.status_from)}} if pl.status_from else {})}
            for pl in plans}


def _validate(spec: DomainSpec, code: str, rows: dict, unsafe: bool) -> dict:
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
    cfg = config if isinstance(config, SynthLLMConfig) else SynthLLMConfig.model_validate(config or {})
    record = record or {}
    unsafe = unsafe_from_env() if unsafe is None else unsafe
    members, skipped, aliases, bad = prepare_tools(tools)
    if not members:
        raise SynthesisError(f"domain {domain_id}: no tools to synthesize")
    skipped = {**skipped, **{a: f"near_duplicate_of:{r}" for a, r in aliases.items()}}
    plans, entities = plan_tools(members)  # the contract the model is held to
    name = str(record.get("name") or "") or domain_name(plans, entities)
    t0 = time.perf_counter()
    spec, code, rows, report = _run(client, domain_id, name, members, seed, cfg, unsafe, plans, entities)
    report["wall_s"] = round(time.perf_counter() - t0, 3)
    report["llm_s"] = round(report["llm_s"], 3)
    report["validate_s"] = round(report["validate_s"], 3)
    if spec is not None:
        spec = spec.model_copy(update={"edges": infer_edges(plans, record.get("edges"), entities),
                                       "report": {"synth_llm": report, "fallback": None,
                                                  "plans": spec.report.get("plans"),
                                                  "near_duplicates": alias_report(aliases),
                                                  "bad_input": {k: sorted(v) for k, v in sorted(bad.items())}}})
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
         unsafe: bool, plans: list[Plan], entities: dict[str, Entity]):
    async def go(c: LLMClient):
        return await _generate(c, domain_id, name, tools, seed, cfg, unsafe, plans, entities)

    if client is not None:
        return asyncio.run(go(client))
    with serve() as urls:  # AGENTSCALER_LLM_URL, else the local server for this call

        async def owned():
            async with LLMClient(urls, model=Settings.from_env().llm_model, timeout=300) as c:
                return await go(c)

        return asyncio.run(owned())
