"""Replay: the verifier's own evidence. Every trajectory's tool calls run again, in order, in an
episode of its domain that starts from the seed; the replayed results and final state are what
verification judges, and what the trajectory recorded is only compared with them.

Cost, and the one trade it makes: a domain's environment (one sandbox worker) is opened once per
verifier and every trajectory of the domain is replayed in one sandbox child, many per round trip
(envs.episode.Environment.replay: no fork per trajectory), each from the seed with tools.py's
module as a fresh run leaves it (run again only when tool code changed its globals or functions:
envs.worker.module_state; a module holding lists, dicts or objects runs before every episode), on
the child's one connection (the seed loaded into it again, its prepared statements kept;
the SQLite change counters it carries are read by no tool SQL, or each episode of that child gets
a new connection: envs.worker.Worker.run_episodes). What tool code changes outside its own module
(a stdlib module it patches, scratch files, a function it registers on the connection) could still
reach later trajectories of the same round trip, so a trajectory whose record
disagrees with that replay is replayed once more alone in a fresh child (as its rollout ran)
before it is judged; that replay decides, and when the two replays differ the environment is
unstable (nondeterministic or stateful tool code), which attribution blames on the environment.
What this leaves open: a record forged to match what such process-wide state would make a shared
replay return is accepted; the trajectories our own engines record never do.
The state hash is computed here (the environment's envs.state.StateOracle) from the database image the child sends;
an episode that committed no write ended at the seed. An image equal to the one hashed just before
is not hashed again (the verifier replays a scenario's trials one after another, and they often
end alike); remembering more images by a digest cost more than it saved (sha256 of a 90 kB image
takes about as long as hashing the state it holds).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.episode import Environment, ToolResult

# Domains whose sandbox workers start at once. Starting one is mostly waiting (bubblewrap, the
# interpreter, the zygote's first forks: about 0.12 s of CPU in 0.4-0.6 s), so several overlap.
OPEN_THREADS = 4


@dataclass
class Replayed:
    """One trajectory's calls, replayed from the seed."""

    results: list[ToolResult]  # one per call, in order; .text() is what an agent would have been shown
    state_hash: str  # the replayed final state
    diff: list[dict[str, Any]] | None = None  # seed -> final field diff, when the state differs from `want`
    unstable: bool = False  # a shared-child replay and a fresh-child replay disagreed
    texts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.texts:
            self.texts = [r.text() for r in self.results]


class DomainReplay:
    """One domain's environment (its sandbox worker) and a state oracle over its seed."""

    def __init__(self, domain_dir: Path, env: Environment | None = None):
        self.owned = env is None
        self.env = env if env is not None else Environment.open(domain_dir, spin_us=0)
        self.oracle = self.env.state_oracle()
        self.seed_hash = self.oracle.plan.combine(self.oracle.seed_digests)  # kept since the oracle was built

    def _hash(self, image: bytes | None) -> str:
        # the oracle compares the image with the one it holds (equal bytes: no work)
        return self.seed_hash if image is None else self.oracle.hash(image)

    def _diff(self, image: bytes | None) -> list[dict[str, Any]]:
        return [] if image is None else self.oracle.diff(image)

    def replay(self, calls: list[list[tuple[str, Any]]], want: list[str], fresh: bool = False) -> list[Replayed]:
        """Replay each call list from the seed; `want` is the hash each should reach (its gold
        state): a final state that differs gets its field diff from the seed."""
        out = []
        for (results, image), w in zip(self.env.replay(calls, fresh=fresh), want):
            h = self._hash(image)
            out.append(Replayed(results, h, None if h == w else self._diff(image)))
        return out

    def close(self) -> None:
        if self.owned:
            self.env.close()  # and its oracle


class Replayer:
    """The replaying side of one verification: a DomainReplay per domain, opened on first use or
    ahead of it (`prefetch`, OPEN_THREADS at a time). `envs` hands in environments that are
    already open (they stay open: the caller owns them). Thread-safe.

    Workers are always started by this object's own threads, which live until close(): a sandbox
    worker dies with the thread that started it (bubblewrap's --die-with-parent and the worker's
    PR_SET_PDEATHSIG follow the thread, not the process), so one opened by a caller's short-lived
    thread (a verification's per-domain pool) would be gone at the next use."""

    def __init__(self, ws_domains: Path, envs: dict[str, Environment] | None = None,
                 open_env: Callable[[str], Environment | None] | None = None):
        self.root = Path(ws_domains)
        self.envs = envs or {}
        # opens a domain's environment that `envs` lacks, for the caller to keep (a verifier process
        # whose workers outlive this Replayer); None from it, or no open_env: opened and owned here
        self.open_env = open_env
        self.domains: dict[str, Future] = {}  # domain -> its DomainReplay, or why it cannot replay
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def _open(self, domain: str) -> DomainReplay | str:
        try:
            env = self.envs.get(domain)
            if env is None and self.open_env is not None:
                env = self.open_env(domain)
            return DomainReplay(self.root / domain, env)
        except Exception as exc:  # noqa: BLE001 - a domain that cannot replay fails its trajectories, not the run
            return f"{type(exc).__name__}: {exc}"[:300]

    def prefetch(self, domains: list[str]) -> None:
        """Start opening these domains, in this order, in the background."""
        with self._lock:
            for d in domains:
                if d not in self.domains:
                    if self._pool is None:
                        self._pool = ThreadPoolExecutor(max_workers=OPEN_THREADS, thread_name_prefix="replay-open")
                    self.domains[d] = self._pool.submit(self._open, d)

    def domain(self, domain: str) -> DomainReplay | str:
        """The domain's replay (waits while it opens), or why it cannot replay."""
        self.prefetch([domain])
        with self._lock:
            fut = self.domains[domain]
        return fut.result()

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            futures, self.domains = list(self.domains.values()), {}
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        for f in futures:
            if not f.cancelled() and isinstance(f.result(), DomainReplay):
                f.result().close()

    def __enter__(self) -> "Replayer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
