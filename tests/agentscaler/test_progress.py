"""Progress display (issue 17): what a stage reports, as plain lines for a log or a live display for a
terminal, nothing when quiet; and the command line keeps --json on stdout and progress on stderr."""

from __future__ import annotations

import io
import json
import threading
import time

from typer.testing import CliRunner

from agentscaler import progress
from agentscaler.artifacts import save_tools
from agentscaler.models import Tool
from agentscaler.workspace import Workspace, atomic_write_json


def test_plain_lines_say_stage_count_rate_and_time_left():
    buf = io.StringIO()
    with progress.show(stream=buf, every=0.05, live=False):
        with progress.stage("build", total=20, unit="domains") as st:
            for i in range(20):
                time.sleep(0.01)
                st.advance(note=f"d{i}")
        with progress.stage("blink", total=1, unit="x") as q:  # over before the first line: not shown
            q.advance()
    lines = buf.getvalue().splitlines()
    assert lines and all(line.startswith("build: ") for line in lines)
    assert any("/20 domains (" in line and "domains/s" in line and "left" in line for line in lines[:-1])
    assert lines[-1].startswith("build: 20/20 domains (100%)") and "done in" in lines[-1]
    assert len(lines) <= 20 * 0.01 / 0.05 + 3  # at most one line per `every`, plus the last


def test_quiet_shows_nothing_and_no_display_is_a_no_op():
    buf = io.StringIO()
    with progress.show(quiet=True, stream=buf, every=0.01):
        with progress.stage("x", total=3) as st:
            st.advance(3)
            time.sleep(0.05)
    assert buf.getvalue() == ""
    with progress.stage("library use", total=2) as st:  # nothing installed: counts, prints nothing
        st.advance(2)
    assert st.done == 2 and st.rate() is not None and st.left_s() == 0


def test_live_display_and_threads():
    buf = io.StringIO()
    with progress.show(stream=buf, live=True):
        with progress.stage("conversations", total=8000, unit="conversations") as st:
            workers = [threading.Thread(target=lambda: [st.advance() for _ in range(1000)]) for _ in range(8)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            time.sleep(1.1)  # a row over in under a second is removed; this one stays
    assert st.done == 8000
    assert "conversations" in buf.getvalue() and "8000/8000" in buf.getvalue()


def _workspace(root) -> Workspace:
    tools = [Tool(name=f"get_item_{i}", source_name=f"get_item_{i}", source="test", description="get an item",
                  parameters={"type": "object", "properties": {"item_id": {"type": "string"}},
                              "required": ["item_id"]}).with_id() for i in range(2)]
    ws = Workspace(root)
    ws.tools_path.parent.mkdir(parents=True, exist_ok=True)
    save_tools(ws.tools_path, tools)
    ws.domains_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(ws.domains_path, [{"domain": f"dp{i}", "tools": [t.id], "names": [t.name], "edges": []}
                                        for i, t in enumerate(tools)])
    return ws


def test_json_on_stdout_progress_on_stderr_and_options_after_the_command(tmp_path, monkeypatch):
    """`synthesize --json --workspace WS` (the option after the command): stdout is the JSON alone,
    the progress lines are on stderr; `--quiet` (before the command, too) turns them off."""
    from flows.cli import app

    ws = _workspace(tmp_path / "ws")
    monkeypatch.setattr(progress, "EVERY_S", 0.01)
    res = CliRunner().invoke(app, ["synthesize", "--json", "--no-validate", "--workspace", str(ws.root)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["counts"] == {"done": 2, "failed": 0}
    assert "synthesize: 2/2 domains (100%)" in res.stderr
    quiet = CliRunner().invoke(app, ["-q", "-w", str(ws.root), "synthesize", "--json", "--no-validate"])
    assert quiet.exit_code == 0 and json.loads(quiet.stdout)["counts"]["done"] == 2
    assert "synthesize:" not in quiet.stderr


def test_every_command_takes_workspace_and_quiet_after_its_name(tmp_path):
    import typer

    from flows.cli import app

    def commands(group, prefix=()):
        for name, cmd in group.commands.items():
            if hasattr(cmd, "commands"):
                yield from commands(cmd, (*prefix, name))
            else:
                yield (*prefix, name), cmd

    found = dict(commands(typer.main.get_command(app)))
    assert len(found) >= 20 and ("ingest",) in found and ("show", "domain") in found
    for name, cmd in found.items():
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
        assert {"--workspace", "-w", "--quiet", "-q"} <= opts, name
    res = CliRunner().invoke(app, ["ingest", "nowhere", "--workspace", str(tmp_path / "w")])  # the example
    assert res.exit_code == 1 and "no tool was accepted" in res.output  # no usage error: the option is taken
    assert (tmp_path / "w" / "corpus").is_dir()
