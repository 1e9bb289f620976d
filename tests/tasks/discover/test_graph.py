"""The tool graph: blocked cosine edges equal the brute-force ones; data-flow edges follow outputs to inputs."""

from __future__ import annotations

import io

import numpy as np

from agentscaler import progress
from agentscaler.models import Tool
from tasks.discover.embed import embed_tools
from tasks.discover.graph import (build_graph, dataflow_edges, input_keys, load_graph, output_keys, save_graph,
                                  similarity_edges, undirected_weights)


def tool(name, desc, params=None, required=None, returns=None):
    props = {k: {"type": "string", "description": v} for k, v in (params or {}).items()}
    return Tool(name=name, source_name=name, source="test", description=desc, returns=returns,
                parameters={"type": "object", "properties": props,
                            "required": list(props) if required is None else required}).with_id()


def test_blocked_edges_match_brute_force():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(300, 16)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    s, d, w = similarity_edges(v, threshold=0.3, top_k=10, block=64)
    assert (s < d).all() and (w >= 0.3).all()
    sims = v @ v.T
    np.fill_diagonal(sims, -np.inf)
    expect = set()
    for i in range(300):
        for j in np.argsort(-sims[i])[:10]:
            if sims[i, j] >= 0.3:
                expect.add((min(i, j), max(i, j)))
    assert set(zip(s.tolist(), d.tolist())) == expect
    assert np.allclose(w, sims[s, d], atol=1e-5)


def test_identical_vectors_and_tiny_inputs():
    v = np.ones((5, 8), np.float32) / np.sqrt(8)
    s, d, w = similarity_edges(v, threshold=0.9, top_k=10)
    assert len(s) == 10 and np.allclose(w, 1.0, atol=1e-5)  # all pairs, no self loops
    for n in (0, 1):
        s, d, w = similarity_edges(np.zeros((n, 8), np.float32), threshold=0.1)
        assert len(s) == 0


GET_USER = tool("get_user_details", "Get the details of a user.", {"user_id": "The user id"},
                returns={"type": "object", "title": "User",
                         "properties": {"user_id": {"type": "string"}, "email": {"type": "string"},
                                        "orders": {"type": "array", "description": "order ids"}}})
FIND_USER = tool("find_user_id_by_email", "Find a user id by email.", {"email": "The user's email"},
                 returns={"type": "string"})
CANCEL = tool("cancel_order", "Cancel a pending order of a user.", {"order_id": "The order id", "reason": "Why"})
ADDRESS = tool("modify_user_address", "Change a user's default address.",
               {"user_id": "The user id", "address1": "Street"}, required=["user_id", "address1"])


def test_output_and_input_keys():
    assert {"user_id", "email", "order_id"} <= output_keys(GET_USER)
    assert "user_id" in output_keys(FIND_USER)
    assert input_keys(ADDRESS) == {"user_id", "address1"}
    assert "reason" in input_keys(CANCEL)
    res = tool("get_reservation_details", "Get a reservation.", {"reservation_id": "id"},
               returns={"type": "object", "title": "Reservation", "properties": {"id": {"type": "string"}}})
    assert "reservation_id" in output_keys(res)


def test_dataflow_edges_are_directed_producer_to_consumer():
    tools = [GET_USER, FIND_USER, CANCEL, ADDRESS]
    vecs, _ = embed_tools(tools, "fast")
    flows = {(tools[a].name, tools[b].name, key) for a, b, _, key in dataflow_edges(tools, vecs, flow_min_sim=-1.0)}
    assert ("find_user_id_by_email", "modify_user_address", "user_id") in flows
    assert ("get_user_details", "cancel_order", "order_id") in flows
    assert ("find_user_id_by_email", "get_user_details", "user_id") in flows
    assert not any(src == dst for src, dst, _ in flows)
    assert ("modify_user_address", "find_user_id_by_email", "user_id") not in flows  # direction matters
    # the similarity floor cuts flows between unrelated tools
    assert dataflow_edges(tools, vecs, flow_min_sim=1.01) == []


def test_graph_kinds_weights_and_round_trip(tmp_path):
    tools = [GET_USER, FIND_USER, CANCEL, ADDRESS]
    vecs, _ = embed_tools(tools, "fast")
    g = build_graph(tools, vecs, threshold=0.3, flow_min_sim=0.0)
    assert g.is_directed() and g.vcount() == 4
    assert set(g.es["kind"]) <= {"similar", "dataflow"} and "dataflow" in g.es["kind"]
    assert g.vs["tool_id"] == [t.id for t in tools]
    s, d, w = undirected_weights(g, flow_bonus=0.5)
    assert (s < d).all() and (w > 0).all()
    stats = save_graph(g, tmp_path)
    assert stats["nodes"] == 4 and stats["dataflow"] == g.es["kind"].count("dataflow")
    g2 = load_graph(tmp_path)
    assert g2.get_edgelist() == g.get_edgelist() and g2.es["kind"] == g.es["kind"]
    import pandas as pd

    df = pd.read_parquet(tmp_path / "edges.parquet")
    assert len(df) == g.ecount() and set(df.columns) >= {"src", "dst", "kind", "weight"}


def test_empty_graph_saves(tmp_path):
    g = build_graph([], np.zeros((0, 384), np.float32), threshold=0.5)
    assert save_graph(g, tmp_path) == {"nodes": 0, "edges": 0, "similar": 0, "dataflow": 0}


def test_the_similarity_pass_reports_its_progress():
    """The tool graph is the longest discover step on a large corpus (minutes for 30k tools on a
    loaded machine): it counts tools done, so a log shows it moving (issue 17 §2)."""
    vecs = np.random.default_rng(0).standard_normal((3000, 16)).astype(np.float32)
    buf = io.StringIO()
    with progress.show(stream=buf, every=0.0001, live=False):
        similarity_edges(vecs, 0.5, top_k=5, block=100)
    lines = buf.getvalue().splitlines()
    assert lines[-1].startswith("similar tools: 3000/3000 tools (100%)") and "done in" in lines[-1], lines
