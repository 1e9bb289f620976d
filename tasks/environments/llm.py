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
from tasks.environments.rules import dedupe_tools, synthesize_rules
from tasks.environments.synthesis import Synthesis, SynthesisError, discovered_edges
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
            v = _validate(spec, code, rows, unsafe)
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
        spec = spec.model_copy(update={"edges": discovered_edges({t.name for t in spec.tools}, record.get("edges")),
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
    with serve() as urls:  # AGENTSCALER_LLM_URL, else the local server for this call

        async def owned():
            async with LLMClient(urls, model=Settings.from_env().llm_model, timeout=300) as c:
                return await go(c)

        return asyncio.run(owned())
