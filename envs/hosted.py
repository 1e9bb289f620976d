"""Many live episodes of one domain in one sandbox worker (issue 20: a thousand episodes for RL).

    envs = Environment.open_hosted(domain_dir, episodes=8)   # one worker, 8 Environments
    envs[0].reset(); envs[0].call("get_user", {"user_id": "u1"})

Each hosted episode is a slot in the worker's child: its own in-memory copy of the seed, its own
connection guard and db helper, and tools.py run afresh for it, so one episode's rows and module
globals do not reach another. What they share is the child's interpreter (imported modules,
scratch): tool code that patches a module it imported would reach the other episodes of that child.
That is the same trade verification's shared replay makes (envs.episode.Environment.replay) and is
why hosting is opt-in: a plain `Environment.open` still gives each episode a fresh child. Rule code
and statically checked LLM code (no stores on modules, no introspection) cannot patch modules.

`Environment` talks to an `EpisodeSlot` as it talks to its own `WorkerProcess`: requests carry the
slot id, and "a fresh child" (reset after tool code ran) becomes "reopen the slot". The slots of a
worker take turns on its pipe (a lock). When the child crashes or hangs, the worker replaces it; the
slot whose call did it gets the crash, and every other slot of that worker learns at its next request
that its state is gone (SlotLost): it is reopened from the seed, the Environment rebuilds the episode
from its replay log, as after any crash, and sends the call again, so that episode sees no error.
Episodes of other workers are not touched.
"""

from __future__ import annotations

import threading
from typing import Any

from envs.sandbox import WorkerCrashed, WorkerProcess


class SlotLost(WorkerCrashed):
    """This episode's state went with a child that another episode's tool crashed; nothing of this
    request ran. The slot is open again (at the seed): rebuild the episode and send it again."""


class HostedWorker:
    """One sandbox worker shared by the episode slots of one domain."""

    def __init__(self, worker: WorkerProcess):
        self.worker = worker
        self.lock = threading.Lock()
        self.generation = 0  # bumped each time the child is replaced: every slot's state is gone then
        self.members: set[int] = set()  # slots not closed yet; the worker stops with the last
        self._next = 1

    def new_slot(self) -> "EpisodeSlot":
        with self.lock:
            slot, self._next = self._next, self._next + 1
            self.members.add(slot)
        ep = EpisodeSlot(self, slot)
        ep.fresh()
        return ep


class EpisodeSlot:
    """The `WorkerProcess` face of one hosted episode (what `Environment` calls `self.worker`)."""

    def __init__(self, host: HostedWorker, slot: int):
        self.host, self.slot = host, slot
        self.generation = -1  # the child generation this slot was opened in (-1: not open)
        self.restarts = 0
        self.tainted = False  # tool code ran since the slot was (re)opened

    # what Environment reads from its worker
    @property
    def isolation(self) -> dict[str, bool]:
        return self.host.worker.isolation

    @property
    def load_error(self) -> str | None:
        return self.host.worker.load_error

    @property
    def missing(self) -> list[str]:
        return self.host.worker.missing

    @property
    def time_limit(self) -> float:
        return self.host.worker.time_limit

    @property
    def grace(self) -> float:
        return self.host.worker.grace

    def _open_locked(self) -> None:
        reply, _ = self.host.worker.request({"op": "open_ep", "ep": self.slot})
        if reply.get("ok") is not True:
            raise WorkerCrashed(f"could not open a hosted episode: {reply.get('error')}")
        self.generation = self.host.generation
        self.tainted = False

    def _crashed_locked(self) -> None:
        """The worker replaced its child: every slot's state is gone; this one is reopened now."""
        self.host.generation += 1
        self.restarts += 1
        self._open_locked()

    def fresh(self, reap: bool = False) -> None:
        """Reopen this slot from the seed, tools.py run afresh (the hosted form of a fresh child)."""
        with self.host.lock:
            try:
                self._open_locked()
            except WorkerCrashed:
                self._crashed_locked()

    def request(self, obj: dict[str, Any], payload: bytes = b"", timeout: float | None = None) -> tuple[dict, bytes]:
        with self.host.lock:
            if self.generation != self.host.generation:
                # Another slot's call crashed the child: this episode's state went with it.
                self.restarts += 1
                self._open_locked()
                raise SlotLost("lost its state: the sandbox child hosting this episode was replaced "
                               "after another episode's tool crashed it")
            if obj.get("op") in ("call", "batch", "episodes"):
                self.tainted = True
            try:
                return self.host.worker.request({**obj, "ep": self.slot}, payload, timeout)
            except WorkerCrashed:
                self._crashed_locked()
                raise

    def close(self) -> None:
        """Free the slot; the worker stops with the last slot."""
        with self.host.lock:
            if self.slot not in self.host.members:
                return
            self.host.members.discard(self.slot)
            if not self.host.members:
                self.host.worker.close()
            elif self.generation == self.host.generation:
                try:
                    self.host.worker.request({"op": "close_ep", "ep": self.slot})
                except WorkerCrashed:
                    self.host.generation += 1
            self.generation = -1
