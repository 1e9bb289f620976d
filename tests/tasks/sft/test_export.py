"""Export of verified trajectories to SFT rows: counts, shapes, round trips, re-runs."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset, load_from_disk

from agentscaler.workspace import Workspace
from tasks.sft.export import RowError, normalize_messages, stage_of
from tests.sft_fixtures import TOOLS


def test_counts_by_stage_and_reason(exported):
    ws, report, expected = exported
    assert report["read"] == expected["read"]
    assert report["skipped_unverified"] == expected["unverified"]
    for reason in ("malformed_arguments", "duplicate", "too_long", "malformed_json", "invalid_trajectory"):
        assert report["dropped"][reason] == expected[reason], reason
    kept = sum(n for st in report["kept"].values() for n in st.values())
    assert kept == expected["kept"]
    assert report["kept"]["stage2"]["train"] + report["kept"]["stage2"]["eval"] == 4  # the tau2-airline rows
    assert report["kept"]["stage1"]["eval"] >= 1 and report["kept"]["stage2"]["eval"] >= 1
    assert any("arguments are not JSON" in e and "trajectories.jsonl:" in e for e in report["errors"])
    on_disk = json.loads((ws.sft_dir / "report.json").read_text())
    assert on_disk["dropped"] == report["dropped"]


def test_rows_have_dict_arguments_named_tools_and_uncorrupted_schemas(exported):
    ws, _, _ = exported
    for stage in (1, 2):
        dd = load_from_disk(str(ws.sft_dir / f"stage{stage}" / "hf"))
        pq = Dataset.from_parquet(str(ws.sft_dir / f"stage{stage}" / "train.parquet"))
        assert pq["id"] == dd["train"]["id"] and pq[0]["messages"] == dd["train"][0]["messages"]
        assert set(dd["train"]["scenario_id"]).isdisjoint(dd["eval"]["scenario_id"])  # held out by scenario
        for row in list(dd["train"]) + list(dd["eval"]):
            assert row["stage"] == stage and (row["domain"].startswith("tau2-") == (stage == 2))
            assert json.loads(row["tools"]) == TOOLS[row["domain"]]  # no keys borrowed from other rows' schemas
            for m in row["messages"]:
                if m["role"] == "tool":
                    assert m["name"] and m["tool_call_id"]
                for tc in m["tool_calls"] or []:
                    args = tc["function"]["arguments"]
                    assert isinstance(args, dict) and list(args) == [
                        list(TOOLS[row["domain"]][0]["function"]["parameters"]["properties"])[0]]
            assert row["messages"][-1]["role"] == "assistant"  # trailing user "###STOP###" trimmed


def test_rerun_is_skipped_and_target_list_moves_domains(exported, tokenizer):
    from tasks.sft.export import export_sft

    ws, report, _ = exported
    again = export_sft(ws, tokenizer=tokenizer, max_length=1024)
    assert all(s["skipped"] for s in again["stages"].values())
    assert again["kept"] == report["kept"]
    assert stage_of("dweather", ["dweather"]) == 2 and stage_of("tau2-airline", ["dweather"]) == 1
    assert stage_of("tau2-retail") == 2 and stage_of("d0123") == 1


def test_normalize_rejects_bad_messages_with_reasons():
    with pytest.raises(RowError) as e:
        normalize_messages([{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}])
    assert e.value.reason == "bad_message" and "message 1" in str(e.value)
    with pytest.raises(RowError) as e:
        normalize_messages([{"role": "user", "content": "x"}])
    assert e.value.reason == "no_assistant_turn"
    with pytest.raises(RowError) as e:
        normalize_messages([{"role": "tool", "content": "x"}, {"role": "assistant", "content": "y"}])
    assert e.value.reason == "tool_without_name"
    # A tool message without a name gets it back from the matching call id; "" arguments mean {}.
    out = normalize_messages([
        {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "ping", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "c1", "content": {"pong": True}},
        {"role": "assistant", "content": "ok"}])
    assert out[0]["tool_calls"][0]["function"]["arguments"] == {} and out[1]["name"] == "ping"
    assert out[1]["content"] == '{"pong": true}'


def test_excluded_scenarios_stay_out_and_are_counted(exported, tokenizer, tmp_path):
    """Held-out (evaluation) and contaminated scenarios never become training rows."""
    from agentscaler.artifacts import trajectory_files
    from tasks.sft.export import build_rows

    ws, report, _ = exported
    files = trajectory_files(ws)
    kept_ids = {r["scenario_id"] for st in build_rows(files, tokenizer, max_length=1024)[0].values()
                for rows in st.values() for r in rows}
    heldout, flagged = sorted(kept_ids)[:1], sorted(kept_ids)[1:2]
    exclude = {heldout[0]: "heldout_scenario", flagged[0]: "contaminated"}
    splits, rep = build_rows(files, tokenizer, max_length=1024, exclude_scenarios=exclude)
    left = {r["scenario_id"] for st in splits.values() for rows in st.values() for r in rows}
    assert left == kept_ids - set(exclude)
    assert rep["dropped"]["heldout_scenario"] >= 1 and rep["dropped"]["contaminated"] >= 1


def test_export_itself_leaves_out_heldout_and_contaminated_scenarios(tokenizer, tmp_path):
    """No caller can skip the exclusions: export_sft reads the scenarios' split and the contamination flags."""
    from agentscaler.models import Scenario
    from agentscaler.workspace import atomic_write_json, atomic_write_jsonl
    from tasks.evaluation.contamination import check_contamination
    from tasks.sft.export import export_sft
    from tests.sft_fixtures import traj, write_rollouts

    ws = Workspace(tmp_path / "ws")
    write_rollouts(ws)
    held, flagged = traj("dshop", 1).scenario_id, traj("dshop", 2).scenario_id
    atomic_write_json(ws.domain_dir("dshop") / "spec.json", {})  # a finished environment (only its scenarios are read)
    atomic_write_jsonl(ws.domain_dir("dshop") / "scenarios.jsonl", [Scenario(
        id=held, domain="dshop", read_only=True, intent="x", gold_calls=[], gold_hash="h", seed_hash="h",
        split="heldout").model_dump(mode="json")])
    report = check_contamination(ws, sources=("tau2",))  # screened (nothing here is a benchmark copy) ...
    report["flags"].append({"scenario": flagged})  # ... then one scenario flagged by hand
    atomic_write_json(ws.reports_dir / "contamination.json", report)
    rep = export_sft(ws, tokenizer=tokenizer, max_length=1024)
    assert rep["dropped"]["heldout_scenario"] == 1 and rep["dropped"]["contaminated"] == 1
    assert rep["kept"]["stage1"]["train"] + rep["kept"]["stage1"]["eval"] == 10


def test_sessions_join_one_domain_and_origin_within_the_length(tokenizer, tmp_path):
    """Sessions: the system prompt and tools once, then each conversation's turns; never across a
    domain, an origin or the train/eval split; never over session_length; the loss-bearing turns of
    every joined conversation are all there."""
    from agentscaler.artifacts import trajectory_files
    from tasks.sft.export import build_rows, count_tokens
    from tests.sft_fixtures import traj

    ws = Workspace(tmp_path / "ws")
    rows = [traj("dshop", k) for k in range(6)] + [traj("dweather", k) for k in range(6)]
    for t in rows[:2]:
        t.agent_model = "smollm2-135m"  # agent experience, the rest gold replays
    for t in rows[2:]:
        t.agent_model = "gold-replay"
    path = ws.rollout_dir("run1") / "trajectories.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(t.model_dump_json() + "\n" for t in rows))
    files = trajectory_files(ws)
    single, _ = build_rows(files, tokenizer, max_length=1024, eval_fraction=0.2)
    joined, rep = build_rows(files, tokenizer, max_length=1024, eval_fraction=0.2, session_length=700)
    for split in ("train", "eval"):
        before, after = single[1][split], joined[1][split]
        assert sum(r["conversations"] for r in after) == len(before)
        assert sorted(t for r in after for t in r["trajectory_ids"]) == sorted(r["trajectory_id"] for r in before)
        for r in after:
            assert (r["n_tokens"] <= 700 or r["conversations"] == 1) and r["n_tokens"] == count_tokens(tokenizer, r)
            assert sum(m["role"] == "system" for m in r["messages"]) == 1
            members = [b for b in before if b["trajectory_id"] in r["trajectory_ids"]]
            assert {b["domain"] for b in members} == {r["domain"]} and {b["origin"] for b in members} == {r["origin"]}
            said = [m["content"] for m in r["messages"] if m["role"] == "assistant" and m["content"]]
            assert said == [m["content"] for b in members for m in b["messages"] if m["role"] == "assistant" and m["content"]]
    assert any(r["conversations"] > 1 for r in joined[1]["train"])
    assert rep["conversations_by_origin"]["stage1"]["train"].get("agent", 0) + \
        rep["conversations_by_origin"]["stage1"]["eval"].get("agent", 0) == 2


def test_domain_subset_and_out_dir(tokenizer, tmp_path):
    from tasks.evaluation.contamination import check_contamination
    from tasks.sft.export import export_sft
    from tests.sft_fixtures import write_rollouts

    ws = Workspace(tmp_path / "ws")
    write_rollouts(ws)
    check_contamination(ws, sources=("tau2",))  # the export refuses unscreened workspaces
    rep = export_sft(ws, tokenizer=tokenizer, max_length=1024, stages=(1,), domains=["dweather"],
                     out_dir=tmp_path / "subset")
    dd = load_from_disk(str(tmp_path / "subset" / "stage1" / "hf"))
    assert set(dd["train"]["domain"]) | set(dd["eval"]["domain"]) == {"dweather"}
    assert rep["outside_domains"] > 0 and rep["domains"] == ["dweather"] and not (ws.sft_dir / "stage1").exists()
    assert rep["stages"]["stage1"]["rows_by_origin"]["train"] == {"agent": rep["stages"]["stage1"]["rows"]["train"]}


def test_every_row_carries_its_origin(exported):
    """Gold replays stay labelled from trajectory to SFT row to the counts (issue 17)."""
    from tasks.evaluation.report import funnel

    ws, report, _ = exported
    assert report["kept_by_origin"]["stage2"] == {"gold-replay": 4}  # the tau2-airline demonstrations
    assert set(report["kept_by_origin"]["stage1"]) == {"agent"}
    for stage, origin in ((1, "agent"), (2, "gold-replay")):
        dd = load_from_disk(str(ws.sft_dir / f"stage{stage}" / "hf"))
        rows = list(dd["train"]) + list(dd["eval"])
        assert {r["origin"] for r in rows} == {origin}
        assert {r["agent_model"] for r in rows} == {"smollm2-135m" if origin == "agent" else "gold-replay"}
        assert set(Dataset.from_parquet(str(ws.sft_dir / f"stage{stage}" / "train.parquet"))["origin"]) == {origin}
        st = json.loads((ws.sft_dir / f"stage{stage}" / "report.json").read_text())
        assert sum(n for split in st["rows_by_origin"].values() for n in split.values()) == len(rows)
    c = funnel(ws)
    assert c["sft_rows"] == c["sft_rows_agent"] + c["sft_rows_gold_replay"] and c["sft_rows_gold_replay"] == 4
    assert c["trajectories_gold_replay"] == 4 and c["trajectories_agent"] == c["trajectories"] - 4


def test_even_draw_takes_domains_in_turn():
    """Equal data for the scaling curve: the cut takes one row of each domain in turn, in a fixed order."""
    from tasks.sft.export import even_draw

    rows = [{"id": f"{d}-{i:02d}", "domain": d} for d, n in (("a", 30), ("b", 5), ("c", 12)) for i in range(n)]
    got = even_draw(rows, 21)
    per = {d: sum(r["domain"] == d for r in got) for d in "abc"}
    assert len(got) == 21 and per["b"] == 5 and abs(per["a"] - per["c"]) <= 1, per  # b runs out, a and c share the rest
    assert got == sorted(got, key=lambda r: r["id"]) and even_draw(list(reversed(rows)), 21) == got
    assert sorted(r["domain"] for r in even_draw(rows, 3)) == ["a", "b", "c"]  # one of each before any second
    assert len(even_draw(rows, 1000)) == len(rows) and even_draw(rows, 0) == []
    with pytest.raises(ValueError):
        even_draw(rows, -1)


def test_capped_export_keeps_the_eval_split_and_counts_the_cut(tokenizer, tmp_path):
    from tasks.evaluation.contamination import check_contamination
    from tasks.sft.export import export_sft
    from tests.sft_fixtures import write_rollouts

    ws = Workspace(tmp_path / "ws")
    write_rollouts(ws)
    check_contamination(ws, sources=("tau2",))
    full = export_sft(ws, tokenizer=tokenizer, max_length=1024, stages=(1,), out_dir=tmp_path / "full")
    cut = export_sft(ws, tokenizer=tokenizer, max_length=1024, stages=(1,), out_dir=tmp_path / "cut",
                     max_train_conversations=2)
    assert full["kept"]["stage1"]["train"] > 2 and cut["kept"]["stage1"]["train"] == 2
    assert cut["kept"]["stage1"]["eval"] == full["kept"]["stage1"]["eval"]
    assert cut["capped"]["stage1"]["before"] == full["conversations_by_origin"]["stage1"]["train"]
    assert cut["capped"]["stage1"]["domains_after"] == min(2, cut["capped"]["stage1"]["domains_before"])
    assert full["capped"] == {}
