"""Regression tests for fixes made by the fault suite in other modules.

- training/export.py: an empty split (no stage-2 domains, or eval_fraction=0) crashed the export
  (datasets' from_list([]) drops the columns and save fails with "Keys mismatch").
- agentscaler/workspace.py file_lock / Workspace.domain_lock (new): the per-domain lock that makes
  two runs on one workspace build each domain once; a SIGKILLed holder must not leave it stuck.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from agentscaler.workspace import Workspace, file_lock


def test_export_writes_an_empty_split(tmp_path):
    from tasks.sft.export import _to_dataset, write_stage

    ds = _to_dataset([])
    assert len(ds) == 0 and "messages" in ds.column_names and "tools" in ds.column_names
    res = write_stage(tmp_path / "stage2", {"train": [], "eval": []}, {"read": 0})
    assert res["rows"] == {"train": 0, "eval": 0} and (tmp_path / "stage2" / "hf").exists()
    assert (tmp_path / "stage2" / "train.parquet").exists()


def test_domain_lock_excludes_a_second_holder(tmp_path):
    ws = Workspace(tmp_path / "ws")
    order: list[str] = []
    def second() -> None:
        with ws.domain_lock("d1"):
            order.append("second")

    with ws.domain_lock("d1"):
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.3)
        order.append("first done")
    t.join(5)
    assert order == ["first done", "second"]
    assert ws.domain_ids() == []  # the lock file alone is not a finished domain


def test_lock_of_a_killed_holder_is_released(tmp_path):
    lock = tmp_path / "domains" / "d1" / ".lock"
    code = (f"import sys, time; sys.path.insert(0, {str(os.getcwd())!r})\n"
            f"from agentscaler.workspace import file_lock\n"
            f"with file_lock({str(lock)!r}):\n    print('held', flush=True); time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    p.send_signal(signal.SIGKILL)
    p.wait()
    t0 = time.monotonic()
    with file_lock(lock):
        assert time.monotonic() - t0 < 5


def test_reply_parser_odd_usage_finish_reason_and_tool_calls_are_format_errors_not_crashes():
    """agentscaler/llm.py: found by the fuzz benchmark — `usage: true` raised AttributeError, a
    non-list `tool_calls` raised TypeError, `finish_reason: 5` a pydantic ValidationError."""
    import pytest

    from agentscaler.llm import LLMFormatError, parse_reply

    msg = {"role": "assistant", "content": "hi"}
    for usage in (True, 3, "x", [1], {"prompt_tokens": float("inf")}, {"prompt_tokens": float("nan")}):
        r = parse_reply({"choices": [{"message": msg}], "usage": usage})
        assert r.content == "hi" and all(isinstance(v, int) for v in r.usage.values())
    assert parse_reply({"choices": [{"message": msg, "finish_reason": 5}]}).finish_reason is None
    for calls in (5, True, {"function": {"name": "f"}}):
        with pytest.raises(LLMFormatError, match="not a list"):
            parse_reply({"choices": [{"message": {**msg, "tool_calls": calls}}]})
