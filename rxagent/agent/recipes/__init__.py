"""Agents built only from the public parts of :mod:`rxagent.agent`: each recipe is one short module.

- :mod:`~rxagent.agent.recipes.plan_execute`: a planning turn writes a numbered plan, then the ReAct loop
  works through it item by item, then a closing turn answers.
- :mod:`~rxagent.agent.recipes.reviewer`: a reviewer approves or rejects each batch of tool calls before
  it runs (a function of yours, or a model asked for a verdict).

Read them as examples of custom assemblies: new node types, steps made with ``reason_step`` and
``act_step``, and decisions that wrap the default ones.
"""

from __future__ import annotations

from rxagent.agent.recipes.plan_execute import Conclude, NextItem, Plan, plan_and_execute
from rxagent.agent.recipes.reviewer import Verdict, model_reviewer, reviewed

__all__ = ["Conclude", "NextItem", "Plan", "Verdict", "model_reviewer", "plan_and_execute", "reviewed"]
