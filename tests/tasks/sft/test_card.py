"""The dataset card written next to each exported stage: `datasets.load_dataset(<stage dir>)` reads
the two parquet splits directly (offline), and the card states the splits by origin, the funnel,
what was left out, the contamination screening and the source corpora's licenses."""

from __future__ import annotations

import os

import yaml
from datasets import load_dataset

from agentscaler.models import GOLD_REPLAY


def test_load_dataset_reads_the_stage_folder_offline(exported, tmp_path, monkeypatch):
    ws, report, _ = exported
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    for stage in ("stage1", "stage2"):
        ds = load_dataset(str(ws.sft_dir / stage), cache_dir=str(tmp_path / "hf-cache"))
        assert set(ds) == {"train", "eval"}
        assert {k: len(v) for k, v in ds.items()} == report["stages"][stage]["rows"]
        origins = {o for split in ds.values() for o in split["origin"]}
        assert origins == set(report["stages"][stage]["rows_by_origin"]["train"]) | \
            set(report["stages"][stage]["rows_by_origin"]["eval"])
        assert isinstance(ds["train"][0]["messages"], list) and ds["train"][0]["messages"][0]["role"] == "system"
    assert {o for o in load_dataset(str(ws.sft_dir / "stage2"), cache_dir=str(tmp_path / "hf-cache"))["train"]["origin"]} \
        == {GOLD_REPLAY}  # the fixture's tau2 rows are demonstrations, and stay labelled so


def test_card_states_splits_origins_funnel_screening_and_licenses(exported):
    ws, report, _ = exported
    text = (ws.sft_dir / "stage1" / "README.md").read_text()
    head = yaml.safe_load(text.split("---\n")[1])
    assert head["configs"][0]["data_files"] == [{"split": "train", "path": "train.parquet"},
                                                {"split": "eval", "path": "eval.parquet"}]
    rows = report["stages"]["stage1"]["rows"]
    agent = report["stages"]["stage1"]["rows_by_origin"]["train"].get("agent", 0)
    assert f"| train | {rows['train']} | {agent} | 0 |" in text
    assert "| stage | total | agent | gold replay |" in text  # the funnel, origins in their own columns
    assert f"| malformed_arguments | {report['dropped']['malformed_arguments']} |" in text
    assert f"| unverified | {report['skipped_unverified']} |" in text
    assert "scenarios screened" in text and "tau2 (" in text
    assert "## Source corpora and licenses" in text and "| source | tools | package | version | license |" in text


def test_an_empty_split_is_left_out_of_the_configs(exported, tokenizer, tmp_path, monkeypatch):
    """With no eval rows the card lists only train, and load_dataset still reads the folder."""
    from tasks.sft.export import export_sft

    ws, _, _ = exported
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    rep = export_sft(ws, tokenizer=tokenizer, max_length=1024, eval_fraction=0.0, out_dir=tmp_path / "sft", stages=(1,))
    assert rep["stages"]["stage1"]["rows"]["eval"] == 0 and rep["stages"]["stage1"]["rows"]["train"] > 0
    text = (tmp_path / "sft" / "stage1" / "README.md").read_text()
    assert "No rows in eval" in text
    ds = load_dataset(str(tmp_path / "sft" / "stage1"), cache_dir=str(tmp_path / "hf-cache"))
    assert set(ds) == {"train"} and len(ds["train"]) == rep["stages"]["stage1"]["rows"]["train"]
