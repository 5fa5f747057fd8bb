"""Harness parts merge in order: tools, middleware, and instructions after the user's system prompt."""

import pytest

from rxagent.agent import Middleware
from rxagent.harness import HarnessPart, compose_parts
from rxagent.tools import tool


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"


def test_parts_merge_in_order_after_the_system_prompt() -> None:
    first, second = Middleware(), Middleware()
    merged = compose_parts(
        [
            HarnessPart("files", tools=(ping,), middleware=(first,), instructions="Work in the workspace."),
            HarnessPart("todos", middleware=(second,)),
            HarnessPart("skills", instructions="Skills: none."),
        ],
        system_prompt="You are careful.",
    )
    assert merged.tools == (ping,)
    assert merged.middleware == (first, second)
    assert merged.instructions == "You are careful.\n\nWork in the workspace.\n\nSkills: none."


def test_two_parts_with_one_name_are_refused() -> None:
    with pytest.raises(ValueError, match="distinct names"):
        compose_parts([HarnessPart("files"), HarnessPart("files")])
