"""MCP round trip per tool call on loopback (stdio and streamable HTTP) vs a direct Environment.call.

    .venv/bin/python benchmarks/bench_mcp.py [--quick] [--n 2000] [--no-tau2]

Each transport serves the same domain with `agentscaler serve DIR --mcp [--http PORT]` (a separate
process, as an outside agent would use it) and is timed from the MCP SDK's own client: one
`call_tool` per round trip, after a warm-up, one session. The anchor is measured in the same run:
the same call through `Environment.call` in this process, with the server's settings (spin_us=0:
caller and worker sleep on the pipe). Every path runs the tool in the sandbox worker and validates
arguments first, so the difference is the protocol (JSON-RPC, the SDK, a thread hop, the transport).
Domains: the shop fixture (read `get_user`) and, unless --no-tau2, tau2 airline (read
`get_user_details`), built from the tau2 corpus into a temporary folder. --quick: 300 calls per
path, shop only (well under 3 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "data" / "domains" / "shop"))

from benchmarks.results_io import Anchor, Figure, Recorder, p99  # noqa: E402
from envs.episode import Environment  # noqa: E402

AGENTSCALER = str(Path(sys.executable).parent / "agentscaler")
WARMUP = 20


def med(ts: list[float]) -> float:
    return statistics.median(ts)




def direct(domain: Path, name: str, args: dict, n: int) -> tuple[list[float], dict[str, bool]]:
    with Environment.open(domain, spin_us=0) as env:
        env.reset()
        for _ in range(WARMUP):
            assert env.call(name, args).ok
        out = []
        for _ in range(n):
            t = time.perf_counter()
            res = env.call(name, args)
            res.text()  # what the MCP server sends is the text
            out.append(time.perf_counter() - t)
        return out, env.isolation


async def _timed(session: ClientSession, name: str, args: dict, n: int) -> list[float]:
    await session.initialize()
    for _ in range(WARMUP):
        assert not (await session.call_tool(name, args)).isError
    out = []
    for _ in range(n):
        t = time.perf_counter()
        res = await session.call_tool(name, args)
        out.append(time.perf_counter() - t)
        assert not res.isError
    return out


def over_stdio(domain: Path, name: str, args: dict, n: int) -> list[float]:
    async def run() -> list[float]:
        params = StdioServerParameters(command=AGENTSCALER, args=["serve", str(domain), "--mcp"], env={**os.environ})
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            return await _timed(s, name, args, n)
    return anyio.run(run)


def over_http(domain: Path, name: str, args: dict, n: int) -> list[float]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([AGENTSCALER, "serve", str(domain), "--mcp", "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        for _ in range(600):
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.2)

        async def run() -> list[float]:
            async with streamablehttp_client(url) as (r, w, _), ClientSession(r, w) as s:
                return await _timed(s, name, args, n)
        return anyio.run(run)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def domains(tmp: Path, tau2: bool) -> list[tuple[str, Path, str, dict]]:
    from build import build_shop  # tests/data/domains/shop/build.py

    out = [("shop (fixture)", build_shop(tmp / "shop"), "get_user", {"user_id": "u1"})]
    if tau2:
        from envs.tau2.build import build_tau2_domain

        build_tau2_domain("airline", tmp / "tau2_airline")
        out.append(("tau2 airline", tmp / "tau2_airline", "get_user_details", {"user_id": "raj_sanchez_7340"}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="300 calls per path, shop only (bounded run).")
    ap.add_argument("--n", type=int, default=None, help="Timed calls per path (default 2000, quick 300).")
    ap.add_argument("--no-tau2", action="store_true", help="Skip tau2 airline.")
    a = ap.parse_args()
    n = a.n or (300 if a.quick else 2000)
    lines = ["| domain | path | median (us) | p99 (us) | median vs direct |", "|---|---|---|---|---|"]
    with Recorder("mcp") as rec, tempfile.TemporaryDirectory() as tmp:
        for label, d, name, args in domains(Path(tmp), tau2=not (a.quick or a.no_tau2)):
            base, isolation = direct(d, name, args, n)
            rec.layers = sorted({*rec.layers, *(f"sandbox:{k}" for k, v in isolation.items() if v),
                                 "arguments validated before the worker (agentscaler.schemas)"})
            anchor = Anchor(value=round(med(base) * 1e6, 1), unit="us", kind="measured",
                            source=f"Environment.call {name} in-process caller, spin_us=0, same run")
            lines.append(f"| {label} | direct Environment.call | {med(base) * 1e6:.0f} | {p99(base) * 1e6:.0f} | 1.00x |")
            workload = f"{'fixture' if 'fixture' in label else 'real'}: {label}, read {name}, {n} calls, one session"
            for path, fn in (("MCP stdio", over_stdio), ("MCP streamable HTTP", over_http)):
                ts = fn(d, name, args, n)
                ratio = med(ts) / med(base)
                lines.append(f"| {label} | {path} | {med(ts) * 1e6:.0f} | {p99(ts) * 1e6:.0f} | {ratio:.2f}x |")
                rec.figures.append(Figure(name=f"{path} round trip per tool call, {label}", value=round(med(ts) * 1e6, 1),
                                          unit="us", workload=workload + (" (quick)" if a.quick else ""),
                                          median=round(med(ts) * 1e6, 1), p99=round(p99(ts) * 1e6, 1),
                                          ratio_to_anchor=round(ratio, 2), anchor=anchor))
        rec.notes.append("The client is the MCP SDK's (Python, asyncio) in the benchmark process; the server is "
                         "`agentscaler serve` in its own process; times include the SDK on both sides.")
    rec.write("MCP round trip per tool call on loopback vs a direct Environment.call (medians and p99 in "
              "microseconds, measured side by side in one run).\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
