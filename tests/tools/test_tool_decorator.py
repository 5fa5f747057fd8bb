"""@tool on functions, async functions and methods; names, descriptions and flags."""

from __future__ import annotations

import inspect
from typing import Annotated

import pytest
from pydantic import Field

from rxagent.tools import FunctionTool, ToolContext, Toolkit, tool


@tool
def add(a: int, b: int = 2) -> int:
    """Add two integers.

    The sum, exactly.

    Args:
        a: the first addend.
        b: the second addend.
    """
    return a + b


@tool(name="lookup", description="Find a city.", concurrency_safe=True, timeout=3, groups=["geo"])
async def find_city(
    name: Annotated[str, Field(description="city name, in English")], ctx: ToolContext
) -> str:
    """Ignored docstring summary.

    Args:
        name: ignored: the Annotated description wins.
    """
    return f"{name} ({ctx.call_id})"


class Account:
    def __init__(self, owner: str) -> None:
        self.owner = owner

    @tool(return_direct=True)
    def balance(self, currency: str = "EUR") -> str:
        """Tell the balance.

        Args:
            currency: ISO code.
        """
        return f"{self.owner}: 10 {currency}"

    @tool(external=True)
    def approve(self, amount: float) -> None:
        """Ask the back office to approve a payment (run by the caller)."""


def test_tool_takes_name_and_description_from_the_function() -> None:
    assert isinstance(add, FunctionTool)
    assert add.name == "add"
    assert add.description == "Add two integers.\n\nThe sum, exactly."
    props = add.schema().parameters["properties"]
    assert props == {
        "a": {"description": "the first addend.", "type": "integer"},
        "b": {"default": 2, "description": "the second addend.", "type": "integer"},
    }
    assert add.schema().parameters["required"] == ["a"]


def test_tool_still_calls_like_the_function() -> None:
    assert add(1) == 3
    assert add(1, b=5) == 6
    assert inspect.iscoroutinefunction(find_city.function)


def test_tool_decorator_arguments_and_annotated_descriptions() -> None:
    assert find_city.name == "lookup"
    assert find_city.description == "Find a city."
    assert find_city.traits.concurrency_safe
    assert find_city.traits.timeout == 3
    assert find_city.traits.groups == frozenset({"geo"})
    assert find_city.is_async
    schema = find_city.schema().parameters
    assert schema["properties"] == {"name": {"description": "city name, in English", "type": "string"}}
    assert "ctx" not in str(schema)


def test_method_tools_bind_to_their_instance() -> None:
    ada, bob = Account("ada"), Account("bob")
    assert ada.balance() == "ada: 10 EUR"
    kit = Toolkit()
    kit.register(bob.balance)
    registered = kit.get("balance")
    assert isinstance(registered, FunctionTool)
    assert registered(currency="USD") == "bob: 10 USD"
    assert registered.traits.return_direct
    assert "self" not in str(registered.schema().parameters)


def test_registering_an_object_registers_all_its_tools() -> None:
    kit = Toolkit()
    kit.register(Account("cy"))
    assert sorted(kit.names) == ["approve", "balance"]
    approve = kit.get("approve")
    assert approve is not None
    assert approve.traits.external


def test_a_method_tool_from_the_class_is_refused() -> None:
    with pytest.raises(TypeError, match="register it from an instance"):
        Toolkit().register(Account.balance)


def test_plain_functions_register_as_tools() -> None:
    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    kit = Toolkit([shout])
    schema = kit.view().schemas()[0]
    assert (schema.name, schema.description) == ("shout", "Upper-case the text.")


def test_variadic_parameters_are_refused_with_a_clear_error() -> None:
    def spread(*values: int) -> int:
        return sum(values)

    with pytest.raises(TypeError, match=r"\*values"):
        tool(spread)


@pytest.mark.parametrize("bad", ["", "has space", "semi;colon"])
def test_tool_names_are_checked(bad: str) -> None:
    with pytest.raises(ValueError, match="tool name"):
        tool(name=bad)(add.function)
