"""What the catalog tests' spawned processes run. Its own small module so that a spawned process
imports the catalog and nothing else (a test module's imports cost each child about a second)."""

from __future__ import annotations

import os
from pathlib import Path

from agentscaler.catalog import CATALOG_URL_ENV, Catalog


def mark_many(path: str, worker: int) -> None:
    """30 domains of this worker's, each marked running then done."""
    cat = Catalog(Path(path))
    for i in range(30):
        cat.mark(f"d{worker}-{i}", "synthesize", "running")
        cat.mark(f"d{worker}-{i}", "synthesize", "done")


def open_catalog(path: str) -> None:
    Catalog(Path(path)).mark("d", "synthesize", "running")


def hammer_server(url: str, worker: int) -> None:
    """Every process marks the same 10 domains running (attempts + 1 each), then its own 10 done."""
    os.environ[CATALOG_URL_ENV] = url
    cat = Catalog(Path("/nonexistent/catalog.sqlite"))
    for i in range(10):
        cat.mark(f"shared-{i}", "synthesize", "running")
        cat.mark(f"own{worker}-{i}", "synthesize", "running")
        cat.mark(f"own{worker}-{i}", "synthesize", "done")
