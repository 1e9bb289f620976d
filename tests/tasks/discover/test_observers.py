"""Reads grouped with the writes they observe (tasks.discover.observers), on a small labelled corpus:
a parking domain whose only read about sessions sits in another community gets that read, and its
writes are then observed in the built environment (real synthesis, real sandbox); a write whose
entity no read of the corpus is about is reported unobservable, and no tool is invented for it."""

from __future__ import annotations

import igraph as ig
import numpy as np

from agentscaler.models import Tool
from agentscaler.workspace import Workspace
from envs.sandbox import unsafe_from_env
from tasks.discover.domains import domain_id
from tasks.discover.observers import same_entity, share_reads
from tasks.environments.plan import tool_reading
from tasks.environments.synthesize import synthesize_domain


def tool(name: str, desc: str, params: dict[str, str] | None = None) -> Tool:
    props = {k: {"type": "string", "description": v} for k, v in (params or {}).items()}
    return Tool(name=name, source_name=name, source="test", description=desc,
                parameters={"type": "object", "properties": props, "required": list(props)}).with_id()


START = tool("start_parking_session", "Start a parking session for a vehicle in a zone.",
             {"plate": "Licence plate of the vehicle.", "zone_id": "The parking zone."})
END = tool("end_parking_session", "Stop an active parking session and settle the fee.",
           {"session_id": "The parking session to end."})
ZONES = tool("list_parking_zones", "List the parking zones of a city with their hourly rate.",
             {"city": "City name."})
SESSION = tool("get_parking_session", "Get a parking session's details: zone, plate, status, fee.",
               {"session_id": "The parking session id."})
RECEIPT = tool("register_vehicle", "Register a vehicle with its licence plate and owner name.",
               {"plate": "Licence plate.", "owner": "Owner's name."})
WEATHER = tool("get_weather", "Get the current weather for a city.", {"city": "City name."})
TOOLS = [START, END, ZONES, SESSION, RECEIPT, WEATHER]

# by hand: community detection put the session read with the weather, away from the session writes
PARKING = {"domain": domain_id([START.id, END.id, ZONES.id, RECEIPT.id]),
           "tools": [START.id, END.id, ZONES.id, RECEIPT.id],
           "names": [START.name, END.name, ZONES.name, RECEIPT.name], "edges": []}
OTHER = {"domain": domain_id([SESSION.id, WEATHER.id]), "tools": [SESSION.id, WEATHER.id],
         "names": [SESSION.name, WEATHER.name], "edges": []}


def test_labelled_kinds_and_entities():
    """The labels this corpus is built on, as the environments stage reads the tools."""
    assert tool_reading(START) == ("write", "parking_session")
    assert tool_reading(END)[0] == "write" and same_entity(tool_reading(END)[1], "parking_session")
    assert tool_reading(SESSION)[0] == "read" and same_entity(tool_reading(SESSION)[1], "parking_session")
    assert tool_reading(RECEIPT)[0] == "write"
    assert not same_entity("value", "value")  # too vague to group two tools by


def test_the_read_about_a_write_joins_its_domain_and_a_write_without_one_is_unobservable():
    records, report = share_reads([PARKING, OTHER], TOOLS, None, None, tool_reading, domain_id)
    parking, other = records
    assert SESSION.id in parking["tools"] and SESSION.name in parking["names"]
    assert parking["domain"] == domain_id(parking["tools"]) != PARKING["domain"]  # members changed: a new id
    assert other == OTHER  # the read stays where it was too (shared, not moved)
    (shared,) = parking["shared"]
    assert shared["name"] == SESSION.name and set(shared["for_writes"]) == {START.name, END.name}
    assert "no read of the domain is about it" in shared["reason"]
    # nothing in the corpus reads vehicles: reported, not invented
    assert [u["name"] for u in parking["unobservable"]] == [RECEIPT.name]
    assert parking["unobservable"][0]["why"] == "no read in the corpus"
    assert len(parking["tools"]) == len(PARKING["tools"]) + 1
    assert report == {"reads_shared": 1, "domains_given_reads": 1, "writes_unobservable": 1, "cap": 3,
                      "left_out_domain_full": 0}
    full, report = share_reads([PARKING], TOOLS, None, None, tool_reading, domain_id, max_size=4)
    assert "shared" not in full[0] and report["left_out_domain_full"] >= 1  # discovery's size bound holds


def test_strongest_edge_first_and_capped():
    """Of several reads about the entity, the one with the strongest graph edge to the domain comes
    first; no more than `cap` are shared."""
    extra = [tool(f"find_parking_sessions_{c}", "Find parking sessions by licence plate.", {"plate": "Plate."})
             for c in "abc"]
    tools = TOOLS + extra
    g = ig.Graph(n=len(tools), edges=[(len(TOOLS) + 2, 0)], directed=False)  # ..._c similar to start_...
    g.es["weight"], g.es["kind"] = [0.8], ["similar"]
    records, _ = share_reads([PARKING], tools, np.zeros((len(tools), 4)), g, tool_reading, domain_id, cap=2)
    names = [s["name"] for s in records[0]["shared"]]
    assert names[0] == "find_parking_sessions_c" and len(names) == 2
    assert {e["src"] for e in records[0]["edges"]} == {START.name, "find_parking_sessions_c"}


def test_after_the_step_the_write_is_observed(tmp_path):
    """Built for real: before the step no read shows the session writes; after it, one does."""
    ws = Workspace(tmp_path)
    unsafe = unsafe_from_env()
    before = synthesize_domain(ws, PARKING, TOOLS, unsafe=unsafe).report["quality"]
    (after_rec, _), _ = share_reads([PARKING, OTHER], TOOLS, None, None, tool_reading, domain_id)
    after = synthesize_domain(ws, after_rec, TOOLS, unsafe=unsafe).report["quality"]
    assert before["unobserved"].get(END.name, "").startswith("no read about"), before
    assert END.name not in after["unobserved"] and START.name not in after["unobserved"], after
    assert after["writes_observed"] > before["writes_observed"]

