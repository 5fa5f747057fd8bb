"""Permission rules: may this call run now, must it be refused, or must a human be asked first?

Every call passes the same gate, however its tool was built (decorated function, schema tool, MCP tool):
the executor asks :meth:`Permissions.decide` before running anything, and again if an interceptor
rewrote the arguments. The order is fixed:

1. **deny** rules — a match refuses the call;
2. **ask** rules — a match suspends the call for a human decision;
3. the tool's own check (``@tool(permission=...)``) — it may allow, deny or ask;
4. **allow** rules — a match lets the call run;
5. the mode's default — ``default`` allows, ``ask_all`` asks, ``deny_all`` refuses.

Decisions are data (:class:`PermissionDecision`: decision, the rule that made it, a reason), so a later
layer can suspend the run, show the question to a person, and resume with their answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any, Literal, TypeAlias

from rxagent.context import RuntimeContext
from rxagent.tools._tool import Tool

__all__ = ["Decision", "PermissionDecision", "PermissionMode", "PermissionRule", "Permissions"]

Decision: TypeAlias = Literal["allow", "deny", "ask"]
"""Run it, refuse it, or ask a human."""

PermissionMode: TypeAlias = Literal["default", "ask_all", "deny_all"]
"""What happens when no rule and no tool check decided: allow, ask, or refuse."""

_MODE_DECISION: dict[PermissionMode, Decision] = {"default": "allow", "ask_all": "ask", "deny_all": "deny"}


@dataclass(frozen=True, slots=True)
class PermissionRule:
    """A rule matching tool names (glob patterns such as ``"fs_*"``) and, optionally, arguments.

    Attributes:
        decision: what a match decides.
        tools: glob pattern for the tool name.
        arguments: glob patterns that the given arguments' text must match (all of them).
        when: a predicate over the arguments and the run's context, for anything patterns cannot say.
        reason: why, shown in the decision (and to the model when a call is refused).
    """

    decision: Decision
    tools: str = "*"
    arguments: Mapping[str, str] = field(default_factory=lambda: {})
    when: Callable[[Mapping[str, Any], RuntimeContext], bool] | None = None
    reason: str = ""

    def matches(self, tool_name: str, arguments: Mapping[str, Any], context: RuntimeContext) -> bool:
        """True when this rule applies to the call."""
        if not fnmatchcase(tool_name, self.tools):
            return False
        for name, pattern in self.arguments.items():
            if name not in arguments or not fnmatchcase(_text(arguments[name]), pattern):
                return False
        return self.when is None or self.when(arguments, context)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


@dataclass(frozen=True, slots=True)
class PermissionDecision:
    """The gate's answer for one call, and where it came from (``rule``, ``tool`` check, or ``mode``)."""

    decision: Decision
    source: Literal["rule", "tool", "mode"]
    reason: str
    rule: PermissionRule | None = None


@dataclass(frozen=True, slots=True)
class Permissions:
    """An immutable rule set plus a mode. Derive changed sets with :meth:`allow`, :meth:`deny`, :meth:`ask`.

    Example:
        >>> gate = Permissions().deny("delete_*", reason="never").ask("refund", amount="[0-9][0-9][0-9]*")
        >>> [r.decision for r in gate.rules]
        ['deny', 'ask']
    """

    rules: tuple[PermissionRule, ...] = ()
    mode: PermissionMode = "default"

    def _with(
        self, decision: Decision, tools: str, when: Any, reason: str, arguments: Mapping[str, str]
    ) -> Permissions:
        rule = PermissionRule(decision, tools, dict(arguments), when, reason)
        return replace(self, rules=(*self.rules, rule))

    def allow(
        self,
        tools: str = "*",
        *,
        when: Callable[[Mapping[str, Any], RuntimeContext], bool] | None = None,
        reason: str = "",
        **arguments: str,
    ) -> Permissions:
        """A copy with an allow rule added."""
        return self._with("allow", tools, when, reason, arguments)

    def deny(
        self,
        tools: str = "*",
        *,
        when: Callable[[Mapping[str, Any], RuntimeContext], bool] | None = None,
        reason: str = "",
        **arguments: str,
    ) -> Permissions:
        """A copy with a deny rule added."""
        return self._with("deny", tools, when, reason, arguments)

    def ask(
        self,
        tools: str = "*",
        *,
        when: Callable[[Mapping[str, Any], RuntimeContext], bool] | None = None,
        reason: str = "",
        **arguments: str,
    ) -> Permissions:
        """A copy with an ask rule added."""
        return self._with("ask", tools, when, reason, arguments)

    def with_mode(self, mode: PermissionMode) -> Permissions:
        """A copy with another mode."""
        return replace(self, mode=mode)

    def decide(self, tool: Tool, arguments: Mapping[str, Any], context: RuntimeContext) -> PermissionDecision:
        """Decide one call: deny rules, ask rules, the tool's own check, allow rules, then the mode."""
        for wanted in ("deny", "ask"):
            for rule in self.rules:
                if rule.decision == wanted and rule.matches(tool.name, arguments, context):
                    return PermissionDecision(
                        wanted, "rule", rule.reason or f"{wanted} rule for {rule.tools}", rule
                    )
        check = tool.traits.permission
        if check is not None:
            answer = check(arguments, context)
            if answer is not None:
                return PermissionDecision(answer, "tool", f"tool {tool.name!r} decided {answer}")
        for rule in self.rules:
            if rule.decision == "allow" and rule.matches(tool.name, arguments, context):
                return PermissionDecision(
                    "allow", "rule", rule.reason or f"allow rule for {rule.tools}", rule
                )
        return PermissionDecision(_MODE_DECISION[self.mode], "mode", f"permission mode {self.mode!r}")
