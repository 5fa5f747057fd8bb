"""Permission rules a person adds to one session: "always allow this tool here".

An approval may say ``always`` (:class:`~rxagent.agent.inputs.ToolDecision`): from then on, calls of that
tool in that session run without asking, where a rule or the mode would have asked. Nothing else changes:
a ``deny`` rule still refuses, and so does a tool's own check that denies (a grant answers questions, it
never overrides a refusal). Calls of the tool that wait for an answer in the same batch are approved at
once, each with a ``decision`` fact that names the rule (``"by": "rule"``).

The rules are the session's: they are kept in its extras under :data:`SESSION_RULES`, so the log records
each one (an ``extras`` fact, written with the run that took the approval), every later run of the session
reads them, and a fork takes them along. The ``decision`` fact of the approval that made a rule says
``"always": true``. A rule is ``{"decision": "allow", "tool": <the tool's name>, "call_id": <the approved
call>, "reason": <the approval's reason>}``; the name is matched exactly (no globs: a tool a model invents
with ``*`` in its name matches nothing it should not).
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import JsonValue

from rxagent.messages import ToolUseBlock
from rxagent.state import AgentState

__all__ = ["SESSION_RULES", "allow_always", "allowed_tools", "approved_by_rules"]

SESSION_RULES = "rxagent_permission_rules"
"""The ``state.extras`` key of the session's permission rules (a list of rule objects, oldest first)."""


def allowed_tools(state: AgentState) -> frozenset[str]:
    """The names of the tools the session's rules allow without asking (malformed entries are skipped:
    extras are plain data a middleware could have written)."""
    rules = state.extras.get(SESSION_RULES)
    if not isinstance(rules, list):
        return frozenset()
    return frozenset(
        tool
        for rule in rules
        if isinstance(rule, dict)
        and rule.get("decision") == "allow"
        and isinstance(tool := rule.get("tool"), str)
    )


def allow_always(state: AgentState, call: ToolUseBlock, reason: str = "") -> bool:
    """Add a rule allowing ``call``'s tool in the session without asking; whether it was new (a tool allowed
    already gets no second rule)."""
    if call.name in allowed_tools(state):
        return False
    existing = state.extras.get(SESSION_RULES)
    rules: list[JsonValue] = [*existing] if isinstance(existing, list) else []
    rules.append({"decision": "allow", "tool": call.name, "call_id": call.id, "reason": reason})
    state.extras[SESSION_RULES] = rules
    return True


def approved_by_rules(state: AgentState, calls: Iterable[ToolUseBlock]) -> frozenset[str]:
    """The ids of ``calls`` whose tools the session's rules allow without asking."""
    allowed = allowed_tools(state)
    if not allowed:
        return frozenset()
    return frozenset(c.id for c in calls if c.name in allowed)
