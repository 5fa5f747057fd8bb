"""Agents built only from the public parts of :mod:`rxagent.agent.loop`: each recipe is one short module
that returns an assembly (a :class:`~rxagent.agent.loop.Steps` table) for ``Agent(..., steps=...)``.

- :mod:`~rxagent.agent.recipes.plan_execute`: a planning turn writes a numbered plan, then the ReAct loop
  works through it item by item, then a closing turn answers.
- :mod:`~rxagent.agent.recipes.reviewer`: a reviewer approves or rejects each batch of tool calls before
  it runs (a function of yours, or a model asked for a verdict in a side turn).

Read them as examples of custom assemblies: new node types, steps made with ``reason_step`` and
``model_turn``, and decisions that wrap the default ones; the type checker verifies every edge.
"""

from __future__ import annotations

from rxagent.agent.recipes.plan_execute import Conclude, NextItem, Plan, plan_and_execute
from rxagent.agent.recipes.reviewer import (
    Review,
    Verdict,
    Verdicts,
    function_reviewer,
    model_reviewer,
    reviewing,
)

__all__ = [
    "Conclude",
    "NextItem",
    "Plan",
    "Review",
    "Verdict",
    "Verdicts",
    "function_reviewer",
    "model_reviewer",
    "plan_and_execute",
    "reviewing",
]
