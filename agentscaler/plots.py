"""Charts for the stages that draw (discover's domain map, the report's plots): headless PNGs."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from agentscaler.workspace import atomic_write_bytes


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display)."""
    # Imported on first use: matplotlib takes ~0.7 s to load, and only a drawing needs it.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: Path, dpi: int = 100) -> Path:
    """Write the figure as a PNG (atomically) and close it."""
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=dpi)
    pyplot().close(fig)
    return atomic_write_bytes(Path(path), buf.getvalue())
