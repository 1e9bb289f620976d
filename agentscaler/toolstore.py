"""corpus/tools.parquet: the normalized tool corpus (one row per Tool; JSON fields as strings)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd

from agentscaler.models import Tool
from agentscaler.workspace import atomic_write_bytes

_JSON_FIELDS = ("parameters", "returns")
COLUMNS = list(Tool.model_fields)


def save_tools(path: Path, tools: list[Tool]) -> Path:
    rows = []
    for t in tools:
        row = t.model_dump()
        for f in _JSON_FIELDS:
            row[f] = json.dumps(row[f], sort_keys=True) if row[f] is not None else None
        rows.append(row)
    df = pd.DataFrame(rows, columns=COLUMNS)
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return atomic_write_bytes(Path(path), buf.getvalue())


def load_tools(path: Path) -> list[Tool]:
    df = pd.read_parquet(path)
    tools = []
    for row in df.to_dict(orient="records"):
        for f in _JSON_FIELDS:
            row[f] = json.loads(row[f]) if isinstance(row.get(f), str) else None
        row = {k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}  # NaN -> None
        tools.append(Tool.model_validate(row))
    return tools
