"""The agent side of a rollout: system prompt, tool schemas, one agent turn via agentscaler.llm.

The agent sees the domain's tools in OpenAI tool-calling form and the conversation so far
(system, user, assistant, tool messages). A malformed tool call from the model is not repaired:
the raw text is kept as the assistant message and flagged, so the verifier can reject it.
"""

from __future__ import annotations

from typing import Any

from agentscaler.llm import ChatReply, LLMClient, LLMFormatError

AGENT_SYSTEM = (
    "You are a customer-service agent for the {domain} service. Help the user with their request using the "
    "tools. Ask the user for any detail you need (ids, names) instead of guessing it. Call tools to look "
    "things up and to make changes; never claim a change is done unless the tool call succeeded. Only make "
    "changes the user asked for. When the request is handled, tell the user the result in a short message."
)


def agent_system_prompt(domain: str, description: str = "") -> str:
    text = AGENT_SYSTEM.format(domain=domain)
    return f"{text}\n\nAbout this service: {description}" if description else text


def domain_setup(spec: Any) -> tuple[list[dict[str, Any]], str]:
    """The tool schemas and system prompt the agent gets in a domain (`spec` is a DomainSpec).

    One place, so rollouts, gold replay, the evaluation set's token count and the tool-choice
    measure all show the model the same prefix."""
    return [t.openai_schema() for t in spec.tools], agent_system_prompt(spec.name, spec.description)


async def agent_turn(client: LLMClient, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
                     temperature: float = 0.0, max_tokens: int = 512, salt: Any = None,
                     seed: int | None = None, endpoint: str | None = None,
                     repeat_penalty: float | None = None) -> tuple[dict[str, Any], ChatReply | None, str | None]:
    """One assistant turn: (message to append, reply or None, format error or None).

    Transient LLM errors propagate (the caller retries the turn); a malformed reply becomes a
    plain assistant message holding the raw text, with the error returned alongside."""
    try:
        reply = await client.chat(messages, tools=tools, temperature=temperature, max_tokens=max_tokens,
                                  stage="rollout_agent", cache_salt=salt, seed=seed, endpoint=endpoint,
                                  repeat_penalty=repeat_penalty)
    except LLMFormatError as exc:
        return {"role": "assistant", "content": exc.raw or ""}, None, str(exc)
    return reply.message(), reply, None
