"""read_trajectory_rows(share_tools=True): a line whose tools list is one read before gets that
list without parsing it, and every line reads exactly as a full parse reads it, crafted lines
(a nested "tools" with the same bytes, a repeated key, torn or broken JSON around the cut) included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentscaler.artifacts import SCENARIOS, domain_scenarios, read_trajectory_rows
from agentscaler.models import Trajectory

TOOLS = [{"type": "function", "function": {"name": "get_user", "parameters": {
    "type": "object", "properties": {"user_id": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "set_x", "parameters": {"type": "object"}}}]


OTHER = TOOLS[:1] + [{"type": "function", "function": {"name": "set_y", "parameters": {"type": "object"}}}]


def _line(k: int, tools: list | None = None, domain: str = "d1") -> str:
    return Trajectory(id=f"t{k}", run_id="r", scenario_id=f"s{k}", domain=domain, trial=k,
                      messages=[{"role": "user", "content": f"hi {k}"}], tools=TOOLS if tools is None else tools,
                      final_hash="h", end_reason="user_stop").model_dump_json()


def _read(path: Path, share: bool) -> list[tuple]:
    return [(reason, detail.split(" [")[0], traj.model_dump() if traj else None, raw)
            for _, traj, reason, detail, raw, _ in read_trajectory_rows(path, share_tools=share)]


def test_shared_tools_read_as_a_full_parse_reads(tmp_path: Path) -> None:
    first = _line(0)
    cut = first.index(',"tools":')
    tb = first[cut + 9:first.index('],"final_hash":') + 1]
    nested = ('{"id":"n","run_id":"r","scenario_id":"s","domain":"d1","messages":[{"role":"user","content":"x",'
              f'"tools":{tb},"final_hash":"inner"}}],"final_hash":"outer","end_reason":"user_stop"}}')
    lines = [
        first,
        _line(1),  # the same list: shared
        _line(2, tools=[]),
        _line(3, domain="d2"),
        nested,  # the same bytes inside a message: the cut is not at the top level
        first.replace('"final_hash":"h"', '"final_hash":"h","tools":[]'),  # a second "tools": the last wins
        first.replace('"final_hash":"h"', '"id":"again"'),  # a key on both sides of the cut
        first[:-30],  # torn after the tools
        '{"id":' + first[first.index(',"tools":'):],  # broken before the tools
        '{"tools":' + tb + ',' + first[1:cut] + first[cut + 9 + len(tb):],  # the tools are the first member
        first[:first.index(',"final_hash":')] + "}",  # the tools are the last member
        # over 64 bits: orjson reads a float, the same either way
        first.replace('"role":"user"', '"role":"user","x":123456789012345678901234567890'),
        _line(12, tools=OTHER),  # another list with the same first bytes: its own
        _line(13, tools=OTHER),
        _line(14, tools=TOOLS + [{"type": "function", "function": {"name": "more"}}]),  # TOOLS' bytes then more
        _line(15),
        first.replace('],"final_hash":', ']x"final_hash":'),  # a known list, then no comma: not JSON
    ]
    path = tmp_path / "trajectories.jsonl"
    path.write_text("\n".join(lines) + "\n")
    full, shared = _read(path, False), _read(path, True)
    assert shared == full
    assert [r[0] for r in full] == [None, None, None, None, None, None, None, "malformed_json", "malformed_json",
                                    None, None, None, None, None, None, None, "malformed_json"]
    assert full[5][2]["tools"] == [] and full[6][2]["id"] == "again" and full[4][2]["final_hash"] == "outer"
    trajs = [t for _, t, *_ in read_trajectory_rows(path, share_tools=True)]
    assert trajs[1].tools is trajs[3].tools is trajs[-2].tools  # parsed once, shared
    assert trajs[0].tools == TOOLS and trajs[2].tools == [] and trajs[-4].tools is not trajs[1].tools
    assert trajs[-4].tools == OTHER and len(trajs[-3].tools) == 3
    plain = [t for _, t, *_ in read_trajectory_rows(path)]
    assert plain[1].tools is not plain[3].tools  # by default every trajectory has its own
    # where the members after a shared list start (a verdict is looked for from there on); 0 for
    # a line parsed whole
    members = [r[5] for r in read_trajectory_rows(path, share_tools=True)]
    spliced = [lines[i].index('],"final_hash":') + 1 if i in (1, 3, 11, 13, 15) else 0 for i in range(len(lines))]
    assert members == spliced and {r[5] for r in read_trajectory_rows(path)} == {0}


def test_domain_scenarios_validates_only_the_ids_asked_for(tmp_path: Path) -> None:
    """A verifier asks for the scenarios its trajectories name: the other rows (held-out ones, or
    a broken one) are not validated, and a row without a string id is never one of them."""
    good = {"id": "s1", "domain": "d", "read_only": True, "intent": "look", "gold_calls": [],
            "gold_hash": "g", "seed_hash": "g"}
    rows = [good, {**good, "id": "s2", "split": "heldout"}, {"id": "s3", "domain": "d"}, {"id": ["s1"]}]
    (tmp_path / SCENARIOS).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert [s.id for s in domain_scenarios(tmp_path, {"s1"})] == ["s1"]
    assert [s.id for s in domain_scenarios(tmp_path, {"s2", "s9"})] == ["s2"]
    with pytest.raises(ValidationError):
        domain_scenarios(tmp_path, {"s3"})
    with pytest.raises(ValidationError):
        domain_scenarios(tmp_path)
