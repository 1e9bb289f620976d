"""One rollout conversation: a simulated user talks to the agent, the agent calls the domain's tools.

The conversation ends when the user sends STOP, at the turn limit, on a fatal error (a
non-transient LLM error, transient errors that outlast `turn_retries`, a sandbox failure), or, with
`stop_when_failed`, once verification must fail it (settled_failure). A
transient error retries the *turn*, not the conversation. The user's stop is refused once (per
announcement, at most twice a conversation) when the agent's last message announced an action
and no call followed it (tau2-bench's "user quits while the agent is still working" failure).

Trajectory.tokens holds token counts (agent_prompt, agent_completion, user_prompt,
user_completion) and event counts prefixed `n_` (n_tool_calls, n_tool_errors, n_format_errors,
n_stop_refused, n_turn_retries, n_sandbox_errors, n_step_limit...), which the verifier reads.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentscaler.hashing import call_key, content_hash
from agentscaler.llm import LLMClient, LLMError
from agentscaler.models import Scenario, Trajectory
from tasks.rollouts.agent import agent_turn
from tasks.rollouts.users import UserTurn, announces_action, last_agent_text, read_goal_values, reply_has_values

END_REASONS = ("user_stop", "turn_limit", "fatal_error", "settled_failure")
MAX_REPEATS = 3  # tasks.verify.verify's default: one call or text this often fails a trajectory

class RolloutConfig(BaseModel):
    """Everything that shapes a conversation (the run id hashes it, so a re-run resumes)."""

    model_config = ConfigDict(extra="forbid")

    user: Literal["scripted", "llm"] = "scripted"
    max_turns: int = Field(10, ge=1)  # user turns after the first message
    max_steps: int = Field(8, ge=1)  # agent tool-call rounds within one turn
    temperature: float = 0.0
    user_temperature: float = 0.0
    # The agent's repetition penalty, sent with every request: 1.0 (none), vLLM's default and OpenAI's.
    # llama-cpp-python's server default, 1.1, divides the logit of every token among the last 64 the
    # agent generated, among them the ones a call must copy from the user's words (an id "rep_6" after
    # the key "repo_id" shares "_" with it): measured on a trained SmolLM2-135M, it turned copied
    # values into empty strings (README, "repetition penalty"). None: the server's own default, as
    # every run made before this setting (their run ids stay theirs).
    repeat_penalty: float | None = 1.0
    max_tokens: int = 512
    user_max_tokens: int = 200
    patience: int = Field(8, ge=1)  # the scripted user's own limit
    # The scripted user may end the conversation the moment the state reaches the gold state (or the
    # reply holds the gold outputs): a shortcut for collecting training data only. Evaluation turns
    # it off (tasks.evaluation.evaluate): no tau2 user knows the gold state, so neither may ours.
    goal_check: bool = True
    turn_retries: int = Field(3, ge=0)  # after LLMClient's own retries are spent
    retry_wait: float = 1.0
    max_stop_refusals: int = 2
    max_in_flight: int | None = None  # conversations at once (default: tasks.rollouts.engine.in_flight_limit)
    unsafe: bool = False  # run tool code without the sandbox's isolation (tests on machines without it)
    # End a conversation (end_reason "settled_failure") once our verifier must fail it whatever follows
    # (settled_failure below): a looping model otherwise spends its requests up to the turn limit. Off
    # where a verdict is not ours alone (tau2 scores its own way); the run id hashes it only when on.
    stop_when_failed: bool = False


def repeat_penalty_setting(text: str) -> float | None:
    """A --repeat-penalty value as RolloutConfig.repeat_penalty: a number, or 'server' (None: the
    server's own default). ValueError for anything else."""
    if text == "server":
        return None
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--repeat-penalty is a number or 'server', not {text!r}") from None


def sampling_temperature(trials: int, temperature: float | None = None) -> float:
    """The agent's (and LLM user's) temperature: as given, else 0 for one trial and 0.7 for k > 1
    (k trials at temperature 0 would be k copies of one sample)."""
    return temperature if temperature is not None else (0.7 if trials > 1 else 0.0)


def settled_failure(messages: list[dict[str, Any]], format_errors: int) -> bool:
    """Whether tasks.verify.verify.check_dialogue must fail this conversation whatever comes next: a
    malformed reply, or one call (name and arguments by value) or one text-only reply made MAX_REPEATS
    times (its repetition rule at its default)."""
    if format_errors:
        return True
    calls: Counter = Counter()
    texts: Counter = Counter()
    for m in messages:
        if m.get("role") != "assistant":
            continue
        content = (m.get("content") or "").strip() if isinstance(m.get("content"), str) else ""
        if content and not m.get("tool_calls"):
            texts[content] += 1
        for c in m.get("tool_calls") or []:
            fn = c.get("function") or {}
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except ValueError:
                    continue
            if isinstance(args, dict):
                calls[call_key(fn.get("name"), args)] += 1
    return any(n >= MAX_REPEATS for n in (*calls.values(), *texts.values()))


def trajectory_id(run_id: str, scenario_id: str, trial: int) -> str:
    return content_hash({"run": run_id, "scenario": scenario_id, "trial": trial})


def pending_write(messages: list[dict[str, Any]]) -> bool:
    """The agent's last message is text announcing an action, and no tool call followed it."""
    last = messages[-1] if messages else {}
    return last.get("role") == "assistant" and not last.get("tool_calls") and announces_action(last.get("content"))


class _Settled(Exception):
    """The conversation's failure is settled (settled_failure): end it here."""


class _Fatal(Exception):
    pass


async def _retry_turn(fn: Callable[[], Any], cfg: RolloutConfig, counters: Counter, who: str = "user") -> Any:
    """Run one turn; a transient LLM error (after the client's own retries) re-runs the same turn.
    A fatal one names whose turn it was (verification attributes it: tasks.verify.verify.attribute)."""
    for attempt in range(cfg.turn_retries + 1):
        try:
            return await fn()
        except LLMError as exc:
            if not exc.transient or attempt == cfg.turn_retries:
                raise _Fatal(f"{type(exc).__name__}: {exc} ({who} turn)") from exc
            counters["turn_retries"] += 1
            await asyncio.sleep(cfg.retry_wait * 2 ** attempt)
    raise AssertionError("unreachable")


async def blocking(executor: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """Run a blocking call (tool call, state hash, file write) off the event loop."""
    return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)


async def run_conversation(scenario: Scenario, trial: int, run_id: str, client: LLMClient, env: Any,
                           user: Any, cfg: RolloutConfig, tools: list[dict[str, Any]], system: str,
                           executor: Any = None, lane: str | None = None) -> Trajectory:
    """One user-agent-tool conversation on a reset environment; returns the finished Trajectory.

    Blocking environment work runs in `executor` (default: the loop's); the engine passes a pool
    with a thread per conversation in flight, since the default pool has only a handful. lane: the
    endpoint every agent turn goes to (tasks.rollouts.engine.lanes), or None for the least busy."""
    counters: Counter = Counter()
    tokens: Counter = Counter()
    times: Counter = Counter()
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    started, t0 = time.time(), time.perf_counter()
    end_reason, error = "turn_limit", None
    goal_check = cfg.goal_check and user.needs_goal_check
    goal_values = read_goal_values(scenario) if goal_check and scenario.read_only else []
    refused_at = -1

    def add_user(turn: UserTurn) -> None:
        messages.append({"role": "user", "content": turn.text})
        tokens["user_prompt"] += turn.usage.get("prompt_tokens", 0)
        tokens["user_completion"] += turn.usage.get("completion_tokens", 0)
        times["user_llm_s"] += turn.latency_s

    async def goal_reached() -> bool:
        if not goal_check:
            return False
        if scenario.read_only:
            return reply_has_values(last_agent_text(messages), goal_values) or (
                not goal_values and any(m.get("role") == "tool" for m in messages)
                and bool(last_agent_text(messages)))
        t = time.perf_counter()
        h = await blocking(executor, env.state_hash)
        times["goal_check_s"] += time.perf_counter() - t
        return h == scenario.gold_hash

    def settle() -> None:
        if cfg.stop_when_failed and settled_failure(messages, counters["format_errors"]):
            raise _Settled

    try:
        turn = await _retry_turn(user.first, cfg, counters)
        add_user(turn)
        if turn.stop:
            end_reason = "user_stop"
        else:
            for _ in range(cfg.max_turns):
                for step in range(cfg.max_steps):
                    msg, reply, ferr = await _retry_turn(
                        lambda: agent_turn(client, messages, tools, temperature=cfg.temperature,
                                           max_tokens=cfg.max_tokens, salt=trial, seed=trial, endpoint=lane,
                                           repeat_penalty=cfg.repeat_penalty),
                        cfg, counters, who="agent")
                    messages.append(msg)
                    counters["agent_turns"] += 1
                    if ferr is not None:
                        counters["format_errors"] += 1
                        settle()
                        break
                    tokens["agent_prompt"] += reply.usage.get("prompt_tokens", 0)
                    tokens["agent_completion"] += reply.usage.get("completion_tokens", 0)
                    times["agent_llm_s"] += reply.latency_s
                    if not reply.tool_calls:
                        settle()
                        break
                    for call in reply.tool_calls:
                        t = time.perf_counter()
                        res = await blocking(executor, env.call, call["name"], call["arguments"])
                        times["tool_s"] += time.perf_counter() - t
                        counters["tool_calls"] += 1
                        if not res.ok:
                            counters["tool_errors"] += 1
                            if "sandbox was restarted" in (res.error or ""):
                                counters["sandbox_errors"] += 1
                        messages.append({"role": "tool", "tool_call_id": call["id"], "name": call["name"],
                                         "content": res.text()})
                    settle()
                else:
                    counters["step_limit"] += 1
                reached = await goal_reached()
                turn = await _retry_turn(lambda: user.respond(messages, reached), cfg, counters)
                if turn.stop and pending_write(messages) and refused_at != len(messages) \
                        and counters["stop_refused"] < cfg.max_stop_refusals:
                    counters["stop_refused"] += 1
                    refused_at = len(messages)
                    turn = await _retry_turn(lambda: user.nudge(messages), cfg, counters)
                add_user(turn)
                counters["user_turns"] += 1
                if turn.stop:
                    end_reason = "user_stop"
                    break
    except _Settled:
        end_reason = "settled_failure"
    except _Fatal as exc:
        end_reason, error = "fatal_error", f"llm: {exc}"
    except Exception as exc:  # noqa: BLE001 - a sandbox or engine failure ends this conversation only
        end_reason, error = "fatal_error", f"environment: {type(exc).__name__}: {exc}"
    final_hash, final_diff = "", []
    try:
        final_hash = await blocking(executor, env.state_hash)
        final_diff = await blocking(executor, env.diff)
    except Exception as exc:  # noqa: BLE001
        end_reason, error = "fatal_error", error or f"environment: {type(exc).__name__}: {exc}"
    times["total_s"] = time.perf_counter() - t0
    times["started"] = started
    tokens.update({f"n_{k}": v for k, v in counters.items()})
    return Trajectory(id=trajectory_id(run_id, scenario.id, trial), run_id=run_id, scenario_id=scenario.id,
                      domain=scenario.domain, trial=trial, messages=messages, tools=tools, final_hash=final_hash,
                      final_diff=final_diff, end_reason=end_reason, error=error,
                      timings={k: round(float(v), 6) for k, v in times.items()}, tokens=dict(tokens),
                      agent_model=client.model, user_kind=user.kind)
