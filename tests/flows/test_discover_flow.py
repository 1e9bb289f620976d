"""A real Prefect run of discover_flow on a real ingested corpus, and the discover / show domains CLI."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agentscaler.artifacts import load_tools, save_tools
from agentscaler.catalog import Catalog
from agentscaler.models import Tool
from agentscaler.workspace import Workspace
from flows.cli import app
from flows.discover import discover_flow

DATA = Path(__file__).resolve().parents[1] / "data"


def test_discover_flow_after_ingest_records_domains(prefect_harness, tmp_path):
    from tasks.corpus.ingest import ingest

    ws = Workspace(tmp_path / "ws")
    ingest(ws, [str(DATA / "corpora" / d) for d in ("openai", "mcp", "tau2")])
    tools = load_tools(ws.tools_path)
    summary = discover_flow(str(ws.root))
    records = json.loads(ws.domains_path.read_text())
    assert summary["tools"] == len(tools) and summary["domains"] == len(records) >= 1
    kept = [t for r in records for t in r["tools"]]
    assert len(kept) == len(set(kept)) == summary["kept_tools"]
    cat = Catalog(ws.catalog_path)
    run = [r for r in cat.runs() if r["flow"] == "discover"][0]
    assert run["status"] == "done" and cat.counts(summary["run_id"])["discover"]["domains"] == len(records)
    assert {r["domain"] for r in records} == {d["domain"] for d in cat.domains(stage="discover", status="done")}


def test_cli_discover_and_show_domains(prefect_harness, tmp_path):
    rows = [r for r in json.loads((DATA / "labelled_tools.json").read_text()) if r["set"] == "core"]
    ws = Workspace(tmp_path / "ws")
    save_tools(ws.tools_path, [Tool.model_validate(r["tool"]).with_id() for r in rows])
    runner = CliRunner()
    res = runner.invoke(app, ["-w", str(ws.root), "show", "domains", "--json"])
    assert res.exit_code == 1  # nothing discovered yet: a clear message, not a traceback
    res = runner.invoke(app, ["-w", str(ws.root), "discover", "--method", "leiden", "--max-size", "15", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["tools"] == len(rows)
    res = runner.invoke(app, ["-w", str(ws.root), "show", "domains", "--json"])
    assert res.exit_code == 0
    shown = json.loads(res.stdout)
    assert shown and set(shown[0]) == {"domain", "tools"} and max(len(d["tools"]) for d in shown) <= 15
    dropped = json.loads((ws.graph_dir / "report.json").read_text())["dropped"]
    shared = sum(len(r.get("shared") or []) for r in json.loads(ws.domains_path.read_text()))  # reads in two domains
    assert sum(len(d["tools"]) for d in shown) - shared + dropped == len(rows)
    bad = runner.invoke(app, ["-w", str(ws.root), "discover", "--method", "kmeans"])
    assert bad.exit_code == 1 and "discover failed" in bad.output


def test_cli_discover_unchanged_corpus_runs_no_flow(prefect_harness, tmp_path, monkeypatch):
    """A second `discover` on the same corpus and config is answered without Prefect (a flow call
    here fails the test), with the same summary, a catalog run and its counts; another config,
    --force or a changed corpus runs the flow again."""
    import flows.discover

    rows = [r for r in json.loads((DATA / "labelled_tools.json").read_text()) if r["set"] == "core"]
    ws = Workspace(tmp_path / "ws")
    save_tools(ws.tools_path, [Tool.model_validate(r["tool"]).with_id() for r in rows])
    runner = CliRunner()
    first = runner.invoke(app, ["-w", str(ws.root), "discover", "--max-size", "15", "--json"])
    assert first.exit_code == 0, first.output
    ran = []
    real = flows.discover.discover_flow
    monkeypatch.setattr(flows.discover, "discover_flow", lambda *a, **k: ran.append(k) or real(*a, **k))
    again = runner.invoke(app, ["-w", str(ws.root), "discover", "--max-size", "15", "--json"])
    assert again.exit_code == 0, again.output
    a, b = json.loads(first.stdout), json.loads(again.stdout)
    assert ran == [] and b["skipped"] is True and b["prefect_run"] is False and b["run_id"] != a["run_id"]
    assert {k: v for k, v in b.items() if k not in ("run_id", "skipped", "prefect_run")} == \
        {k: v for k, v in a.items() if k not in ("run_id", "skipped")}
    cat = Catalog(ws.catalog_path)
    assert [r["status"] for r in cat.runs() if r["flow"] == "discover"] == ["done", "done"]
    assert cat.counts(b["run_id"])["discover"]["domains"] == a["domains"]
    assert len(cat.domains(stage="discover", status="done")) == a["domains"]
    for args in (["--max-size", "12"], ["--max-size", "15", "--force"]):
        res = runner.invoke(app, ["-w", str(ws.root), "discover", *args, "--json"])
        assert res.exit_code == 0, res.output
    assert len(ran) == 2
    save_tools(ws.tools_path, [Tool.model_validate(r["tool"]).with_id() for r in rows[:-1]])  # a changed corpus
    res = runner.invoke(app, ["-w", str(ws.root), "discover", "--max-size", "15", "--json"])
    assert res.exit_code == 0 and len(ran) == 3 and json.loads(res.stdout)["tools"] == len(rows) - 1
