"""Synthesize stage: a discovered domain -> an executable environment in domains/<id>/.

`synthesize_domain` (plain) writes models.py, tools.py, seed.sqlite and, LAST, spec.json (its
presence means "environment finished"). The files are first built and validated in a staging
folder under <ws>/cache/synth/ (the Environment runs them in the sandbox from there), then moved
into place. An identical environment (same content hash) already on disk is not rewritten.
flows/build_environments.py runs it as one Prefect task per domain, retried only for transient
failures (a broken domain fails the same way every time).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any

from agentscaler import progress
from agentscaler.artifacts import load_domains, load_tools
from agentscaler.catalog import Catalog
from agentscaler.errors import error_text, tag_stage
from agentscaler.hashing import content_hash
from agentscaler.models import Tool
from agentscaler.workspace import Workspace, atomic_write_json, atomic_write_text
from envs.spec import DomainSpec
from envs.store import build_seed
from tasks.environments.llm import synthesize_llm
from tasks.environments.rules import synthesize_rules
from tasks.environments.synthesis import SynthesisError
from tasks.environments.validate import validate_environment

STAGE = "synthesize"


def tool_positions(tools: list[Tool]) -> dict[str, int]:
    """Each tool id's position in the corpus: `domain_tools` by index instead of a scan of the corpus
    per domain (thousands of domains times tens of thousands of tools)."""
    return {t.id: i for i, t in enumerate(tools) if t.id}


def domain_tools(record: dict[str, Any], tools: list[Tool], where: dict[str, int] | None = None) -> list[Tool]:
    """The record's member tools in corpus order, by id (names when ids do not match: fixtures, older
    graphs); `where` = tool_positions(tools) finds the ids without a scan."""
    if where is not None:
        found = sorted({where[i] for i in record.get("tools") or [] if isinstance(i, str) and i in where})
        if found:
            return [tools[i] for i in found]
    ids = set(record.get("tools") or [])
    members = [t for t in tools if t.id and t.id in ids]
    if not members:
        names = set(record.get("names") or [])
        members = [t for t in tools if t.name in names]
    return members


def _synthesize(domain_id: str, members: list[Tool], record: dict[str, Any], synth: str, seed: int,
                unsafe: bool = False, options: dict[str, Any] | None = None):
    if synth == "rules":
        return synthesize_rules(domain_id, members, name=str(record.get("name") or ""),
                                given_edges=record.get("edges"), seed=seed)
    if synth == "llm":
        return synthesize_llm(domain_id, members, record=record, seed=seed, unsafe=unsafe, **(options or {}))
    raise SynthesisError(f"unknown synthesizer {synth!r} (rules | llm)")


def _content_id(syn: Any) -> str:
    spec = syn.spec.model_dump(exclude={"report"})
    for t in spec["tools"]:  # a corpus tool hashes as before the field existed: untouched domains are not rebuilt
        if t.get("origin") == "corpus":
            t.pop("origin")
    return content_hash({"spec": spec, "code": syn.tools_py, "models": syn.models_py, "rows": syn.rows})


def synthesize_domain(ws: Workspace, domain_record: dict[str, Any], tools: list[Tool], synth: str = "rules",
                      seed: int = 0, validate: bool = True, unsafe: bool = False,
                      catalog: Catalog | None = None, synth_options: dict[str, Any] | None = None,
                      keep: list[Any] | None = None) -> DomainSpec:
    """Build (or find) the environment of one domain and return its DomainSpec (report included).

    synth_options: keyword arguments for the synthesizer (llm: client=LLMClient, config=SynthLLMConfig).
    keep: validation's sandbox worker is handed over in it instead of closed (validate_environment)."""
    domain_id = domain_record.get("domain") if isinstance(domain_record, dict) else None
    if not isinstance(domain_id, str) or not domain_id or "/" in domain_id or domain_id.startswith("."):
        raise SynthesisError(f"domain record without a valid 'domain' id: {str(domain_record)[:200]}")
    catalog = catalog or Catalog(ws.catalog_path)
    catalog.mark(domain_id, STAGE, "running")
    try:
        with ws.domain_lock(domain_id):  # two runs on one workspace build a domain once: the second finds it
            spec = _build(ws, domain_id, domain_record, tools, synth, seed, validate, unsafe, synth_options, keep)
    except Exception as exc:
        catalog.mark(domain_id, STAGE, "failed", error=error_text(exc))
        tag_stage(exc, STAGE)
        raise
    catalog.mark(domain_id, STAGE, "done", artifact=spec.report.get("content_id"))
    return spec


def _build(ws: Workspace, domain_id: str, record: dict[str, Any], tools: list[Tool], synth: str, seed: int,
           validate: bool, unsafe: bool, synth_options: dict[str, Any] | None = None,
           keep: list[Any] | None = None) -> DomainSpec:
    members = domain_tools(record, tools)
    if not members:
        raise SynthesisError(f"domain {domain_id}: none of its tools are in the corpus")
    t0 = time.perf_counter()
    syn = _synthesize(domain_id, members, record, synth, seed, unsafe, synth_options)
    gen_s = time.perf_counter() - t0
    cid = _content_id(syn)
    final = ws.domain_dir(domain_id)
    spec_path = final / "spec.json"
    if spec_path.exists():
        try:
            old = DomainSpec.load(final)
            if old.report.get("content_id") == cid and (not validate or "validation" in old.report):
                return old  # identical environment already finished
        except Exception:  # noqa: BLE001 - a corrupt old spec is rebuilt
            pass
    stage = ws.cache_dir / "synth" / f"{domain_id}.{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    try:
        atomic_write_text(stage / "models.py", syn.models_py)
        atomic_write_text(stage / "tools.py", syn.tools_py)
        build_seed(syn.spec, syn.rows, stage / "seed.sqlite")
        spec = syn.spec
        report: dict[str, Any] = dict(spec.report)
        report.update({"content_id": cid, "generate_s": round(gen_s, 4), "skipped_tools": syn.skipped,
                       "seed_rows": {k: len(v) for k, v in syn.rows.items()},
                       "reads": sum(t.kind == "read" for t in spec.tools),
                       "writes": sum(t.kind == "write" for t in spec.tools)})
        atomic_write_json(stage / "spec.json", json.loads(spec.model_dump_json()))
        if validate:
            v = validate_environment(stage, spec, seed=seed, unsafe=unsafe, keep=keep)
            report["validation"] = v
            report.update({k: v[k] for k in ("executes", "runs", "tools_total", "execute_rate", "failures",
                                             "quality")})
            if v["runs"] == 0:
                raise SynthesisError(f"domain {domain_id}: no tool runs "
                                     f"({json.dumps(v['failures'])}; e.g. {_first_error(v)})")
        spec = spec.model_copy(update={"report": report})
        final.mkdir(parents=True, exist_ok=True)
        (final / "spec.json").unlink(missing_ok=True)  # an old, different environment is unfinished now
        for name in ("models.py", "tools.py", "seed.sqlite"):
            os.replace(stage / name, final / name)
        atomic_write_json(final / "spec.json", json.loads(spec.model_dump_json()))  # LAST
        return spec
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _first_error(v: dict[str, Any]) -> str:
    for r in v["tools"].values():
        if r["errors"]:
            return f"{r['name']}: {r['errors'][0]}"
    return "-"


def load_domain_records(ws: Workspace) -> list[dict[str, Any]]:
    """The discovered domains (graph/domains.json); a clear error before discovery."""
    if not ws.domains_path.exists():
        raise SynthesisError(f"{ws.domains_path} not found: run `agentscaler discover` first")
    try:
        return load_domains(ws)
    except ValueError as exc:
        raise SynthesisError(str(exc)) from None


def synthesize_all(ws: Workspace, synth: str = "rules", seed: int = 0, validate: bool = True, unsafe: bool = False,
                   limit: int | None = None) -> dict[str, Any]:
    """Every domain of graph/domains.json, one after another; a failed domain never stops the rest."""
    records = load_domain_records(ws)[:limit]
    tools = load_tools(ws.tools_path)
    catalog = Catalog(ws.catalog_path)
    out: dict[str, Any] = {"domains": [], "counts": {"done": 0, "failed": 0}, "failures": {},
                           "tools_total": 0, "tools_execute": 0, "reads": 0, "writes": 0,
                           "writes_change_state": 0, "reads_mutating": 0, "bad_input": {}, "near_duplicates_merged": 0}
    with progress.stage("synthesize", total=len(records), unit="domains") as bar:
        for rec in records:
            did = rec.get("domain") if isinstance(rec, dict) else None
            try:
                spec = synthesize_domain(ws, rec, tools, synth=synth, seed=seed, validate=validate, unsafe=unsafe,
                                         catalog=catalog)
            except Exception as exc:  # noqa: BLE001 - counted and reported, the run goes on
                out["counts"]["failed"] += 1
                out["domains"].append({"domain": did, "status": "failed", "error": error_text(exc)[:500]})
                bar.advance(note=f"{did} failed")
                continue
            r = spec.report
            v = r.get("validation", {})
            out["counts"]["done"] += 1
            out["tools_total"] += len(spec.tools)
            out["tools_execute"] += r.get("executes", 0)
            out["reads"] += r.get("reads", 0)
            out["writes"] += r.get("writes", 0)
            out["writes_change_state"] += v.get("writes_change_state", 0)
            out["reads_mutating"] += v.get("reads_mutating", 0)
            for k, n in (r.get("failures") or {}).items():
                out["failures"][k] = out["failures"].get(k, 0) + n
            for k, names in (r.get("bad_input") or {}).items():  # tools given a documented default, by reason
                out["bad_input"][k] = out["bad_input"].get(k, 0) + len(names)
            out["near_duplicates_merged"] += (r.get("near_duplicates") or {}).get("merged", 0)
            out["domains"].append({"domain": spec.id, "status": "done", "tools": len(spec.tools),
                                   "executes": r.get("executes"), "reads": r.get("reads"), "writes": r.get("writes"),
                                   "seed_rows": sum((r.get("seed_rows") or {}).values()),
                                   "failures": r.get("failures")})
            bar.advance(note=spec.id)
    n = out["tools_total"]
    out["execute_rate"] = round(out["tools_execute"] / n, 4) if n else 0.0
    return out
