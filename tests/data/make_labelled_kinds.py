"""Draw the tools of tests/data/labelled_kinds.json from a workspace ingested from the real corpora (run by hand).

    agentscaler corpus fetch all && agentscaler -w /tmp/ws ingest bfcl tau2 nestful
    python tests/data/make_labelled_kinds.py /tmp/ws labels.txt > tests/data/labelled_kinds.json

The draw: every tool of BFCL's multi-turn APIs (stateful: file system, trading, travel, tickets,
messages, posts, vehicle, memory), every tau2 tool, 50 NESTFUL tools and 100 other BFCL tools at
random (seed 18). The labels are not computed: `labels.txt` holds one line per drawn tool,
`INDEX read|write [amb: why]`, written by a person who read each name, description, parameter
list and output spec (the classifier's output was not looked at while labelling).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from agentscaler.artifacts import load_tools
from agentscaler.workspace import Workspace

MULTI_TURN = {"vehicle_control", "trading_bot", "travel_booking", "gorilla_file_system", "math_api", "memory_kv",
              "posting_api", "memory_vector", "message_api", "ticket_api", "memory_rec_sum"}


def draw(ws: Path) -> list:
    tools = load_tools(Workspace(ws).tools_path)
    rng = random.Random(18)
    mt = sorted([t for t in tools if t.source == "bfcl" and t.category in MULTI_TURN], key=lambda t: (t.category, t.name))
    tau = sorted([t for t in tools if t.source == "tau2"], key=lambda t: (t.category or "", t.name))
    nest = sorted([t for t in tools if t.source == "nestful"], key=lambda t: t.name)
    rest = sorted([t for t in tools if t.source == "bfcl" and t.category not in MULTI_TURN], key=lambda t: t.name)
    return mt + tau + rng.sample(nest, 50) + rng.sample(rest, 100)


def main() -> None:
    picked = draw(Path(sys.argv[1]))
    labels = {}
    for line in Path(sys.argv[2]).read_text().splitlines():
        idx, label, *rest = line.split(" ", 2)
        note = rest[0][len("amb: "):] if rest and rest[0].startswith("amb: ") else ""
        labels[int(idx)] = (label, note)
    rows = []
    for i, t in enumerate(picked):
        label, note = labels[i]
        tool = t.model_dump(exclude={"kind"})
        rows.append({"label": label, "ambiguous": bool(note), "note": note, "corpus_kind": t.kind, "tool": tool})
    sys.stdout.write("[\n" + ",\n".join(json.dumps(r, sort_keys=True, ensure_ascii=False) for r in rows) + "\n]\n")


if __name__ == "__main__":
    main()
