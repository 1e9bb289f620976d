"""`agentscaler deploy`: the work pools, global concurrency limits and every deployment of
deployments/prefect.yaml, registered on the Prefect server at PREFECT_API_URL.

Everything is checked before anything is written (the server answers, every entrypoint loads,
every pool is declared), so an error leaves nothing half-registered. Re-running it updates in
place: pools and limits are created when missing, deployments are upserted by name with their
schedules replaced. The pull step cds to the project on the worker at run time
(`set_working_directory_to_home`), so one registration serves the images and plain hosts alike.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import (DeploymentScheduleCreate, GlobalConcurrencyLimitCreate,
                                            GlobalConcurrencyLimitUpdate, WorkPoolCreate)
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.schedules import CronSchedule
from prefect.deployments import run_deployment
from prefect.events.actions import ChangeFlowRunState
from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
from prefect.exceptions import ObjectNotFound
from prefect.flows import load_flow_from_entrypoint
from prefect.settings import get_current_settings
from prefect.utilities.callables import parameter_schema
from prefect.utilities.urls import url_for
from prefect.workers.process import ProcessWorker

import flows

PREFECT_YAML = Path(__file__).resolve().parents[1] / "deployments" / "prefect.yaml"
ZOMBIES = "agentscaler: crash flow runs without a heartbeat"
FINAL_EVENTS = {"prefect.flow-run.Completed", "prefect.flow-run.Failed", "prefect.flow-run.Cancelled",
                "prefect.flow-run.Crashed"}


class DeployError(RuntimeError):
    """Nothing was registered: the server is unreachable or the deployment file is wrong."""


def project_home() -> Path:
    """AGENTSCALER_HOME, else the installed project's root (the folder that holds flows/)."""
    home = os.environ.get("AGENTSCALER_HOME")
    return Path(home).resolve() if home else Path(flows.__file__).resolve().parents[1]


def set_working_directory_to_home() -> dict[str, str]:
    """The deployments' pull step: run on the worker before the flow loads, so entrypoints and
    relative config paths (training/accelerate/...) resolve against that host's install."""
    home = project_home()
    if not (home / "flows").is_dir():
        raise FileNotFoundError(f"AGENTSCALER_HOME={home} holds no flows/ folder (set it to the project root)")
    os.chdir(home)
    return {"directory": str(home)}


def api_url() -> str:
    """The server to register on; refuse the ephemeral one (a deployment there would vanish)."""
    url = get_current_settings().api.url
    if not url:
        raise DeployError("PREFECT_API_URL is not set: point it at a Prefect server "
                          "(e.g. export PREFECT_API_URL=http://127.0.0.1:4200/api after `prefect server start`)")
    return url


def load_spec(path: Path = PREFECT_YAML) -> dict[str, Any]:
    try:
        spec = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise DeployError(f"{path}: {exc}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("deployments"), list):
        raise DeployError(f"{path}: no `deployments` list")
    return spec


def plan(spec: dict[str, Any], workspace: str, home: Path) -> list[dict[str, Any]]:
    """One dict per deployment with everything create_deployment needs; raises DeployError naming
    the deployment on a bad entry (entrypoint that does not load, undeclared pool)."""
    pools = {p["name"] for p in (spec.get("agentscaler") or {}).get("work_pools", [])}
    out = []
    for dep in spec["deployments"]:
        name = dep.get("name", "?")
        pool = (dep.get("work_pool") or {}).get("name")
        if pool not in pools:
            raise DeployError(f"deployment {name}: work pool {pool!r} is not declared under agentscaler.work_pools")
        try:
            flow = load_flow_from_entrypoint(str(home / dep["entrypoint"]))
        except Exception as exc:  # noqa: BLE001 - any import error is reported with its deployment
            raise DeployError(f"deployment {name}: entrypoint {dep.get('entrypoint')!r} does not load: "
                              f"{type(exc).__name__}: {exc}") from None
        params = {**(dep.get("parameters") or {}), "workspace": workspace}
        job_variables = dict(dep["work_pool"].get("job_variables") or dep.get("job_variables") or {})
        # every flow run sends a heartbeat, so one whose worker died is marked Crashed (zombie_automation)
        job_variables["env"] = {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(_heartbeat_s(spec)),
                                **(job_variables.get("env") or {})}
        schedules = [DeploymentScheduleCreate(schedule=CronSchedule(cron=s["cron"], timezone=s.get("timezone", "UTC")),
                                              active=s.get("active", True)) for s in dep.get("schedules") or []]
        out.append({"flow_name": flow.name, "name": name, "entrypoint": dep["entrypoint"], "work_pool_name": pool,
                    "work_queue_name": dep["work_pool"].get("work_queue_name"), "parameters": params,
                    "description": dep.get("description") or flow.description, "tags": dep.get("tags") or [],
                    "schedules": schedules, "concurrency_limit": dep.get("concurrency_limit"),
                    "job_variables": job_variables,
                    "parameter_openapi_schema": parameter_schema(flow).model_dump_for_openapi(),
                    "pull_steps": spec.get("pull") or []})
    return out


def _heartbeat_s(spec: dict[str, Any]) -> int:
    """The file's agentscaler.heartbeat_s (Prefect accepts 30 s or more)."""
    return int((spec.get("agentscaler") or {}).get("heartbeat_s", 30))


def _silence_s(spec: dict[str, Any]) -> int:
    """AGENTSCALER_ZOMBIE_AFTER_S, else the file's agentscaler.zombie_after_s, else 3 heartbeats."""
    return int(os.environ.get("AGENTSCALER_ZOMBIE_AFTER_S") or (spec.get("agentscaler") or {}).get("zombie_after_s")
               or 3 * _heartbeat_s(spec))


def zombie_automation(spec: dict[str, Any]) -> AutomationCore:
    """Prefect's recipe for dead workers: a flow run whose heartbeats stop for a while without a
    final state is marked Crashed, so whoever waits on it (build-environments' batches) moves on."""
    silence = _silence_s(spec)
    return AutomationCore(
        name=ZOMBIES, description="The worker running the flow run died (killed, host lost).",
        trigger=EventTrigger(after={"prefect.flow-run.heartbeat"}, expect={"prefect.flow-run.heartbeat", *FINAL_EVENTS},
                             match={"prefect.resource.id": ["prefect.flow-run.*"]}, for_each={"prefect.resource.id"},
                             posture=Posture.Proactive, threshold=1, within=timedelta(seconds=silence)),
        actions=[ChangeFlowRunState(state=StateType.CRASHED,
                                    message=f"no heartbeat for {silence} s: its worker or host died")])


async def _deploy(spec: dict[str, Any], planned: list[dict[str, Any]], url: str) -> dict[str, Any]:
    async with get_client() as client:
        extra = spec.get("agentscaler") or {}
        pools = []
        for p in extra.get("work_pools", []):
            try:
                await client.read_work_pool(p["name"])
                pools.append({"name": p["name"], "created": False})
            except ObjectNotFound:
                template = ProcessWorker.get_default_base_job_template()
                await client.create_work_pool(WorkPoolCreate(name=p["name"], type=p.get("type", "process"),
                                                             base_job_template=template))
                pools.append({"name": p["name"], "created": True})
        limits = []
        for lim in extra.get("concurrency_limits", []):
            try:
                await client.read_global_concurrency_limit_by_name(lim["name"])
                await client.update_global_concurrency_limit(lim["name"], GlobalConcurrencyLimitUpdate(limit=lim["limit"]))
                limits.append({"name": lim["name"], "limit": lim["limit"], "created": False})
            except ObjectNotFound:
                await client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=lim["name"],
                                                                                          limit=lim["limit"]))
                limits.append({"name": lim["name"], "limit": lim["limit"], "created": True})
        automation = zombie_automation(spec)
        existing = await client.read_automations_by_name(ZOMBIES)
        if existing:
            await client.update_automation(existing[0].id, automation)
        else:
            await client.create_automation(automation)
        deployments = []
        for d in planned:
            flow_id = await client.create_flow_from_name(d["flow_name"])
            args = {k: v for k, v in d.items() if k != "flow_name"}
            dep_id = await client.create_deployment(flow_id=flow_id, **args)
            # the upsert keeps old schedules beside new ones: leave exactly the file's
            current = await client.read_deployment_schedules(dep_id)
            wanted = {(s.schedule.cron, s.schedule.timezone) for s in d["schedules"]}
            seen: set[tuple[str, str]] = set()
            for s in current:
                key = (getattr(s.schedule, "cron", None), getattr(s.schedule, "timezone", None))
                if key not in wanted or key in seen:
                    await client.delete_deployment_schedule(dep_id, s.id)
                seen.add(key)
            deployments.append({"name": f"{d['flow_name']}/{d['name']}", "id": str(dep_id), "pool": d["work_pool_name"],
                                "schedules": [{"cron": c, "timezone": tz} for c, tz in sorted(wanted)],
                                "workspace": d["parameters"]["workspace"]})
    return {"api_url": url, "work_pools": pools, "concurrency_limits": limits, "deployments": deployments,
            "automations": [{"name": ZOMBIES, "created": not existing}]}


async def _check_server(url: str) -> None:
    async with get_client() as client:
        if (err := await client.api_healthcheck()) is not None:
            raise DeployError(f"the Prefect server at PREFECT_API_URL={url} does not answer: {type(err).__name__}: {err}")


def deploy(workspace: str, path: Path = PREFECT_YAML) -> dict[str, Any]:
    """Register everything in `path` on the server at PREFECT_API_URL; the --json of `agentscaler deploy`."""
    url = api_url()
    asyncio.run(_check_server(url))
    spec = load_spec(path)
    home = project_home()
    planned = plan(spec, workspace, home)
    result = asyncio.run(_deploy(spec, planned, url))
    return {**result, "home": str(home)}


async def _deployment_names() -> list[str]:
    async with get_client() as client:
        deps = await client.read_deployments()
        flow_names = {d.flow_id: (await client.read_flow(d.flow_id)).name for d in deps}
    return sorted(f"{flow_names[d.flow_id]}/{d.name}" for d in deps)


def trigger(flow_name: str, deployment: str, params: dict[str, Any], wait: bool = False,
            poll_s: float = 2.0) -> dict[str, Any]:
    """Start a run of `deployment` (a name, or FLOW/NAME) on the server; with `wait`, follow it to a
    final state. The result names the run, its state and its page in the UI."""
    url = api_url()
    name = deployment if "/" in deployment else f"{flow_name}/{deployment}"
    asyncio.run(_check_server(url))
    known = asyncio.run(_deployment_names())
    if name not in known:
        raise DeployError(f"no deployment {name!r} on {url}; known: {', '.join(known) or 'none (run agentscaler deploy)'}")
    fr = run_deployment(name=name, parameters=params, timeout=None if wait else 0, poll_interval=poll_s)
    state = fr.state
    return {"deployment": name, "flow_run_id": str(fr.id), "flow_run_name": fr.name,
            "state": state.name if state else None, "final": bool(state and state.is_final()),
            "completed": bool(state and state.is_completed()), "ui_url": url_for(fr)}
