"""Serve a local Hugging Face checkpoint (e.g. an SFT output) as an OpenAI-compatible chat server.

Why: a trained checkpoint is a `save_pretrained` folder, not a GGUF, so llama.cpp cannot load it
without a conversion step; evaluating it through the same HTTP contract as every other model
(`agentscaler.llm.LLMClient`, tasks.rollouts.engine, tasks.evaluation.evaluate) keeps the comparison honest.

`hf_server(checkpoint_dir)` starts `python -m agentscaler.hf_server --checkpoint DIR --port P` as a
subprocess on loopback, waits until `/v1/models` answers, yields the base URL
(`http://127.0.0.1:P/v1`) and stops it afterwards; the server dies with the process that started it
(agentscaler.llm_server.die_with_parent). Inside the server:

- The prompt is the checkpoint tokenizer's own chat template (the template SFT trained with,
  agentscaler/chat_template.py), with `tools` passed through, and the generation prompt appended.
- The reply is decoded by agentscaler.decoding, the same rule and the same llama.cpp sampler as
  the llama.cpp server (free text until `<tool_call>`, then the tools' grammar; sampling
  parameters and their defaults as llama-cpp-python's server takes them), on the model's logits
  from transformers on CPU (or a GPU if torch sees one). The grammar needs the model's vocabulary
  as llama.cpp reads it: the SmolLM2 GGUF's (checked against the checkpoint's tokenizer at start).
  One request at a time (a lock); the previous request's KV cache serves a shared prompt prefix.
- Hermes `<tool_call>{"name", "arguments"}</tool_call>` blocks in the output become OpenAI
  `tool_calls` (arguments as a JSON string) when they all parse strictly; otherwise the text is
  left in `content` so the client's strict parser reports it with the raw text.
- `usage` counts prompt and completion tokens; `finish_reason` is stop | length | tool_calls.

The preferred way to evaluate a checkpoint is the llama.cpp server on its GGUF conversion
(agentscaler.gguf_export, agentscaler.endpoints.serve); this server is the fallback.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any


from agentscaler.chat_template import normalize_messages
from agentscaler.decoding import Sampling, chat_response, common_prefix, complete
from agentscaler.llm_server import (LLMServerError, default_log_path, default_model_path, die_with_parent, free_port,
                                    serve_process)

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

class HFRuntime:
    """agentscaler.decoding.Runtime over a transformers causal LM: its tokenizer, and a DynamicCache
    kept across requests as the prompt cache (cropped to the longest common prefix, like llama.cpp's
    one slot). The vocabulary model for the grammar is a vocabulary-only llama.cpp load of a GGUF
    with the same tokens (checked at start)."""

    def __init__(self, model: Any, tok: Any, vocab_gguf: Path, device: str):
        import torch
        from llama_cpp import Llama  # the [llm] extra: the grammar and sampler are llama.cpp's

        self.torch, self.model, self.tok, self.device = torch, model, tok, device
        self._vocab = Llama(str(vocab_gguf), vocab_only=True, verbose=False)
        self.vocab_model = self._vocab._model
        self.n_vocab = self._vocab.n_vocab()
        n_logits = model.get_output_embeddings().weight.shape[0]
        probe = "<|im_start|>user\nCall get_user_details {\"user_id\": \"u1\"} <tool_call> é<|im_end|>"
        ours = tok(probe, add_special_tokens=False)["input_ids"]
        theirs = self._vocab.tokenize(probe.encode("utf-8"), add_bos=False, special=True)
        if n_logits != self.n_vocab or ours != theirs:
            raise ValueError(f"the checkpoint's vocabulary ({n_logits} logits) is not the one of {vocab_gguf} "
                             f"({self.n_vocab} tokens; a probe tokenizes {'alike' if ours == theirs else 'differently'})"
                             ": the tool-call grammar needs the same tokens")
        self.max_positions = getattr(model.config, "max_position_embeddings", None) or 4096
        # transformers 5 renamed past_key_values to cache
        self._cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self.ids: list[int] = []
        self.cache: Any = None
        self.last_evaluated = 0

    def tokenize(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def detokenize(self, tokens: list[int], prompt: list[int]) -> str:
        return self.tok.decode(tokens, skip_special_tokens=False)

    def n_ctx(self) -> int:
        return self.max_positions

    def logits(self, tokens: list[int]) -> Any:
        from transformers import DynamicCache

        keep = min(common_prefix(self.ids, tokens), len(tokens) - 1)
        if self.cache is None or keep == 0:
            self.cache, keep = DynamicCache(config=self.model.config), 0
        elif self.cache.get_seq_length() > keep:
            self.cache.crop(keep - self.cache.get_seq_length())  # a negative count: tokens to drop
        x = self.torch.tensor([tokens[keep:]], device=self.device)
        self.ids = []  # a failed forward leaves the cache unknown: nothing to reuse next time
        with self.torch.no_grad():
            out = self.model(input_ids=x, use_cache=True, logits_to_keep=1, **{self._cache_arg: self.cache})
        self.ids, self.last_evaluated = list(tokens), len(tokens) - keep
        return out.logits[0, -1].float().cpu().numpy()


class Generator:
    """The model, its tokenizer, and one lock: one chat completion at a time, decoded by
    agentscaler.decoding.complete (the same rule and sampler as the llama.cpp server)."""

    def __init__(self, checkpoint: Path, max_new_tokens: int = 256, threads: int | None = None,
                 vocab_gguf: Path | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.tok = AutoTokenizer.from_pretrained(str(checkpoint))
        if not self.tok.chat_template:
            raise ValueError(f"{checkpoint}: the tokenizer has no chat template")
        model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32).to(self.device).eval()
        self.runtime = HFRuntime(model, self.tok, vocab_gguf or default_model_path(), self.device)
        self.max_new_tokens = max_new_tokens
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
        max_new = int(req.get("max_tokens") or req.get("max_completion_tokens") or self.max_new_tokens)
        stop = req.get("stop")
        with self.lock:
            done = complete(self.runtime, prompt, Sampling.from_request(req), max_new, tools=tools,
                            tool_choice=tool_choice, stop=[stop] if isinstance(stop, str) else list(stop or []))
        return chat_response(done, tools, req.get("model") or "", "chatcmpl-" + uuid.uuid4().hex[:24],
                             int(time.time()))


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
    print(f"loaded {ckpt} on {gen.device}; vocabulary of {gen.runtime.n_vocab} tokens checked", flush=True)
    uvicorn.run(build_app(gen, args.model_alias or ckpt.name), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
