"""What one harness capability adds to an agent: tools, middleware and a section of the system prompt."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rxagent.agent.middleware import AnyMiddleware
from rxagent.tools import Tool

__all__ = ["HarnessPart", "compose_parts"]


@dataclass(frozen=True, slots=True)
class HarnessPart:
    """One capability of the harness (files, shell, todos, skills, tasks, the context budget).

    ``tools`` are registered on the agent's toolkit, ``middleware`` wraps its cut points (outermost first,
    inside the user's own middleware), and ``instructions`` is appended to the system prompt as a section
    of its own; an empty string adds nothing. A capability whose prompt line depends on the run (a todo
    reminder) puts it in middleware at the ``request`` cut point instead, so it is never stored.
    """

    name: str
    tools: tuple[Tool | Callable[..., Any], ...] = ()
    middleware: tuple[AnyMiddleware, ...] = ()
    instructions: str = ""


@dataclass(frozen=True, slots=True)
class ComposedParts:
    """Several parts merged: every tool, every middleware in order, the instructions as one text."""

    tools: tuple[Tool | Callable[..., Any], ...]
    middleware: tuple[AnyMiddleware, ...]
    instructions: str


def compose_parts(parts: Iterable[HarnessPart], system_prompt: str | None = None) -> ComposedParts:
    """Merge ``parts`` in order; ``system_prompt`` comes first, then each part's instructions."""
    listed: Sequence[HarnessPart] = tuple(parts)
    names = [part.name for part in listed]
    if len(set(names)) != len(names):
        raise ValueError(f"harness parts must have distinct names, got {names}")
    sections = [system_prompt] if system_prompt else []
    sections += [part.instructions for part in listed if part.instructions]
    return ComposedParts(
        tools=tuple(tool for part in listed for tool in part.tools),
        middleware=tuple(mw for part in listed for mw in part.middleware),
        instructions="\n\n".join(sections),
    )
