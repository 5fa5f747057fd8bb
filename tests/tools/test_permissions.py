"""The permission gate: deny → ask → the tool's own check → allow → the mode's default."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from rxagent.context import RuntimeContext
from rxagent.tools import Permissions, tool
from rxagent.tools.permissions import PermissionMode

CTX = RuntimeContext(user_id="u1")


def cautious(arguments: Mapping[str, Any], _: RuntimeContext) -> Any:
    return "ask" if float(arguments.get("amount", 0)) > 100 else "allow"


@tool(permission=cautious)
def refund(order: str, amount: float) -> str:
    """Refund an order."""
    return order


@tool
def delete_file(path: str) -> str:
    """Delete a file."""
    return path


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return path


def test_mode_defaults() -> None:
    modes: dict[PermissionMode, str] = {"default": "allow", "ask_all": "ask", "deny_all": "deny"}
    for mode, expected in modes.items():
        decision = Permissions(mode=mode).decide(read_file, {"path": "a"}, CTX)
        assert (decision.decision, decision.source) == (expected, "mode")


def test_deny_beats_ask_beats_tool_check_beats_allow() -> None:
    gate = Permissions().allow("*").ask("refund").deny("refund", order="X-*", reason="fraud list")
    denied = gate.decide(refund, {"order": "X-1", "amount": 5}, CTX)
    assert (denied.decision, denied.reason) == ("deny", "fraud list")
    assert denied.rule is not None
    asked = gate.decide(refund, {"order": "A-1", "amount": 5}, CTX)
    assert (asked.decision, asked.source) == ("ask", "rule")
    without_ask = Permissions().allow("*")
    assert (
        without_ask.decide(refund, {"order": "A", "amount": 500}, CTX).decision == "ask"
    )  # tool's own check
    assert without_ask.decide(refund, {"order": "A", "amount": 5}, CTX).source == "tool"
    assert without_ask.decide(read_file, {"path": "a"}, CTX).source == "rule"


def test_patterns_match_names_and_arguments() -> None:
    gate = Permissions(mode="deny_all").allow("read_*", path="/tmp/*").deny("delete_*")
    assert gate.decide(read_file, {"path": "/tmp/x"}, CTX).decision == "allow"
    assert gate.decide(read_file, {"path": "/etc/passwd"}, CTX).decision == "deny"
    assert gate.decide(delete_file, {"path": "/tmp/x"}, CTX).decision == "deny"
    assert gate.decide(read_file, {}, CTX).decision == "deny"  # a pattern on a missing argument never matches


def test_predicates_see_arguments_and_context() -> None:
    gate = Permissions().deny("*", when=lambda _args, ctx: ctx.user_id == "guest", reason="guests read only")
    assert gate.decide(read_file, {"path": "a"}, RuntimeContext(user_id="guest")).decision == "deny"
    assert gate.decide(read_file, {"path": "a"}, CTX).decision == "allow"


def test_rule_sets_are_immutable() -> None:
    base = Permissions()
    stricter = base.deny("delete_*")
    assert base.rules == ()
    assert len(stricter.rules) == 1
    assert stricter.with_mode("ask_all").mode == "ask_all"
    with pytest.raises(AttributeError):
        base.mode = "deny_all"  # type: ignore[misc]
