"""Agents built only from the public parts of :mod:`rxagent.agent.loop`: each recipe is one short module
(40 lines of code or fewer, a test holds it) that returns an assembly (a
:class:`~rxagent.agent.loop.Steps` table) for ``Agent(..., steps=...)``.

- :mod:`~rxagent.agent.recipes.plan_execute`: a planning turn writes a numbered plan, then the ReAct loop
  works through it item by item, then a closing turn answers.
- :mod:`~rxagent.agent.recipes.reviewer`: a reviewer approves or rejects each batch of tool calls before
  it runs (a function of yours, or a model asked for its verdicts in a side turn).
- :mod:`~rxagent.agent.recipes.reflect`: a critic judges each answer in a side turn, and the model
  revises it until the critic is content, a bounded number of times.

Read them as examples of custom assemblies: new node types, steps made with ``reason_step`` and
``model_turn``, and decisions that wrap the default ones; the type checker verifies every edge. None of
them pops or patches the run's state: they tell the model things with ``run.add_messages`` and keep
their own progress in their nodes or the session's ``extras``.
"""

from __future__ import annotations

from rxagent.agent.recipes.plan_execute import Conclude, NextItem, Plan, Progress, plan_and_execute
from rxagent.agent.recipes.reflect import Critique, Revise, reflect_then_revise
from rxagent.agent.recipes.reviewer import (
    Review,
    Reviewer,
    Verdict,
    Verdicts,
    function_reviewer,
    model_reviewer,
    reviewing,
)

__all__ = [
    "Conclude",
    "Critique",
    "NextItem",
    "Plan",
    "Progress",
    "Review",
    "Reviewer",
    "Revise",
    "Verdict",
    "Verdicts",
    "function_reviewer",
    "model_reviewer",
    "plan_and_execute",
    "reflect_then_revise",
    "reviewing",
]
