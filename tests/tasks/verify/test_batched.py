"""The fast path decides exactly as the slow one: a whole run verified at once (domains two at a
time, many trajectories per sandbox round trip, workers opened ahead, each line rewritten from the
JSON it was read from) gives every trajectory the verdict it gets verified alone, one domain and
one trajectory at a time; and the rewritten file holds the trajectories as read, verdicts added;
the same files again when two verifier processes share the run.

Honest gold replays (real sandbox) on two domains, and crafted breaks of them, one per kind.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest

from agentscaler.artifacts import TRAJECTORIES, load_scenarios, load_trajectories, read_trajectory_rows
from agentscaler.models import Trajectory
from agentscaler.workspace import Workspace
from envs.episode import Environment
from tasks.rollouts.conversation import trajectory_id
from tasks.rollouts.gold import gold_trajectory
from tasks.scenarios.build import build_scenarios
from tasks.verify.replay import Replayer
from tasks.verify.shards import Shards
from tasks.verify.verify import _embedded, _verdict_out, verify_run, verify_trajectories
from tests.conftest import load_shop_builder
from tests.tasks.verify.test_verify import record


def _breaks(g: Trajectory) -> list[Trajectory]:
    """Copies of one gold replay, each broken one way (some stay honest)."""
    out = []

    def copy(k: int) -> Trajectory:
        return g.model_copy(deep=True, update={"id": trajectory_id("b", g.id, k), "trial": k})

    tools = [i for i, m in enumerate(g.messages) if m["role"] == "tool"]
    calls = [i for i, m in enumerate(g.messages) if m["role"] == "assistant" and m.get("tool_calls")]
    t = copy(1)
    t.final_hash = "0" * 32  # forged hash
    out.append(t)
    t = copy(2)
    t.messages[tools[0]]["content"] += " (forged)"  # forged output
    out.append(t)
    t = copy(3)
    del t.messages[calls[-1]:calls[-1] + 2]  # missing last call, no recorded state
    t.final_hash = ""
    out.append(t)
    t = copy(4)
    t.messages[calls[0]]["tool_calls"][0]["function"]["name"] = "drop_tables"  # unknown tool
    out.append(t)
    t = copy(5)
    t.messages[calls[0]]["tool_calls"][0]["function"]["arguments"] = json.dumps({"nope": 5})  # invalid arguments
    out.append(t)
    t = copy(6)
    del t.messages[calls[0]]  # a tool result without its call
    out.append(t)
    t = copy(7)
    t.end_reason = "turn_limit"
    out.append(t)
    t = copy(8)
    for _ in range(3):  # the same text three times
        t.messages[-2:-2] = [{"role": "assistant", "content": "Let me check."}, {"role": "user", "content": "ok"}]
    out.append(t)
    out.append(copy(9))  # an honest second trial
    return out


@pytest.fixture(scope="module")
def run(ws: Workspace) -> list[Trajectory]:
    """Gold replays of two domains (shop, and a copy of it under another id) and their breaks."""
    shutil.copytree(ws.domain_dir("shop"), ws.domain_dir("shop2"))
    trajs = []
    for d in ("shop", "shop2"):
        with Environment.open(ws.domain_dir(d)) as env:
            for s in load_scenarios(ws, d)[:6]:
                g = gold_trajectory(s, env, env.tools(), "You are an agent.", "b")
                g = g.model_copy(update={"domain": d, "id": trajectory_id("b", f"{d}/{s.id}", 0)})
                trajs += [g] + _breaks(g)
    return trajs


def test_a_run_at_once_decides_as_one_trajectory_at_a_time(ws: Workspace, run: list[Trajectory]) -> None:
    d = ws.rollout_dir("batched")
    d.mkdir(parents=True)
    (d / TRAJECTORIES).write_text("".join(t.model_dump_json() + "\n" for t in run))
    report = verify_run(ws, "batched")
    assert report["replay"]["trajectories"] == len(run) and not report["replay"]["failed_domains"]
    fast = {t.id: t for t in load_trajectories(ws, "batched")}
    verified = {r["trajectory_id"]: r["verdict"] for r in map(json.loads, (d / "verified.jsonl").read_text().splitlines())}

    alone = []
    with Replayer(ws.root / "domains") as rp:
        for t in run:
            one = t.model_copy(deep=True)
            verify_trajectories(ws, [one], replayer=rp, threads=1)
            alone.append(one)

    assert len(fast) == len(run)
    for t, one in zip(run, alone):
        got = fast[t.id]
        assert got.verdict == one.verdict, (t.id, got.verdict, one.verdict)
        assert verified[t.id] == one.verdict.model_dump()
        assert got.model_dump(exclude={"verdict"}) == t.model_dump(exclude={"verdict"})  # as read, verdict added
    kinds = {tuple(v.verdict.reasons) for v in alone}
    assert () in kinds and len(kinds) >= 7  # honest ones passed; the breaks failed in their own ways
    assert {"recorded_state_mismatch", "output_mismatch", "unknown_tool", "invalid_arguments", "malformed_dialogue",
            "turn_limit", "repetition", "state_mismatch"} <= {r for k in kinds for r in k}


def test_nothing_of_one_trajectory_reaches_the_next_in_a_batch(tmp_path: Path) -> None:
    """One domain's trajectories replayed in one sandbox child and one round trip: a row one
    trajectory wrote and a module global its tool code set are gone for the next. Honest records
    (each made in a fresh child, as the rollout engine makes them) agree with the shared replay
    outright (none is replayed again alone), and records showing the previous trajectory's row or
    global are rejected exactly as when each is verified alone."""
    ws = Workspace(tmp_path)
    dest = load_shop_builder()(ws.domain_dir("shop"))
    (dest / "tools.py").write_text((dest / "tools.py").read_text() + "\n\n_CALLS = [0]\n_get_user = get_user\n\n\n"
                                   "def get_user(db, user_id):\n    _CALLS[0] += 1\n"
                                   "    return {**_get_user(db, user_id), 'calls': _CALLS[0]}\n")
    build_scenarios(ws, "shop", per_domain=12, seed=1)
    scenarios = load_scenarios(ws, "shop")
    read = next(s for s in scenarios if s.read_only)
    user = next(c.arguments["user_id"] for s in scenarios for c in s.gold_calls if "user_id" in c.arguments)
    wrote, look = ("update_email", {"user_id": user, "email": "carried@over.org"}), ("get_user", {"user_id": user})
    with Environment.open(dest) as e:
        trajs = []
        for k in range(3):  # write then read, then a read that must see the seed again
            trajs.append(record(e, read, [wrote, look], k))
            trajs.append(record(e, read, [look], 10 + k))
        carried = record(e, read, [look], 20)
    assert '"calls": 1' in tool_text(trajs[1]) and "carried@over.org" not in tool_text(trajs[1])
    row = carried.model_copy(deep=True, update={"id": "row"})  # shows the row the trajectory before it wrote
    row.messages[3]["content"] = tool_text(trajs[0], 1)
    glob = carried.model_copy(deep=True, update={"id": "global"})  # shows the global the one before it set
    glob.messages[3]["content"] = tool_text(carried).replace('"calls": 1', '"calls": 2')
    batch = trajs + [row, trajs[0].model_copy(deep=True, update={"id": "again"}), glob]
    rep = verify_trajectories(ws, batch)
    assert rep["replay"]["replayed_fresh"] == 2  # only the two forged records disagreed with the shared replay
    alone = []
    with Replayer(ws.root / "domains") as rp:
        for t in batch:
            one = t.model_copy(deep=True, update={"verdict": None})
            verify_trajectories(ws, [one], replayer=rp, threads=1)
            alone.append(one)
    assert [t.verdict for t in batch] == [t.verdict for t in alone]
    faithful = {"output_mismatch", "recorded_state_mismatch"}
    assert all(not faithful & set(t.verdict.reasons) for t in batch if t.id not in ("row", "global"))
    assert {t.id: t.verdict.reasons for t in batch if t.id in ("row", "global")} == {
        "row": ["output_mismatch", "call_mismatch"], "global": ["output_mismatch", "call_mismatch"]}


def tool_text(t: Trajectory, i: int = 0) -> str:
    return [m for m in t.messages if m["role"] == "tool"][i]["content"]


def _with_verdict(t: Trajectory, line: bytes, verdict=...) -> bytes:
    """The line the rewrite writes for `line` (read as line 1 of a file holding it alone)."""
    return b"".join(_embedded(line, [(1, _verdict_out(t, line, verdict))]))


def test_a_verdict_put_into_the_line_gives_the_object_a_full_rewrite_gives(run: list[Trajectory]) -> None:
    """The verdict is spliced into a line that ends in `"verdict":null}` and names no
    other "verdict"; whatever the line, the result parses to the line's object, verdict replaced."""
    from agentscaler.models import Verdict

    t = run[0].model_copy(deep=True, update={"verdict": None})
    plain = t.model_dump_json().encode()
    quoted = t.model_copy(deep=True)
    quoted.messages[1]["content"] = 'say "verdict": null}'  # the word in a string: escaped, still spliced
    nested = t.model_copy(deep=True)
    nested.tools = [*nested.tools, {"type": "function", "function": {"name": "x", "verdict": None}}]  # a second key
    judged = t.model_copy(deep=True, update={"verdict": Verdict(passed=True)})
    failed = t.model_copy(deep=True, update={"verdict": Verdict(passed=False, reasons=["turn_limit"],
                                                                 attribution="agent")})
    obj = json.loads(plain)
    first = json.dumps({"verdict": {"passed": True}, **{k: v for k, v in obj.items() if k != "verdict"}},
                       separators=(",", ":")).encode()  # the verdict not the last member
    spaced = plain[:-1] + b' , "verdict" : {"passed": true}  }'  # a second verdict member, spaced
    huge = b',"n":1180591620717411303425'  # 2**70 + 1: orjson would read the float 2**70
    big = first.replace(b'"role":"user"', b'"role":"user"' + huge, 1)  # parsed again: by json
    lines = (plain, plain + b"\n", plain + b" \t\r\n",
             *(x.model_dump_json().encode() for x in (quoted, nested, judged, failed)), first, spaced, big,
             plain.replace(b'"role":"user"', b'"role":"user"' + huge, 1))
    for line in lines:
        for v in (Verdict(passed=True), Verdict(passed=False, reasons=["state_mismatch"], attribution="agent",
                                                diff=[{"table": "t", "key": "k", "expected": 1, "actual": 2}])):
            t.verdict = v
            out = _with_verdict(t, line)
            assert out.endswith(b"}\n") and out.count(b"\n") == 1
            want = {**json.loads(line), "verdict": v.model_dump()}
            assert json.loads(out) == want and out.count(b'"verdict"') <= line.count(b'"verdict"')
            assert _with_verdict(t, line, v.model_dump()) == out
    # an old verdict, the last member, is replaced in place: the bytes before it are the line's
    for line in (judged.model_dump_json().encode(), failed.model_dump_json().encode()):
        t.verdict = Verdict(passed=False, reasons=["state_mismatch"], attribution="agent")
        out = _with_verdict(t, line)
        cut = line.rindex(b',"verdict":')
        assert out[:cut] == line[:cut] and out[cut:] == b',"verdict":' + orjson.dumps(t.verdict.model_dump()) + b"}\n"



def test_after_a_known_tools_list_the_verdict_is_looked_for_in_the_members_after_it(
        run: list[Trajectory], tmp_path: Path) -> None:
    """A line read with a tools list read before names "verdict" in that list or before it
    without stopping the verdict going in (the reader found that those members name none of the
    members after the list); a second verdict member after the list still stops it."""
    from agentscaler.models import Verdict

    t = run[0].model_copy(deep=True, update={"verdict": None})
    t.tools = [*t.tools, {"type": "function", "function": {"name": "x", "verdict": None}}]  # named in the list
    t.messages[1]["content"] = '{"verdict":null}'  # and in a message, escaped
    line = t.model_dump_json().encode()
    twice = line[:-1] + b',"verdict":null}'  # a second verdict member after the list
    path = tmp_path / TRAJECTORIES
    path.write_bytes(b"\n".join([line, line, twice]) + b"\n")
    rows = list(read_trajectory_rows(path, share_tools=True))
    assert [r[5] > 0 for r in rows] == [False, True, True]  # the first line parsed whole
    for (_, traj, _, _, raw, members), spliced, members_lost in zip(rows, (False, True, False), (0, 0, 1)):
        traj.verdict = Verdict(passed=True)
        out = _verdict_out(traj, raw, ..., members)
        assert isinstance(out, tuple) == spliced
        got = b"".join(_embedded(raw, [(1, out)]))
        assert json.loads(got) == {**json.loads(raw), "verdict": traj.verdict.model_dump()}
        assert got.count(b'"verdict"') == raw.count(b'"verdict"') - members_lost


def test_verdicts_go_back_into_the_file_as_read_or_not_at_all(run: list[Trajectory]) -> None:
    """The rewrite is built from the file (the verdicts alone cross from a shard): the verified
    lines with their verdicts, in order, unverified lines left out; a line that changed since it
    was read (another length, no verdict key at the cut) stops the rewrite instead of corrupting it."""
    from agentscaler.models import Verdict

    lines = [t.model_copy(deep=True, update={"verdict": None}).model_dump_json().encode() + b"\n" for t in run[:3]]
    data = lines[0] + b"{torn\n" + lines[1] + b"\n" + lines[2].rstrip(b"\n")  # line 4 blank, the last unended
    picked = [(1, run[0], lines[0]), (3, run[1], lines[1]), (5, run[2], lines[2].rstrip(b"\n"))]
    outs = []
    for ln, t, line in picked:
        t = t.model_copy(deep=True, update={"verdict": Verdict(passed=ln != 3)})
        out = _verdict_out(t, line)
        assert isinstance(out, tuple)  # our writers' lines: the verdict is put in
        outs.append((ln, out))
        assert _with_verdict(t, line) == line[:out[0]] + out[2]
    got = b"".join(_embedded(data, outs))
    assert [json.loads(x)["verdict"]["passed"] for x in got.splitlines()] == [True, False, True]
    assert got.splitlines()[1][:100] == lines[1][:100]
    longer = data.replace(lines[1], lines[1][:-2] + b' }\n')  # the same line, one byte longer
    assert _embedded(longer, outs) is None
    assert _embedded(data[:len(lines[0])], outs) is None  # lines gone
    whole = (2, b'{"x":1,"verdict":null}\n')  # a line that was dumped whole goes in as it is
    assert b"".join(_embedded(data, [outs[0], whole])) == b"".join(_embedded(data, [outs[0]])) + whole[1]


def test_a_rewrite_that_fails_raises_its_own_error_and_leaves_the_file(ws: Workspace, run: list[Trajectory],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The rewrite writes slices of the mapped file: when writing fails part way (a full disk), the
    caller gets that error (not one about closing the mapping), the trajectories are untouched and
    no temporary file is left."""
    import errno

    from agentscaler import workspace

    d = ws.rollout_dir("full-disk")
    d.mkdir(parents=True)
    text = "".join(t.model_dump_json() + "\n" for t in run[:6])
    (d / TRAJECTORIES).write_text(text)
    writev = workspace.os.writev

    def full(fd, chunks):  # a first chunk written, then the disk is full
        writev(fd, chunks[:1])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(workspace.os, "writev", full)
    with pytest.raises(OSError, match="No space left"):
        verify_run(ws, "full-disk")
    assert (d / TRAJECTORIES).read_text() == text
    assert sorted(f.name for f in d.iterdir()) == [TRAJECTORIES]


def test_shards_write_what_one_process_writes(ws: Workspace, run: list[Trajectory]) -> None:
    """Two verifier processes (tasks.verify.shards), each with its own sandbox workers, give the
    same verdicts, reason codes, verified.jsonl, embedded trajectories and report as one process,
    crafted breaks, an unknown scenario, an unknown domain and an unreadable line included; and
    again on a second run with their workers already open."""
    odd = [run[0].model_copy(update={"id": "no-scenario", "scenario_id": "nope"}),
           run[1].model_copy(update={"id": "no-domain", "domain": "nowhere"})]
    lines = [t.model_dump_json() for t in run[::2] + odd + run[1::2]]
    lines.insert(5, '{"id": "torn", "domain": "shop2"')
    text = "\n".join(lines) + "\n"
    got = {}
    with Shards(ws, 2) as shards:
        for name, use in (("one", None), ("sharded", shards), ("again", shards)):
            d = ws.rollout_dir(f"sh-{name}")
            d.mkdir(parents=True)
            (d / TRAJECTORIES).write_text(text)
            rep = verify_run(ws, f"sh-{name}", shards=use)
            rep.pop("seconds"), rep["replay"].pop("seconds"), rep.pop("run_id")
            rep["unreadable_examples"] = [x.replace(f"sh-{name}", "sh-?") for x in rep["unreadable_examples"]]
            got[name] = (rep, (d / "verified.jsonl").read_bytes(), (d / TRAJECTORIES).read_bytes())
        parts = shards.verify(ws.rollout_dir("sh-one") / TRAJECTORIES)
    assert got["sharded"] == got["one"] and got["again"] == got["one"]
    assert all(p.lines for p in parts)  # both processes had lines (shop and shop2 hash apart)
    rep = got["one"][0]
    assert rep["unreadable"] == 1 and rep["reasons"]["unknown_scenario"] == 2 and rep["passed"] >= 12
    assert rep["trajectories"] == len(run) + 2


def test_a_verifier_shard_that_dies_is_named(ws: Workspace, run: list[Trajectory]) -> None:
    """A verifier process killed between runs (out of memory, say): the next run fails with an error
    naming the process and how it ended, not a bare broken pipe; the live one still closes."""
    import os
    import signal

    d = ws.rollout_dir("sh-dead")
    d.mkdir(parents=True)
    (d / TRAJECTORIES).write_text("".join(t.model_dump_json() + "\n" for t in run[:4]))
    with Shards(ws, 2) as shards:
        procs = list(shards.procs)
        os.kill(procs[1].pid, signal.SIGKILL)
        procs[1].join(timeout=30)
        with pytest.raises(RuntimeError, match=r"verifier shard 1 \(pid \d+\) was killed by signal 9"):
            shards.verify(d / TRAJECTORIES)
    assert procs[0].exitcode == 0 and procs[1].exitcode == -9  # the live one ended when closed
