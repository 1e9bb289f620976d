"""Serve a local Hugging Face checkpoint (e.g. an SFT output) as an OpenAI-compatible chat server.

Why: a trained checkpoint is a `save_pretrained` folder, not a GGUF, so llama.cpp cannot load it
without a conversion step; evaluating it through the same HTTP contract as every other model
(`agentscaler.llm.LLMClient`, tasks.rollouts.engine, tasks.evaluation.evaluate) keeps the comparison honest.

`hf_server(checkpoint_dir)` starts `python -m agentscaler.hf_server --checkpoint DIR --port P` as a
subprocess on loopback, waits until `/v1/models` answers, yields the base URL
(`http://127.0.0.1:P/v1`) and stops it afterwards; the server dies with the process that started it
(agentscaler.llm_server.die_with_parent). Inside the server:

- The prompt is the checkpoint tokenizer's own chat template (the template SFT trained with,
  training/chat_template.py), with `tools` passed through, and the generation prompt appended.
- transformers `generate` on CPU (or a GPU if torch sees one); greedy at temperature 0,
  sampling otherwise (`temperature`, `top_p`, `seed` per request). One request at a time (a lock).
- Hermes `<tool_call>{"name", "arguments"}</tool_call>` blocks in the output become OpenAI
  `tool_calls` (arguments as a JSON string) when they all parse strictly; otherwise the text is
  left in `content` so the client's strict parser reports it with the raw text.
- `usage` counts prompt and completion tokens; `finish_reason` is stop | length | tool_calls.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any


from agentscaler.llm import LLMFormatError, parse_hermes_tool_calls
from agentscaler.llm_server import LLMServerError, default_log_path, die_with_parent, free_port, serve_process

__all__ = ["HFServerError", "build_app", "hf_server", "normalize_messages"]


class HFServerError(LLMServerError):
    """The checkpoint server did not start or died; the message ends with the tail of its log."""


@contextlib.contextmanager
def hf_server(checkpoint_dir: Path | str, port: int | None = None, host: str = "127.0.0.1",
              max_new_tokens: int = 256, model_alias: str | None = None, threads: int | None = None,
              startup_timeout: float = 180.0, log_path: Path | str | None = None) -> Iterator[str]:
    """Serve `checkpoint_dir` for the duration of the block; yields the base URL (ends with /v1).

    Raises HFServerError (with the log tail) if the folder is not a checkpoint, or the server
    exits or is not ready within `startup_timeout`.
    """
    ckpt = Path(checkpoint_dir)
    if not (ckpt / "config.json").is_file():
        raise HFServerError(f"not a Hugging Face checkpoint (no config.json): {ckpt}")
    port = port or free_port(host)
    cmd = [sys.executable, "-m", "agentscaler.hf_server", "--checkpoint", str(ckpt.resolve()), "--host", host,
           "--port", str(port), "--max-new-tokens", str(max_new_tokens), "--model-alias", model_alias or ckpt.name]
    if threads:
        cmd += ["--threads", str(threads)]
    env = os.environ | {"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with serve_process(cmd, f"http://{host}:{port}/v1", log_path or default_log_path(f"hf-server-{port}.log"), env,
                       startup_timeout, "HF checkpoint server", HFServerError) as base_url:
        yield base_url


# --- inside the server process ------------------------------------------------------------------

def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages -> what the training template reads: tool-call arguments as dicts, text content.

    Arguments that are not valid JSON stay a string (the template then shows them as a JSON string).
    """
    out = []
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"unsupported message: {str(m)[:200]}")
        m = dict(m)
        content = m.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            m["content"] = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        calls = []
        for tc in m.get("tool_calls") or []:
            fn = dict(tc.get("function", tc))
            args = fn.get("arguments", {})
            if isinstance(args, str):
                with contextlib.suppress(json.JSONDecodeError):
                    args = json.loads(args) if args.strip() else {}
            calls.append({"type": "function", "function": {"name": fn.get("name"), "arguments": args}})
        if calls:
            m["tool_calls"] = calls
        out.append(m)
    return out


def split_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]] | None]:
    """(content, OpenAI tool_calls) when the text holds strictly parsable Hermes calls, else (text, None)."""
    if "<tool_call>" not in text and "</tool_call>" not in text:
        return text, None
    try:
        content, calls = parse_hermes_tool_calls(text)
    except LLMFormatError:
        return text, None
    if not calls:
        return text, None
    return content, [{"id": c["id"], "type": "function",
                      "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False)}}
                     for c in calls]


class Generator:
    """The model, its tokenizer, and one lock: generate one chat completion at a time."""

    def __init__(self, checkpoint: Path, max_new_tokens: int = 256, threads: int | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        self.torch = torch
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.tok = AutoTokenizer.from_pretrained(str(checkpoint))
        if not self.tok.chat_template:
            raise ValueError(f"{checkpoint}: the tokenizer has no chat template")
        self.model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32).to(self.device).eval()
        self.max_new_tokens = max_new_tokens
        self.max_positions = getattr(self.model.config, "max_position_embeddings", None) or 4096
        self.eos_ids = sorted({i for i in (self.tok.eos_token_id, self.tok.convert_tokens_to_ids("<|im_end|>"))
                               if isinstance(i, int) and i >= 0})
        self.lock = threading.Lock()

    def complete(self, req: dict[str, Any]) -> dict[str, Any]:
        messages = normalize_messages(req.get("messages") or [])
        if not messages:
            raise ValueError("messages must be a non-empty list")
        tools = req.get("tools") or None
        tool_choice = req.get("tool_choice")
        if tool_choice == "none":
            tools = None
        prompt = self.tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        prefix = "<tool_call>\n" if tools and (tool_choice == "required" or isinstance(tool_choice, dict)) else ""
        ids = self.tok(prompt + prefix, add_special_tokens=False, return_tensors="pt")["input_ids"].to(self.device)
        n_prompt = int(ids.shape[1])
        max_new = int(req.get("max_tokens") or req.get("max_completion_tokens") or self.max_new_tokens)
        if n_prompt + 1 > self.max_positions:
            raise ValueError(f"prompt has {n_prompt} tokens, over the model's {self.max_positions}-token context")
        max_new = max(1, min(max_new, self.max_positions - n_prompt))
        temperature = float(req.get("temperature") if req.get("temperature") is not None else 1.0)
        gen: dict[str, Any] = {"max_new_tokens": max_new, "eos_token_id": self.eos_ids,
                               "pad_token_id": self.tok.pad_token_id if self.tok.pad_token_id is not None
                               else self.eos_ids[0]}
        if temperature > 0:
            gen.update(do_sample=True, temperature=temperature, top_p=float(req.get("top_p") or 1.0), top_k=0)
        else:
            gen.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        stop = req.get("stop")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if stops:
            gen.update(stop_strings=stops, tokenizer=self.tok)
        with self.lock:
            if req.get("seed") is not None:
                self.torch.manual_seed(int(req["seed"]))
            t0 = time.perf_counter()
            with self.torch.no_grad():
                out = self.model.generate(ids, attention_mask=self.torch.ones_like(ids), **gen)
            gen_s = time.perf_counter() - t0
        new = out[0, n_prompt:].tolist()
        ended = bool(new) and new[-1] in self.eos_ids
        body = new[:-1] if ended else new
        text = self.tok.decode(body, skip_special_tokens=False)
        for s in stops:  # stop strings are not part of the reply
            if s in text:
                text, ended = text[:text.index(s)], True
        finish = "stop" if ended or len(new) < max_new else "length"
        if prefix:  # a forced call cut off by max_tokens stays unclosed, so the client reports it as truncated
            text = prefix + text.strip() + ("" if finish == "length" or "</tool_call>" in text else "\n</tool_call>")
        content, tool_calls = split_tool_calls(text) if tools else (text, None)
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls:
            msg["tool_calls"] = tool_calls
            finish = "tool_calls" if finish == "stop" else finish
        return {"id": "chatcmpl-" + uuid.uuid4().hex[:24], "object": "chat.completion", "created": int(time.time()),
                "model": req.get("model") or "", "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": len(new),
                          "total_tokens": n_prompt + len(new)},
                "timings": {"generate_s": round(gen_s, 4)}}


def build_app(gen: Generator, model_alias: str) -> Any:
    """FastAPI app with /v1/models and /v1/chat/completions (non-streaming)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI(title="agentscaler hf_server")

    def error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_alias, "object": "model", "owned_by": "agentscaler"}]}

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    async def chat(request: Request) -> Any:
        import asyncio

        try:
            req = await request.json()
        except ValueError:
            return error(400, "request body is not JSON")
        if not isinstance(req, dict):
            return error(400, "request body must be a JSON object")
        if req.get("stream"):
            return error(400, "streaming is not supported")
        if int(req.get("n") or 1) != 1:
            return error(400, "only n=1 is supported")
        try:
            # generate is blocking: run it in a thread so /v1/models still answers meanwhile
            return await asyncio.to_thread(gen.complete, req)
        except (ValueError, TypeError, KeyError) as e:
            return error(400, f"{type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001  (a model failure is a server error, reported to the client)
            return error(500, f"{type(e).__name__}: {e}", "server_error")

    # `from __future__ import annotations` leaves "Request" a string that FastAPI would resolve in
    # this module's globals; give it the class so the body is injected, not read as a query field
    chat.__annotations__["request"] = Request
    app.post("/v1/chat/completions")(chat)
    return app


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve a Hugging Face checkpoint as an OpenAI-compatible chat server.")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--model-alias", default=None)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    die_with_parent()  # no checkpoint server outlives the process that started it
    import uvicorn

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    ckpt = Path(args.checkpoint)
    gen = Generator(ckpt, max_new_tokens=args.max_new_tokens, threads=args.threads)
    print(f"loaded {ckpt} on {gen.device}; eos ids {gen.eos_ids}", flush=True)
    uvicorn.run(build_app(gen, args.model_alias or ckpt.name), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
