"""Domains: quality on a labelled corpus of real tools (tau2 + BFCL), the split/attach rules, bad input,
and the files the stage writes (the graph/domains.json contract)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from agentscaler.artifacts import save_tools
from agentscaler.models import Tool
from agentscaler.workspace import Workspace
from tasks.discover.config import DiscoverConfig
from tasks.discover.discover import discover
from tasks.discover.domains import domain_id, find_domains, score_partition
from tasks.discover.embed import embed_tools
from tasks.discover.graph import build_graph, input_keys, output_keys

FIXTURE = Path(__file__).parents[2] / "data" / "labelled_tools.json"


def labelled(which: str = "core") -> tuple[list[Tool], dict[str, str]]:
    rows = [r for r in json.loads(FIXTURE.read_text()) if which == "all" or r["set"] == which]
    tools = [Tool.model_validate(r["tool"]).with_id() for r in rows]
    return tools, {t.id: r["label"] for t, r in zip(tools, rows)}


def run(tools, **kw):
    cfg = DiscoverConfig(**kw).resolved()
    vecs, _ = embed_tools(tools, cfg.embedding)
    g = build_graph(tools, vecs, cfg.threshold, cfg.top_k, cfg.flow_min_sim)
    return find_domains(tools, vecs, g, cfg)


def tool(name, desc, params=None):
    props = {k: {"type": "string", "description": v} for k, v in (params or {}).items()}
    return Tool(name=name, source_name=name, source="test", description=desc,
                parameters={"type": "object", "properties": props, "required": list(props)}).with_id()


def assert_partition(tools, records, report):
    placed = Counter(t for r in records for t in r["tools"])
    assert all(c == 1 for c in placed.values())  # nobody in two domains
    dropped = {d["tool"] for c in report.get("dependency_check", []) for d in c["dropped"]}
    assert set(placed) | dropped == {t.id for t in tools} and not (set(placed) & dropped)
    for r in records:
        assert r["domain"] == domain_id(r["tools"]) and len(r["names"]) == len(r["tools"])
        names = set(r["names"])
        for e in r["edges"]:
            assert e["src"] in names and e["dst"] in names and e["kind"] in ("similar", "dataflow")


def test_labelled_corpus_quality():
    tools, labels = labelled("core")
    records, report = run(tools)
    assert_partition(tools, records, report)
    score = score_partition(records, labels)
    assert score["purity"] >= 0.85, score
    assert score["completeness_min"] >= 0.5, score  # each true domain mostly in one found domain
    assert report["modularity"] > 0.4


def test_deterministic_ids_and_leiden_option():
    tools, labels = labelled("core")
    a, _ = run(tools)
    b, _ = run(list(reversed(tools)))
    assert sorted(r["domain"] for r in a) == sorted(r["domain"] for r in b)  # input order does not matter
    records, report = run(tools, method="leiden")
    assert_partition(tools, records, report)
    assert score_partition(records, labels)["purity"] >= 0.8


def test_max_size_splits_recursively():
    tools, _ = labelled("all")
    records, report = run(tools, max_size=8)
    assert_partition(tools, records, report)
    assert max(len(r["tools"]) for r in records) <= 8


def test_dataflow_edges_reach_domains_json_with_direction():
    tools, labels = labelled("core")
    records, _ = run(tools)
    flows = {(e["src"], e["dst"]) for r in records for e in r["edges"] if e["kind"] == "dataflow"}
    assert any(s.startswith("find_user_id") and d.startswith("get_user_details") for s, d in flows)  # user_id flows
    by_name = {t.name: t for t in tools}
    for s, d in flows:  # every data-flow edge: an output key of src is a required input of dst
        assert output_keys(by_name[s]) & input_keys(by_name[d]), (s, d)
    sims = {(e["src"], e["dst"]) for r in records for e in r["edges"] if e["kind"] == "similar"}
    assert all((d, s) in sims for s, d in sims)  # similar edges are listed both ways


def test_bad_input_gives_sensible_domains():
    assert run([]) == ([], {"modularity": None, "n_domains": 0, "dropped": 0})
    one = [tool("ping", "Check the service answers.")]
    records, report = run(one)
    assert [r["tools"] for r in records] == [[one[0].id]]
    no_params = [tool(f"status_{i}", f"Report service status number {i}.") for i in range(4)]
    records, report = run(no_params)
    assert_partition(no_params, records, report)
    same = [tool(f"same_{i}", "Get the weather.", {"city": "City"}) for i in range(5)]  # identical vectors
    records, report = run(same, max_size=3)
    assert_partition(same, records, report)
    assert max(len(r["tools"]) for r in records) <= 3
    # a disconnected graph: nothing passes the threshold, every tool still lands in exactly one domain
    tools, _ = labelled("core")
    records, report = run(tools[:20], threshold=0.999, attach_min_sim=0.999, group_min_sim=0.999)
    assert_partition(tools[:20], records, report)


def test_discover_writes_the_contract_files_and_skips_a_rerun(tmp_path):
    tools, _ = labelled("core")
    ws = Workspace(tmp_path)
    save_tools(ws.tools_path, tools)
    summary = discover(ws)
    assert summary["tools"] == len(tools) and not summary["skipped"]
    records = json.loads(ws.domains_path.read_text())
    assert records and set(records[0]) == {"domain", "tools", "names", "edges"}
    for e in records[0]["edges"]:
        assert set(e) == {"src", "dst", "kind", "weight"} and isinstance(e["weight"], float)
    report = json.loads((ws.graph_dir / "report.json").read_text())
    assert {"modularity", "size_histogram", "largest", "dependency_check"} <= set(report)
    assert all("reason" in d for c in report["dependency_check"] for d in c["dropped"] + c["edge_decisions"])
    for png in (ws.reports_dir / "domains.png", ws.graph_dir / "domains.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (ws.graph_dir / "graph.pickle").exists() and (ws.graph_dir / "edges.parquet").exists()
    before = ws.domains_path.stat().st_mtime_ns
    assert discover(ws)["skipped"] is True and ws.domains_path.stat().st_mtime_ns == before
    assert discover(ws, cfg=DiscoverConfig(resolution=2.0))["skipped"] is False  # other config: recomputed


def test_warm_discover_knows_an_unchanged_corpus_file_without_reading_its_tools(tmp_path, monkeypatch):
    """Issue 20 aim 6: the same corpus file and config are recognised by the file's bytes; a changed
    file is read again (here its tools are the same, so the tool-id key still finds the run current)."""
    import tasks.discover.discover as stage

    tools, _ = labelled("core")
    ws = Workspace(tmp_path)
    save_tools(ws.tools_path, tools)
    assert discover(ws)["skipped"] is False
    monkeypatch.setattr(stage, "load_tools", lambda path: pytest.fail("an unchanged corpus file was read"))
    assert discover(ws)["skipped"] is True
    monkeypatch.undo()
    save_tools(ws.tools_path, list(reversed(tools)))  # other bytes, the same tools
    assert discover(ws)["skipped"] is True
    save_tools(ws.tools_path, tools[:-1])  # a tool fewer: recomputed
    assert discover(ws)["skipped"] is False


def test_discover_errors_are_clear(tmp_path):
    ws = Workspace(tmp_path)
    with pytest.raises(FileNotFoundError, match="no tool corpus"):
        discover(ws)
    save_tools(ws.tools_path, [])
    summary = discover(ws)
    assert summary["domains"] == 0 and json.loads(ws.domains_path.read_text()) == []
    with pytest.raises(ValueError):
        DiscoverConfig(method="kmeans")
    with pytest.raises(ValueError):
        DiscoverConfig(tresh=0.5)  # a typo is an error, not a silently ignored option


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the background readings need a second CPU")
def test_readings_in_a_process_of_their_own_give_the_same_domains(tmp_path, monkeypatch):
    """A large corpus's tool readings (observers' share_reads) are computed in a spawned process
    while discovery goes on: the same domains.json and shared reads as computed in this process,
    whether the process reads the corpus file or is handed the tools; a background job that fails
    costs only its time (share_reads then reads each tool here)."""
    import tasks.discover.discover as stage
    from tasks.environments.plan import tool_reading

    tools, _ = labelled("all")
    out, given = {}, {}
    real = stage.share_reads

    def spy(*a, known=None, **kw):  # what share_reads was handed: readings from the process, or None
        given[how] = known is not None
        return real(*a, known=known, **kw)

    monkeypatch.setattr(stage, "share_reads", spy)
    for how, threshold in (("here", 10 ** 9), ("file", 1), ("tools", 1), ("failed", 1)):
        monkeypatch.setattr(stage, "BACKGROUND_READINGS", threshold)
        if how == "failed":  # os._exit(reading, tools, path): a TypeError in the pool process
            monkeypatch.setattr(stage, "all_readings", os._exit)
        ws = Workspace(tmp_path / how)
        save_tools(ws.tools_path, tools)
        summary = discover(ws, tools=tools if how == "tools" else None, draw=False, reading=tool_reading)
        out[how] = (ws.domains_path.read_bytes(), summary["shared_reads"])
    assert out["here"][1]["reads_shared"] + out["here"][1]["writes_unobservable"] > 0  # the step did something
    assert given == {"here": False, "file": True, "tools": True, "failed": False}
    assert out["file"] == out["here"] and out["tools"] == out["here"] and out["failed"] == out["here"]
