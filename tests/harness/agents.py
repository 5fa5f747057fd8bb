"""Agents built from harness parts the way the ``Harness`` builds them: parts composed after the user's
system prompt, their tools in the toolkit, their middleware on the agent."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rxagent.agent import ReActAgent
from rxagent.harness import HarnessPart, compose_parts
from rxagent.model.types import ChatModel
from rxagent.session import StoredFact
from rxagent.tools import Tool, Toolkit


def agent_of(
    model: ChatModel,
    parts: Sequence[HarnessPart],
    *,
    tools: Sequence[Tool | Callable[..., Any]] = (),
    system_prompt: str = "You are careful.",
    **options: Any,
) -> ReActAgent:
    """An agent with ``parts`` (in order) around ``model``, plus the user's own ``tools``."""
    merged = compose_parts(parts, system_prompt)
    return ReActAgent(
        model,
        Toolkit([*tools, *merged.tools]),
        system_prompt=merged.instructions,
        middleware=merged.middleware,
        **options,
    )


def fact_rows(facts: Sequence[StoredFact]) -> list[tuple[int, str, str]]:
    """Facts as comparable rows: sequence number, kind, payload."""
    return [(f.seq, f.kind, f.payload) for f in facts]
