"""The small hand-written service corpus of issue 18 (tests/data/corpora/services/: a cinema, a parking
service, a pharmacy, a gym, a library, a vet clinic), as Tools."""

from __future__ import annotations

import json
from pathlib import Path

from agentscaler.models import Tool

SERVICES = Path(__file__).resolve().parents[2] / "data" / "corpora" / "services"
NAMES = ("cinema", "parking", "pharmacy", "gym", "library", "vet_clinic")


def service_tools(name: str) -> list[Tool]:
    data = json.loads((SERVICES / f"{name}.json").read_text())
    return [Tool(name=t["function"]["name"], source_name=t["function"]["name"], source="openai",
                 description=t["function"]["description"], parameters=t["function"]["parameters"]).with_id()
            for t in data["tools"]]


def service_record(name: str) -> dict:
    tools = service_tools(name)
    return {"domain": name, "tools": [t.id for t in tools], "names": [t.name for t in tools]}
