"""The catalog on a real PostgreSQL (AGENTSCALER_CATALOG_URL): several processes write it at once
without losing an update, the command line reads it, and the workspace file is not used."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentscaler.catalog import CATALOG_URL_ENV, Catalog
from agentscaler.workspace import Workspace
from tests.agentscaler.catalog_writers import hammer_server
from tests.postgres_server import postgres_server, why_not

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed (pip install -e '.[postgres]')")
pytestmark = pytest.mark.skipif(why_not() is not None, reason=why_not() or "")


@pytest.fixture(scope="module")
def pg_url():
    with postgres_server() as url:
        yield url


def test_concurrent_processes_lose_no_update(pg_url, tmp_path, monkeypatch):
    procs = [mp.get_context("spawn").Process(target=hammer_server, args=(pg_url, w)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    monkeypatch.setenv(CATALOG_URL_ENV, pg_url)
    cat = Catalog(tmp_path / "catalog.sqlite")
    rows = {d["domain"]: d for d in cat.domain_summary()["domains"]}
    assert [rows[f"shared-{i}"]["attempts"] for i in range(10)] == [3] * 10  # read-modify-write serialized
    assert sum(d["status"] == "done" for d in rows.values()) == 30
    assert not (tmp_path / "catalog.sqlite").exists()  # the server holds it, not the workspace file


def test_status_command_reads_the_server_catalog(pg_url, tmp_path, monkeypatch):
    monkeypatch.setenv(CATALOG_URL_ENV, pg_url)
    ws = Workspace(tmp_path / "ws")
    cat = Catalog(ws.catalog_path)
    cat.mark("pg-domain", "synthesize", "failed", error="ValueError: on the server")
    cat.start_run("r-pg", "build_environments", {"domains": 1})
    cat.finish_run("r-pg", "done_with_failures", {"built": 0})
    env = {**os.environ, CATALOG_URL_ENV: pg_url}
    res = subprocess.run([str(Path(sys.executable).parent / "agentscaler"), "-w", str(ws.root), "status", "--json"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = {d["domain"]: d for d in json.loads(res.stdout)["domains"]}
    assert rows["pg-domain"]["status"] == "failed" and "on the server" in rows["pg-domain"]["error"]
    assert rows["pg-domain"]["worker"] and rows["pg-domain"]["stages"] == {"synthesize": "failed"}
    assert not ws.catalog_path.exists()
    with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://")) as conn:  # the table itself
        row = conn.execute("SELECT status, last_error FROM domain_stages WHERE domain = 'pg-domain'").fetchone()
    assert row == ("failed", "ValueError: on the server")
