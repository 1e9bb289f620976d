"""Two real optimizer steps of stage 1, then stage 2 from stage 1's weights, on CPU with the tiny
model, each in its own subprocess as tasks/sft/train.py launches them; and the documented
`accelerate launch --config_file training/accelerate/cpu.yaml -m training.sft ...` path."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from agentscaler.catalog import Catalog
from tasks.sft.train import ACCELERATE_DIR, TrainingFailed, train_stage

pytestmark = pytest.mark.slow


def _config(tmp: Path, stage: int, accumulation: int = 1) -> Path:
    p = tmp / f"stage{stage}.yaml"
    p.write_text(yaml.safe_dump({
        "stage": stage, "model": "tiny" if stage == 1 else "stage1", "max_length": 1024,
        "learning_rate": 1e-2, "warmup_ratio": 0.0, "per_device_train_batch_size": 2 // accumulation,
        "gradient_accumulation_steps": accumulation, "logging_steps": 1, "save_steps": 1000, "torch_threads": 1}))
    return p


def test_stage1_then_stage2_from_stage1_weights(exported, tmp_path):
    from safetensors.torch import load_file

    ws, _, _ = exported
    lines: list[str] = []
    r1 = train_stage(ws, 1, config=_config(tmp_path, 1, accumulation=2), max_steps=2, on_line=lines.append)
    assert r1["global_step"] == 2 and len(r1["losses"]) >= 2 and r1["loss_finite"]
    # progress before the first optimizer step ends: the total at the start, then each micro-batch
    progress = [ln for ln in lines if ln.startswith("progress:")]
    assert progress[:2] == ["progress: step 0/2", "progress: step 0/2 micro-batch 1/2"]
    assert "progress: step 1/2" in progress and progress[-1] == "progress: step 2/2"
    assert all(math.isfinite(x) and x > 0 for x in r1["losses"])
    assert r1["end_fingerprint"] != r1["start_fingerprint"]  # the optimizer moved the weights
    assert any("RESULT" in ln for ln in lines) and "RESULT" in Path(r1["log"]).read_text()

    r2 = train_stage(ws, 2, config=_config(tmp_path, 2), max_steps=2)
    assert r2["global_step"] == 2 and r2["loss_finite"]
    assert r2["model_source"] == r1["final_dir"]
    assert r2["start_fingerprint"] == r1["end_fingerprint"]  # stage 2 starts where stage 1 ended
    w1 = load_file(str(Path(r1["final_dir"]) / "model.safetensors"))
    w2 = load_file(str(Path(r2["final_dir"]) / "model.safetensors"))
    key = "model.layers.0.self_attn.q_proj.weight"
    delta = (w2[key] - w1[key]).abs().max().item()
    assert 0 < delta < 0.1  # two small steps away from stage 1, not a fresh init
    runs = {r["flow"]: r for r in Catalog(ws.catalog_path).runs()}
    assert runs["train-stage1"]["status"] == "done" and runs["train-stage2"]["status"] == "done"


def test_accelerate_launch_cpu(exported, tmp_path):
    ws, _, _ = exported
    cfg = _config(tmp_path, 1)
    cfg.write_text(cfg.read_text() + f"output_dir: {tmp_path / 'acc'}\n")
    r = train_stage(ws, 1, config=cfg, max_steps=1, accelerate_config=ACCELERATE_DIR / "cpu.yaml")
    assert r["command"][1:4] == ["-m", "accelerate.commands.launch", "--config_file"]
    assert r["global_step"] == 1 and r["loss_finite"] and r["world_size"] == 1
    assert (tmp_path / "acc" / "final" / "model.safetensors").exists()


def test_failure_is_reported_with_log(exported, tmp_path):
    ws, _, _ = exported
    cfg = tmp_path / "s2.yaml"
    cfg.write_text(yaml.safe_dump({"stage": 2, "model": "stage1", "dataset_dir": str(tmp_path / "none"),
                                   "output_dir": str(tmp_path / "out")}))
    with pytest.raises(TrainingFailed, match="no SFT dataset at"):
        train_stage(ws, 2, config=cfg, max_steps=1)
    runs = [r for r in Catalog(ws.catalog_path).runs() if r["status"] == "failed"]
    assert runs and runs[-1]["flow"] == "train-stage2"


def test_accelerate_launch_two_cpu_processes(exported, tmp_path):
    """The multi-process path for real: `accelerate launch --num_processes 2` with gloo on CPU. Both
    ranks train (world size 2, the data sharded between them) and rank 0 saves one whole model."""
    from safetensors.torch import load_file

    ws, _, _ = exported
    cfg = _config(tmp_path, 1)
    cfg.write_text(cfg.read_text() + f"output_dir: {tmp_path / 'multi'}\n")
    r = train_stage(ws, 1, config=cfg, max_steps=1, accelerate_config=ACCELERATE_DIR / "cpu-multi.yaml",
                    num_processes=2)
    assert r["command"][r["command"].index("--num_processes") + 1] == "2"
    assert r["world_size"] == 2 and r["global_step"] == 1 and r["loss_finite"]
    weights = load_file(str(tmp_path / "multi" / "final" / "model.safetensors"))
    assert "model.layers.0.self_attn.q_proj.weight" in weights  # one merged, loadable checkpoint


class _Stop(Exception):
    pass


def test_a_killed_run_resumes_from_its_last_checkpoint_and_ends_as_an_uninterrupted_one(exported, tmp_path):
    """Real TRL steps of the tiny model: a run killed after step 3 (checkpoint every 2 steps) and
    started again with the same resume key goes on from checkpoint-2 to the same final weights as a
    run never stopped; a run with another key never resumes a folder's checkpoints, it removes them."""
    from safetensors.torch import load_file

    ws, _, _ = exported
    cfg = _config(tmp_path, 1)
    whole = train_stage(ws, 1, config=cfg, max_steps=6, save_steps=2, resume_key="k1")
    assert whole["resumed_from"] is None and len(whole["step_seconds"]) == 6
    out = Path(whole["output_dir"])
    assert not list(out.glob("checkpoint-*"))  # done: final/ holds the model
    w_whole = load_file(str(Path(whole["final_dir"]) / "model.safetensors"))

    def stop_after_step_3(line: str) -> None:
        if line == "progress: step 3/6":
            raise _Stop  # train_stage kills the training process, as a session's end would
    cfg.write_text(cfg.read_text() + f"output_dir: {tmp_path / 'killed'}\n")
    with pytest.raises(_Stop):
        train_stage(ws, 1, config=cfg, max_steps=6, save_steps=2, resume_key="k1", on_line=stop_after_step_3)
    killed = tmp_path / "killed"
    assert [p.name for p in killed.glob("checkpoint-*")] == ["checkpoint-2"] and not (killed / "result.json").exists()
    lines: list[str] = []
    resumed = train_stage(ws, 1, config=cfg, max_steps=6, save_steps=2, resume_key="k1", on_line=lines.append)
    assert "resuming from checkpoint-2 (an interrupted run with the same resume key)" in lines
    assert resumed["resumed_from"] == "checkpoint-2" and resumed["global_step"] == 6
    assert len(resumed["step_seconds"]) == 6  # the first 2 steps' seconds came with the checkpoint
    assert resumed["tokens_seen"] == whole["tokens_seen"]  # TRL's counter restarts on resume: summed over both
    assert "progress: step 1/6" not in lines and "progress: step 3/6" in lines
    w_resumed = load_file(str(Path(resumed["final_dir"]) / "model.safetensors"))
    assert w_resumed.keys() == w_whole.keys()
    # the optimizer, scheduler, RNG and data position came back too: the same weights as the whole run
    assert max((w_resumed[k] - w_whole[k]).abs().max().item() for k in w_whole) < 1e-5

    # another key: a planted complete checkpoint of "someone else's" run is removed, not resumed
    stale = killed / "checkpoint-4"
    stale.mkdir()
    (stale / "trainer_state.json").write_text("{}")
    other = train_stage(ws, 1, config=cfg, max_steps=2, save_steps=2, resume_key="k2")
    assert other["resumed_from"] is None and other["global_step"] == 2 and not stale.exists()


def test_train_resume_key_and_the_cli_flag(exported, tmp_path):
    """`agentscaler train --resume`: the key follows the config, the steps and the data, not where the
    run checkpoints; the command trains with it (real steps of the tiny model) and leaves no checkpoint."""
    import json
    import subprocess
    import sys

    from tasks.sft.train import make_resume_key
    from training.config import load_config

    ws, _, _ = exported
    cfg = load_config(_config(tmp_path, 1))
    key = make_resume_key(ws, cfg, 4)
    assert key == make_resume_key(ws, cfg.model_copy(update={"save_steps": 2, "save_total_limit": 5}), 4)
    assert key != make_resume_key(ws, cfg, 6) and key != make_resume_key(ws, cfg.model_copy(update={"learning_rate": 1e-3}), 4)
    assert key != make_resume_key(ws, cfg.model_copy(update={"dataset_dir": str(tmp_path / "other")}), 4)  # another dataset folder

    conf = _config(tmp_path, 1)
    conf.write_text(conf.read_text() + f"output_dir: {tmp_path / 'cli'}\n")
    res = subprocess.run([sys.executable, "-c", "from flows.cli import app; app()", "train", "--stage", "1",
                          "--config", str(conf), "--max-steps", "2", "--save-steps", "1", "--resume", "--json",
                          "--workspace", str(ws.root), "--quiet"],
                         capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[3])
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout[res.stdout.index("{"):])
    assert out["global_step"] == 2 and out["resumed_from"] is None and "--resume-key" in out["command"]
    assert not list((tmp_path / "cli").glob("checkpoint-*"))
    assert json.loads((tmp_path / "cli" / "resume.json").read_text())["key"] == make_resume_key(
        ws, load_config(conf), 2)
