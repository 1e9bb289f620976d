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

Vectorized steps (`Environment.call_many`, as RL frameworks step many environments per call): the
calls of all the episodes of one worker go as ONE message ("many": slot, tool, arguments per call)
and come back as one reply, so one round trip serves every episode of the worker; the messages to
all the workers of a step are sent before any reply is read, so the workers run at once. The child
runs the calls in order, each on its own slot, exactly as it runs them one at a time. A crash
mid-step replaces the child like any crash: every slot of that worker is lost (generation bump)
and the step's calls of that worker are redone one by one through the plain path, which rebuilds
each episode and blames the call that crashes the child again.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from envs.sandbox import TOOL_OPS, Pending, WorkerCrashed, WorkerProcess

_ORDER = itertools.count()  # the order in which a step takes the locks of many workers (no deadlock)


class SlotLost(WorkerCrashed):
    """This episode's state went with a child that another episode's tool crashed; nothing of this
    request ran. The slot is open again (at the seed): rebuild the episode and send it again."""


class OpenRefused(WorkerCrashed):
    """The child answered an open_ep with an error (e.g. out of memory): it is alive and no other
    slot lost anything; this slot is not open."""


class HostedWorker:
    """One sandbox worker shared by the episode slots of one domain."""

    def __init__(self, worker: WorkerProcess):
        self.worker = worker
        self.lock = threading.Lock()
        self.generation = 0  # bumped each time the child is replaced: every slot's state is gone then
        self.members: set[int] = set()  # slots not closed yet; the worker stops with the last
        self._next = 1
        self.order = next(_ORDER)

    def new_slot(self) -> "EpisodeSlot":
        with self.lock:
            slot, self._next = self._next, self._next + 1
            self.members.add(slot)
        ep = EpisodeSlot(self, slot)
        ep.fresh()
        return ep

    def send_many(self, calls: list[tuple["EpisodeSlot", str, dict[str, Any], str]]) -> Pending:
        """Send one call each of many slots of this worker as one message; finish_many reads the
        reply. The caller holds self.lock until then, and every slot is current (open in this child).
        Raises as WorkerProcess.send; after a crash every slot's state is gone (generation bumped)."""
        for ep, _, _, _ in calls:
            ep.tainted = True
        try:
            return self.worker.send({"op": "many", "calls": [[ep.slot, n, a, k] for ep, n, a, k in calls]},
                                    timeout=self.worker.time_limit * len(calls) + self.worker.grace)
        except WorkerCrashed:
            self.generation += 1
            raise

    def finish_many(self, pending: Pending, n: int) -> list[tuple[bool, bytes | str]]:
        """The results of send_many's n calls, in order: (True, the content's JSON text) or (False,
        the error). WorkerCrashed when the child crashed, hung or answered with a reply that does not
        match the calls (then it was replaced too): every slot's state is gone."""
        try:
            reply, payload = self.worker.finish(pending)
            results = reply.get("results")
            if not isinstance(results, list) or len(results) != n or not all(
                    isinstance(r, list) and len(r) == 2 and (r[0] is False or (r[0] is True and isinstance(r[1], int)))
                    for r in results) or sum(r[1] for r in results if r[0] is True) != len(payload):
                self.worker.restarts += 1
                self.worker.fresh(reap=True)
                raise WorkerCrashed("broke the worker protocol (a step's reply that does not match its calls) "
                                    "and was stopped")
        except WorkerCrashed:
            self.generation += 1
            raise
        out: list[tuple[bool, bytes | str]] = []
        at = 0
        for ok, val in results:
            if ok:
                out.append((True, payload[at:at + val]))
                at += val
            else:
                out.append((False, str(val or "tool error")))
        return out


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

    @property
    def current(self) -> bool:
        """Open in the worker's current child (False after a crash of another slot's call)."""
        return self.generation == self.host.generation

    def _open_locked(self) -> None:
        reply, _ = self.host.worker.request({"op": "open_ep", "ep": self.slot})
        if reply.get("ok") is not True:
            self.generation = -1
            raise OpenRefused(f"could not open a hosted episode: {reply.get('error')}")
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
            except OpenRefused:
                raise  # an error reply: the child lives on, and so does every other slot's state
            except WorkerCrashed:
                self._crashed_locked()

    def request(self, obj: dict[str, Any], payload: bytes = b"", timeout: float | None = None) -> tuple[dict, bytes]:
        with self.host.lock:
            if not self.current:
                # Another slot's call crashed the child: this episode's state went with it.
                self.restarts += 1
                self._open_locked()
                raise SlotLost("lost its state: the sandbox child hosting this episode was replaced "
                               "after another episode's tool crashed it")
            if obj.get("op") in TOOL_OPS:
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
            elif self.current:
                try:
                    self.host.worker.request({"op": "close_ep", "ep": self.slot})
                except WorkerCrashed:
                    self.host.generation += 1
            self.generation = -1
