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


def test_compose_config_with_docker_client_when_present():
    if shutil.which("docker") is None or subprocess.run(["docker", "compose", "version"],
                                                        capture_output=True).returncode != 0:
        pytest.skip("no docker compose client here; the schema checks below still run")
    res = subprocess.run(["docker", "compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_compose_services_are_complete():
    services = _compose()["services"]
    for name in ("postgres", "prefect-server", "cpu-worker", "gpu-worker", "vllm", "trainer"):
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
    for name in ("postgres", "prefect-server", "cpu-worker", "vllm"):
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


def test_accelerate_configs_named_by_deployments_exist():
    cfg = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    for dep in cfg["deployments"]:
        acc = (dep.get("parameters") or {}).get("accelerate_config")
        if acc:
            assert (ROOT / acc).exists(), acc
