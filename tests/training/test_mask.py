"""Assistant-only loss: the labels TRL's SFTTrainer builds (its own tokenization path, from
`assistant_masks` of our chat template's `{% generation %}` markers) train on the agent's replies
and tool calls only. The expected mask is computed independently from the rendered ChatML text."""

from __future__ import annotations

import json

from datasets import concatenate_datasets, load_from_disk

from training.config import StageConfig
from training.sft import TRAIN_COLUMNS, sft_args
from training.tiny import TinyModelConfig, build_tiny_model


def expected_mask(text: str, offsets: list[tuple[int, int]]) -> list[int]:
    """1 for tokens inside an assistant turn's body (after `<|im_start|>assistant\\n`, through its
    `<|im_end|>\\n`), 0 elsewhere; a token straddling a boundary is an error."""
    spans, pos = [], 0
    starts = []
    while (i := text.find("<|im_start|>", pos)) != -1:
        starts.append(i)
        pos = i + 1
    for k, s in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(text)
        header = "<|im_start|>assistant\n"
        if text.startswith(header, s):
            spans.append((s + len(header), end))
    mask = []
    for a, b in offsets:
        inside = [lo <= a and b <= hi for lo, hi in spans]
        straddle = [a < lo < b or a < hi < b for lo, hi in spans]
        assert not any(straddle), f"token {text[a:b]!r} straddles a turn boundary"
        mask.append(1 if any(inside) else 0)
    return mask


def test_trainer_labels_mask_everything_but_assistant_turns(exported, tokenizer, tmp_path):
    from trl import SFTTrainer

    ws, _, _ = exported
    rows = concatenate_datasets([load_from_disk(str(ws.sft_dir / f"stage{s}" / "hf"))[split]
                                 for s in (1, 2) for split in ("train", "eval")])
    model = build_tiny_model(tokenizer, TinyModelConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1))
    cfg = StageConfig(stage=1, model="tiny", max_length=1024)
    trainer = SFTTrainer(model=model, args=sft_args(cfg, tmp_path, 1, False),
                         train_dataset=rows.select_columns(TRAIN_COLUMNS), processing_class=tokenizer)
    prepared = trainer.train_dataset
    assert len(prepared) == len(rows) == 16
    for row, ex in zip(rows, prepared, strict=True):
        tools = json.loads(row["tools"])
        text = tokenizer.apply_chat_template(row["messages"], tools=tools, tokenize=False)
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        assert enc["input_ids"] == ex["input_ids"], "trainer tokenization differs from the rendered template"
        assert len(ex["input_ids"]) == row["n_tokens"]  # the export's length filter counts what is trained
        trained = [0 if lab == -100 else 1 for lab in ex["labels"]]
        assert trained == expected_mask(text, enc["offset_mapping"])
        assert sum(trained) > 0
        on = tokenizer.decode([t for t, m in zip(ex["input_ids"], trained) if m])
        off = tokenizer.decode([t for t, m in zip(ex["input_ids"], trained) if not m])
        for m in row["messages"]:
            if m["role"] == "assistant":
                if m["content"]:
                    assert m["content"] in on and m["content"] not in off
                for tc in m["tool_calls"] or []:
                    call = f'{{"name": "{tc["function"]["name"]}", "arguments": {json.dumps(tc["function"]["arguments"])}}}'
                    assert call in on and call not in off
            else:  # system, user, tool: context only
                assert m["content"] in off and m["content"] not in on
        assert "<|im_end|>" in on  # the model learns to stop
        assert all(t["function"]["name"] in off for t in tools)  # tool schemas are context
