"""Production for real: one `prefect server start` for the module (temporary PREFECT_HOME, loopback),
the run catalog on a PostgreSQL from Debian's package (AGENTSCALER_CATALOG_URL, as worker hosts
share it; the workspace's SQLite file only where PostgreSQL cannot run here, and then the test
that checks the server catalog is skipped with the reason), `agentscaler deploy`, process workers
on cpu-pool, CLI-triggered and scheduled runs to Completed, artifacts read back through the API,
and the vllm-endpoint slot held per request."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import text

from agentscaler.catalog import CATALOG_URL_ENV, Base, Catalog, engine_for
from agentscaler.llm_server import free_port
from agentscaler.workspace import Workspace
from tests.deployments.prefect_server import BIN, ROOT, cli, prefect_server, server_env, start_worker, stop
from tests.postgres_server import postgres_server, why_not

DATA = Path(__file__).resolve().parents[1] / "data" / "corpora"
pytestmark = pytest.mark.slow
# Why the catalog cannot go on PostgreSQL here (then it stays on the workspace's SQLite file), or None.
NO_POSTGRES = why_not() or (None if importlib.util.find_spec("psycopg") else
                            "the postgres extra is not installed (pip install -e '.[postgres]')")


def _discovered(root: Path) -> Workspace:
    """A small discovered workspace (two domains or more) and its unbuilt copy `fresh`."""
    from tasks.corpus.ingest import ingest
    from tasks.discover.discover import discover

    ws = Workspace(root / "ws")
    assert ingest(ws, [DATA / n for n in ("bfcl", "openai", "tau2", "toolbench", "xlam")])["accepted"] > 5
    discover(ws)
    assert len(json.loads(ws.domains_path.read_text())) >= 2
    shutil.copytree(ws.root, root / "fresh")
    return ws


@pytest.fixture(scope="module")
def prod(tmp_path_factory):
    """The server, a small discovered workspace (and an unbuilt copy), everything deployed, and
    workers on cpu-pool: w0 takes the default queue (parent runs, retry-failed, the schedule), w1
    and w2 the batches queue, one batch run at a time each, so two batches go one to each.

    What does not depend on each other overlaps: the workspace is discovered while the server
    starts, and the second `deploy` (the idempotency check) runs while the workers start."""
    root = tmp_path_factory.mktemp("prod")
    home = root / "prefect-home"
    with contextlib.ExitStack() as stack:
        # The catalog on its own server, as worker hosts share it: this process, the CLI and the
        # workers (server_env copies this environment) all write there; stopped last.
        pg = None if NO_POSTGRES else stack.enter_context(postgres_server())
        if pg:
            stack.enter_context(pytest.MonkeyPatch.context()).setenv(CATALOG_URL_ENV, pg)
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=1))
        discovered = pool.submit(_discovered, root)
        url = stack.enter_context(prefect_server(home))
        ws = discovered.result()
        res = cli(home, url, "-w", str(ws.root), "deploy", "--json")
        assert res.returncode == 0, res.stderr
        again = subprocess.Popen([str(BIN / "agentscaler"), "-w", str(ws.root), "deploy", "--json"],
                                 env=server_env(home, url), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, cwd=ROOT)
        # started outside the checkout: the deployments' pull step cds to the project
        workers = {"w0": start_worker(home, url, "cpu-pool", "w0", cwd=root, queue="default"),
                   "w1": start_worker(home, url, "cpu-pool", "w1", cwd=root, limit=1, queue="batches"),
                   "w2": start_worker(home, url, "cpu-pool", "w2", cwd=root, limit=1, queue="batches")}
        try:
            out, err = again.communicate(timeout=600)
            _wait_online(url, "cpu-pool", set(workers))
            yield {"url": url, "home": home, "ws": ws, "fresh": Workspace(root / "fresh"),
                   "deployed": json.loads(res.stdout), "redeployed": (again.returncode, out, err), "root": root,
                   "workers": workers, "catalog_url": pg}
        finally:
            stop(*workers.values())
            _drain_to(url)


def _drain_to(url: str) -> None:
    """Send this process's queued Prefect events and logs for `url` while its server still runs: a
    worker left holding them retries a stopped server for ever, and the session harness's drain at
    the end of the suite then never returns."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: url}):
        for service in (EventsWorker, APILogWorker):
            service.drain_all(timeout=30)


def _wait_online(url: str, pool: str, names: set[str], timeout: float = 180) -> None:
    """Wait until these workers have checked in with the pool: under load one that started slowly
    let the other take every batch of a test that expects them spread (one batch each)."""
    deadline = time.monotonic() + timeout
    while True:
        workers = _client_call(url, lambda client: client.read_workers_for_work_pool(work_pool_name=pool))
        online = {w.name for w in workers if getattr(w.status, "value", w.status) == "ONLINE"}
        if names <= online:
            return
        assert time.monotonic() < deadline, f"workers {sorted(names - online)} not online after {timeout} s"
        time.sleep(0.5)


@contextlib.contextmanager
def one_batch_each(url: str, deployment: str, workers: int = 2, hold_s: float = 40):
    """While a fan-out runs: stop (SIGSTOP) the process of the first batch run a worker takes of
    `deployment`, and let it go on (SIGCONT) once `workers` batch runs have been taken.

    Why: a batch builds in about a second, and the parent creates its batch runs a second or more
    apart on a loaded machine, so the worker that took the first could be free again before the
    second existed and take it too (CI saw w1 take both). A worker whose batch is still running
    must leave the next one to another: that is what the spread asserts, and it no longer depends on
    timing. The hold stays under the zombie cutoff (AGENTSCALER_ZOMBIE_AFTER_S: 50 s). Yields a
    dict: the pid held and how many runs were taken when it was let go."""
    seen: dict = {}
    done = threading.Event()

    async def taken(client):
        from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

        runs = await client.read_flow_runs(deployment_filter=DeploymentFilter(name=DeploymentFilterName(
            any_=[deployment.split("/")[1]])))
        return [r for r in runs if r.id not in before and r.infrastructure_pid]

    def watch() -> None:
        held, deadline = None, time.monotonic() + 600
        while not done.is_set() and time.monotonic() < deadline:
            runs = _client_call(url, taken)
            if held is None and runs:
                pid = int(runs[0].infrastructure_pid)
                with contextlib.suppress(ProcessLookupError):  # gone already: the next taken run is held
                    os.kill(pid, signal.SIGSTOP)
                    held = seen["pid"] = pid
                    until = time.monotonic() + hold_s
            if held is not None and (len(runs) >= workers or time.monotonic() > until):
                seen["taken_at_release"] = len(runs)
                break
            time.sleep(0.2)
        if held is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(held, signal.SIGCONT)

    before = {r.id for r in _client_call(url, lambda client: client.read_flow_runs())}
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join(30)


def _client_call(url: str, fn):
    """Run `fn(client)` against the test server from this process."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    async def go():
        async with get_client() as client:
            return await fn(client)

    with temporary_settings(updates={PREFECT_API_URL: url}):
        return asyncio.run(go())


def test_deploy_registers_pools_limits_deployments_idempotently(prod):
    first = prod["deployed"]
    names = {d["name"]: d for d in first["deployments"]}
    assert {"pipeline/pipeline-nightly", "build-environments/build-environments", "retry-failed/retry-failed",
            "collect-experience/collect-experience", "train-sft/train-sft", "evaluate/evaluate"} <= set(names)
    assert names["pipeline/pipeline-nightly"]["schedules"] == [{"cron": "0 2 * * *", "timezone": "UTC"}]
    assert all(d["workspace"] == str(prod["ws"].root) for d in first["deployments"])
    assert {p["name"] for p in first["work_pools"]} == {"cpu-pool", "gpu-pool"}
    assert [lim["name"] for lim in first["concurrency_limits"]] == ["vllm-endpoint"]

    code, out, err = prod["redeployed"]  # the same command again, once the first had registered everything
    assert code == 0, err
    second = json.loads(out)
    assert {d["name"]: d["id"] for d in second["deployments"]} == {d["name"]: d["id"] for d in first["deployments"]}
    assert not any(p["created"] for p in second["work_pools"] + second["concurrency_limits"])

    async def state(client):
        deps = await client.read_deployments()
        scheds = {d.name: await client.read_deployment_schedules(d.id) for d in deps}
        pool = await client.read_work_pool("cpu-pool")
        return deps, scheds, pool

    deps, scheds, pool = _client_call(prod["url"], state)
    assert len(deps) == len(first["deployments"])
    assert len(scheds["pipeline-nightly"]) == 1 and scheds["pipeline-nightly"][0].schedule.cron == "0 2 * * *"
    assert all(d.pull_steps == [{"flows.deploy.set_working_directory_to_home": {}}] for d in deps)
    assert pool.type == "process" and pool.base_job_template  # job variables (env) apply


def test_unreachable_server_is_named(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}/api"
    res = cli(tmp_path, dead, "-w", str(tmp_path / "ws"), "deploy")
    assert res.returncode == 2
    assert "PREFECT_API_URL" in res.stderr and dead in res.stderr


def test_unknown_deployment_lists_known_names(prod):
    res = cli(prod["home"], prod["url"], "-w", str(prod["ws"].root), "build", "--deployment", "nope", "--wait")
    assert res.returncode == 2
    err = " ".join(res.stderr.split())
    assert "build-environments/nope" in err and "build-environments/build-environments" in err
    assert "pipeline/pipeline-nightly" in err


def test_cli_triggered_build_waits_to_completed_with_artifacts(prod):
    ws = prod["ws"]
    with one_batch_each(prod["url"], "build-batch/build-batch") as held:
        res = cli(prod["home"], prod["url"], "-w", str(ws.root), "build", "--deployment", "build-environments",
                  "--wait", "--per-domain", "4", "--batch-size", "1", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["state"] == "Completed" and out["completed"]
    assert out["ui_url"].startswith(prod["url"].removesuffix("/api")) and out["flow_run_id"] in out["ui_url"]
    assert out["flow_run_id"] in res.stderr  # the URL is printed for a person too
    status = cli(prod["home"], prod["url"], "-w", str(ws.root), "status", "--json")
    domains = json.loads(status.stdout)["domains"]
    assert domains and all(d["status"] == "done" for d in domains)
    assert all(d["stages"]["synthesize"] == "done" for d in domains), domains  # which steps, per domain
    assert held.get("taken_at_release", 0) >= 2, held  # the second batch was taken while the first was held
    assert {d["worker"].split("@")[0] for d in domains} == {"w1", "w2"}, domains  # one batch each

    async def artifacts(client):
        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

        return await client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[out["flow_run_id"]])))

    arts = _client_call(prod["url"], artifacts)
    md = [a.data or "" for a in arts if a.type == "markdown"]
    table = "| domain | tools | tools that execute | scenarios | status or error |"  # one row per domain
    assert md and any("build_environments" in m and table in m for m in md)

    async def runs_and_logs(client):
        from prefect.client.schemas.filters import LogFilter, LogFilterLevel

        return (await client.read_task_runs(),
                await client.read_logs(log_filter=LogFilter(level=LogFilterLevel(ge_=20, le_=20))))

    task_runs, logs = _client_call(prod["url"], runs_and_logs)
    builds = [t.name for t in task_runs if t.name.startswith("build ")]
    for d in domains:  # the UI names each task run by the domain's name and id, and logs its steps
        assert any(n.endswith(" " + d["domain"]) and len(n) > len(d["domain"]) + 7 for n in builds), (d, builds)
        assert any(log.message.startswith("synthesize ") and f" {d['domain']}: " in log.message for log in logs), d
        assert any(log.message.startswith("scenarios ") and f" {d['domain']}: " in log.message for log in logs), d


def test_the_catalog_is_on_the_postgresql_server(prod):
    """What the build above recorded (each domain done, by w1 or w2) is in the server's table, read
    by SQL, not through our Catalog; the workspace holds no catalog file."""
    if prod["catalog_url"] is None:
        pytest.skip(f"catalog on the workspace's SQLite file: {NO_POSTGRES}")
    ws = prod["ws"]
    with engine_for(ws.catalog_path).connect() as conn:
        assert conn.engine.dialect.name == "postgresql"
        rows = conn.execute(text("SELECT domain, status, worker FROM domain_stages")).all()
    built = {domain: (status, worker) for domain, status, worker in rows if status == "done"}
    assert len(built) >= 2 and {w.split("@")[0] for _, w in built.values()} == {"w1", "w2"}, rows
    assert not ws.catalog_path.exists()


def test_collect_batches_run_on_the_pool_as_deployment_runs(prod):
    """collect_experience with batch_deployment (as the collect-experience deployment sets it): each
    batch of one domain is a collect-batch run that w1 or w2 takes; the rollout rows name them, and
    the parent's summary reads every domain's figures back (a scripted oracle endpoint, not a model:
    this is about the fan-out; split "all" because the small workspace's domains may all be held out)."""
    from tests.scripted_endpoint import scripted_endpoint

    ws = prod["ws"]  # built by the CLI-triggered build above
    code = ("import json, sys; from flows.collect_experience import collect_experience_flow; "
            "print(json.dumps(collect_experience_flow(sys.argv[1], llm=sys.argv[2], model='scripted-agent', "
            "split='all', per_domain=2, max_turns=2, batch_size=1, batch_deployment='collect-batch/collect-batch'), "
            "default=str))")
    with scripted_endpoint("oracle", scenarios_glob=str(ws.root / "domains" / "*" / "scenarios.jsonl")) as llm, \
            one_batch_each(prod["url"], "collect-batch/collect-batch") as held:
        res = subprocess.run([str(BIN / "python"), "-c", code, str(ws.root), llm], env=server_env(prod["home"], prod["url"]),
                             capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    rows = Catalog(ws.catalog_path).domains(stage="rollout")
    assert out["batches"] == out["domains"] == len(rows) >= 2 and not out["failed"]
    assert all(r["status"] == "done" for r in rows), rows
    assert held.get("taken_at_release", 0) >= 2, held
    assert {r["worker"].split("@")[0] for r in rows} == {"w1", "w2"}, rows
    assert out["trajectories"] >= len(rows) and sorted(out["run_ids"]) == sorted(r["artifact"] for r in rows)


def test_schedule_a_few_seconds_ahead_runs_on_a_worker(prod):
    """A schedule anchored 30 s ahead: the server's scheduler makes the run, the worker completes it.
    (The scheduler only makes runs still ahead of it: with 5 s, a loaded machine passed the anchor
    before the scheduler looked, and the first run was an hour away.)"""
    from prefect.client.schemas.actions import DeploymentScheduleCreate
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.client.schemas.schedules import IntervalSchedule

    dep_id = next(d["id"] for d in prod["deployed"]["deployments"] if d["name"] == "retry-failed/retry-failed")
    anchor = datetime.now(timezone.utc) + timedelta(seconds=30)

    async def add(client):
        await client.create_deployment_schedules(dep_id, [DeploymentScheduleCreate(
            schedule=IntervalSchedule(interval=timedelta(hours=1), anchor_date=anchor), active=True)])

    async def runs(client):
        return await client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[dep_id])))

    _client_call(prod["url"], add)
    deadline = time.monotonic() + 240
    done = []
    while time.monotonic() < deadline and not done:
        time.sleep(3)
        done = [r for r in _client_call(prod["url"], runs) if r.state and r.state.is_final()]
    assert done, "no scheduled run reached a final state"
    assert done[0].state.is_completed(), done[0].state
    assert abs((done[0].expected_start_time - anchor).total_seconds()) < 1


def test_each_request_holds_one_vllm_endpoint_slot(prod):
    """With the limit at 1, three concurrent requests to a (scripted) remote endpoint go one at a time."""
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate
    from prefect.settings import PREFECT_API_URL, temporary_settings

    import flows.common  # noqa: F401 - installs the slot factory, as every flow process does
    from agentscaler.llm import LLMClient
    from tests.scripted_endpoint import scripted_endpoint

    def set_limit(n):
        async def fn(client):
            await client.update_global_concurrency_limit("vllm-endpoint", GlobalConcurrencyLimitUpdate(limit=n))
            return await client.read_global_concurrency_limit_by_name("vllm-endpoint")
        return fn

    delay = 0.6
    _client_call(prod["url"], set_limit(1))
    try:
        with scripted_endpoint(mode="chatty", delay=delay) as url, \
                temporary_settings(updates={PREFECT_API_URL: prod["url"]}):
            client = LLMClient(url, concurrency=8)

            async def three():
                t0 = time.perf_counter()
                await asyncio.gather(*(client.chat([{"role": "user", "content": f"hi {i}"}], use_cache=False)
                                       for i in range(3)))
                return time.perf_counter() - t0

            wall = asyncio.run(three())
        assert wall >= 3 * delay, f"3 requests of {delay}s under a 1-slot limit took {wall:.2f}s"
        limit = _client_call(prod["url"], set_limit(256))
        assert limit.active_slots == 0  # every slot given back
    finally:
        _client_call(prod["url"], set_limit(256))


def test_killed_worker_leaves_failed_domains_that_retry_builds_once(prod):
    """w2 is killed (with its flow run) mid-batch: its domains end failed with the reason, never
    running; retry-failed on the server then builds exactly them, and every domain is built once.

    The fresh workspace is an unbuilt copy of the discovered one. Its catalog: on SQLite the copied
    file; on the PostgreSQL catalog (one database per workspace) the server's, emptied here first,
    as a new workspace starts on a new database; the first workspace's tests are all done."""
    ws = prod["fresh"]
    catalog = Catalog(ws.catalog_path)
    if prod["catalog_url"]:
        with engine_for(ws.catalog_path).begin() as conn:
            for table in reversed(Base.metadata.sorted_tables):
                conn.execute(table.delete())
    build = subprocess.Popen([str(BIN / "agentscaler"), "-w", str(ws.root), "build", "--deployment", "build-environments",
                              "--wait", "--per-domain", "12", "--batch-size", "1", "--json"],
                             env=server_env(prod["home"], prod["url"]), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=ROOT)
    # A domain builds in well under a second, so a row seen running may be done before a kill lands.
    # Stop the flow run's own process first (a stopped process writes nothing), then read its row
    # again: still running means the kill below cannot race the build; done means let it go on and
    # wait for w2's next domain. w1's batch runs are stopped as soon as seen and let go once the
    # victim is found: w1 then stays busy, so w2 takes every later batch (CI saw w1 take them all).
    victim, held = None, []
    deadline = time.monotonic() + 300
    try:
        while victim is None and time.monotonic() < deadline and build.poll() is None:
            running = [(r, int(r["worker"].rsplit(":", 1)[1])) for r in catalog.domains()
                       if r["status"] == "running" and r["worker"]]
            for row, pid in running:
                if row["worker"].startswith("w1@") and pid not in held:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGSTOP)
                        held.append(pid)
            for row, pid in [(r, p) for r, p in running if r["worker"].startswith("w2@")]:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    continue
                now = {r["domain"]: r for r in catalog.domains()}[row["domain"]]
                if now["status"] == "running" and now["worker"] == row["worker"]:
                    victim = row
                    os.kill(pid, signal.SIGKILL)
                    break
                os.kill(pid, signal.SIGCONT)
            time.sleep(0.02)
    finally:
        for pid in held:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert victim is not None, f"w2 never started a domain that was still running when stopped (w1 held: {held})"
    stop(prod["workers"]["w2"], sig=signal.SIGKILL)
    out, err = build.communicate(timeout=400)
    assert build.returncode == 0, err[-3000:]
    summary = {d["domain"]: d for d in catalog.domain_summary()["domains"]}
    assert summary[victim["domain"]]["status"] == "failed"
    assert "Crashed" in summary[victim["domain"]]["error"], summary[victim["domain"]]
    assert not [d for d in summary.values() if d["status"] == "running"]

    res = cli(prod["home"], prod["url"], "-w", str(ws.root), "retry-failed", "--deployment", "retry-failed", "--wait",
              "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout)["state"] == "Completed"
    summary = {d["domain"]: d for d in catalog.domain_summary()["domains"]}
    assert all(d["status"] == "done" for d in summary.values()), summary
    for domain in summary:
        assert (ws.domain_dir(domain) / "spec.json").exists()
        ids = [json.loads(line)["id"] for line in (ws.domain_dir(domain) / "scenarios.jsonl").read_text().splitlines()]
        assert ids and len(ids) == len(set(ids)), domain  # nothing written twice
