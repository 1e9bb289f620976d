"""A real PostgreSQL from Debian's package (initdb + pg_ctl in a temporary folder, a free loopback
port), started and stopped by the tests that use it. As root (CI containers) the server runs as the
`postgres` user the package creates: PostgreSQL refuses to run as root."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from agentscaler.llm_server import free_port


def pg_bin() -> Path | None:
    """The folder of initdb and pg_ctl (Debian keeps them out of PATH), or None when not installed."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    return Path(dirs[-1]) if dirs and (Path(dirs[-1]) / "pg_ctl").exists() else None


def why_not() -> str | None:
    """Why no server can be started here, or None."""
    if pg_bin() is None:
        return "PostgreSQL is not installed (apt-get install -y postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run the server as"
    return None


def _as_owner(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Yield a SQLAlchemy URL (psycopg driver) of a fresh server with an `agentscaler` database.

    Its files go to a folder of its own under the system temp dir (pytest's are closed to the
    postgres user) and are removed after."""
    bindir = pg_bin()
    assert bindir is not None, why_not()
    tmp = Path(tempfile.mkdtemp(prefix="agentscaler-pg-"))
    data, sock = tmp / "pgdata", tmp / "pgsock"
    for d in (tmp, data, sock):
        d.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        for d in (tmp, data, sock):
            os.chown(d, user.pw_uid, user.pw_gid)
    port = free_port()
    run = dict(check=True, capture_output=True, text=True, timeout=120)
    subprocess.run(_as_owner([str(bindir / "initdb"), "-D", str(data), "-U", "agentscaler", "--auth=trust",
                              "--no-sync", "-E", "UTF8"]), **run)
    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(_as_owner([str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(tmp / "pg.log"),
                              "-w", "-t", "60", "start"]), **run)
    try:
        subprocess.run(_as_owner([str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "agentscaler",
                                  "agentscaler"]), **run)
        yield f"postgresql+psycopg://agentscaler@127.0.0.1:{port}/agentscaler"
    finally:
        subprocess.run(_as_owner([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                       capture_output=True, timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
