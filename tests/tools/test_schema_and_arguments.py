"""Schemas generated through pydantic, and the argument pipeline: parse, coerce, validate, convert."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Annotated, Any, Literal

import pytest
from jsonschema import Draft202012Validator
from pydantic import AfterValidator, BaseModel
from typing_extensions import TypedDict

from rxagent import ChatRequest, Msg
from rxagent.tools import SchemaTool, ToolArgumentError, ToolContext, tool
from rxagent.tools.arguments import (
    PlainArguments,
    coerce_arguments,
    parse_arguments,
    validate_arguments,
)


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Item(BaseModel):
    sku: str
    qty: int = 1


@dataclasses.dataclass
class Point:
    x: float
    y: float


class Options(TypedDict):
    fast: bool


@tool
def place_order(
    items: list[Item],
    color: Color,
    where: Point,
    options: Options,
    mode: Literal["air", "sea"] = "sea",
    note: str | None = None,
    tags: set[str] | None = None,
    pair: tuple[int, str] = (1, "x"),
    weights: dict[str, float] | None = None,
    gift: bool = False,
    count: int = 1,
    ratio: float = 1.0,
) -> str:
    """Place an order.

    Args:
        items: what to order.
        color: wrapping colour.
    """
    return json.dumps(
        {
            "items": [type(i).__name__ for i in items],
            "color": type(color).__name__,
            "where": type(where).__name__,
            "options": options,
            "mode": mode,
            "note": note,
            "tags": sorted(tags) if tags is not None else None,
            "pair": list(pair),
            "weights": weights,
            "gift": gift,
            "count": count,
            "ratio": ratio,
        }
    )


GOOD: dict[str, Any] = {
    "items": [{"sku": "a"}, {"sku": "b", "qty": 2}],
    "color": "red",
    "where": {"x": 1, "y": 2.5},
    "options": {"fast": True},
}


def test_schema_covers_every_supported_type_and_is_valid_json_schema() -> None:
    parameters = place_order.schema().parameters
    Draft202012Validator.check_schema(parameters)
    props = parameters["properties"]
    assert isinstance(props, dict)
    assert set(props) == {
        "items",
        "color",
        "where",
        "options",
        "mode",
        "note",
        "tags",
        "pair",
        "weights",
        "gift",
        "count",
        "ratio",
    }
    assert parameters["required"] == ["items", "color", "where", "options"]
    assert parameters["additionalProperties"] is False
    assert props["mode"] == {"default": "sea", "enum": ["air", "sea"], "type": "string"}
    assert props["pair"]["prefixItems"] == [{"type": "integer"}, {"type": "string"}]
    defs = parameters["$defs"]
    assert isinstance(defs, dict)
    assert defs["Color"] == {"enum": ["red", "blue"], "type": "string"}
    assert set(defs) == {"Color", "Item", "Point", "Options"}
    assert "title" not in json.dumps(parameters)


def test_a_property_named_title_survives_title_stripping() -> None:
    @tool
    def publish(title: str, body: str) -> str:
        """Publish."""
        return title

    assert set(publish.schema().parameters["properties"]) == {"title", "body"}  # type: ignore[arg-type]


def test_schema_matches_what_the_openai_client_sends() -> None:
    from rxagent.model.openai import OpenAIChatModel

    model = OpenAIChatModel(base_url="http://127.0.0.1:9/v1", model="m")
    body = json.loads(
        model.encode_request(ChatRequest(messages=(Msg.user("x"),), tools=(place_order.schema(),)))
    )
    sent = body["tools"][0]["function"]
    assert sent["name"] == "place_order"
    assert sent["parameters"] == json.loads(json.dumps(place_order.schema().parameters))


def test_conversion_gives_models_dataclasses_and_enums_not_dicts() -> None:
    values = place_order.prepare(GOOD)
    assert [type(i) for i in values["items"]] == [Item, Item]
    assert values["items"][1].qty == 2
    assert values["color"] is Color.RED
    assert values["where"] == Point(1.0, 2.5)
    assert values["options"] == {"fast": True}
    assert "mode" not in values  # defaults are the function's own


def test_parse_rejects_half_and_non_object_json_never_empty_dict() -> None:
    with pytest.raises(ToolArgumentError, match="not valid JSON"):
        parse_arguments("f", '{"a": 1')
    with pytest.raises(ToolArgumentError, match="must be a JSON object, got list"):
        parse_arguments("f", "[1, 2]")
    assert parse_arguments("f", "  ") == {}


def test_coercions_are_conservative_and_documented() -> None:
    schema = place_order.schema().parameters
    coerced = coerce_arguments(
        {**GOOD, "count": "3", "ratio": "0.5", "gift": "false", "note": "", "weights": {"a": "1.5"}}, schema
    )
    assert coerced["count"] == 3
    assert coerced["ratio"] == 0.5
    assert coerced["gift"] is False
    assert coerced["note"] == ""  # a string parameter keeps its empty string
    assert coerced["weights"] == {"a": "1.5"}  # additionalProperties maps are not walked
    nested = coerce_arguments({**GOOD, "items": [{"sku": "a", "qty": "4"}]}, schema)
    assert nested["items"][0]["qty"] == 4  # through $ref into nested models
    assert coerce_arguments({"count": "many"}, schema) == {"count": "many"}  # left for validation to report
    assert coerce_arguments({"count": "2.0"}, schema) == {"count": 2}
    assert coerce_arguments({"count": "2.5"}, schema) == {"count": "2.5"}
    assert coerce_arguments({"ratio": "nan"}, schema) == {"ratio": "nan"}


def test_empty_string_for_an_optional_number_lets_the_default_apply() -> None:
    values = place_order.prepare({**GOOD, "count": "", "gift": "true"})
    assert "count" not in values
    assert values["gift"] is True
    result = json.loads(place_order.function(**values))
    assert result["count"] == 1


def test_empty_string_for_a_required_int_is_a_clear_error() -> None:
    @tool
    def nth(n: int) -> int:
        """Nth."""
        return n

    with pytest.raises(ToolArgumentError) as caught:
        nth.prepare({"n": ""})
    assert "n: None is not of type 'integer' (rule: type)" in str(caught.value)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, ["items: is required but missing (rule: required)", "color: is required but missing"]),
        ({**GOOD, "color": "green"}, ["color: 'green' is not one of ['red', 'blue'] (rule: enum)"]),
        (
            {**GOOD, "surprise": 1},
            ["(arguments): Additional properties are not allowed ('surprise' was unexpected)"],
        ),
        ({**GOOD, "items": [{"qty": 1}]}, ["items[0].sku: is required but missing"]),
        ({**GOOD, "items": {"sku": "a"}}, ["items: {'sku': 'a'} is not of type 'array' (rule: type)"]),
        ({**GOOD, "mode": "rail"}, ["mode: 'rail' is not one of ['air', 'sea'] (rule: enum)"]),
        ({**GOOD, "pair": [1, 2]}, ["pair[1]: 2 is not of type 'string' (rule: type)"]),
    ],
)
def test_validation_errors_name_the_field_and_the_rule(
    arguments: dict[str, Any], expected: list[str]
) -> None:
    with pytest.raises(ToolArgumentError) as caught:
        place_order.prepare(arguments)
    message = str(caught.value)
    assert message.startswith("Invalid arguments for tool 'place_order':")
    assert message.endswith("Fix the arguments and call the tool again.")
    for part in expected:
        assert part in message


def test_a_huge_string_is_validated_and_its_error_stays_short() -> None:
    @tool
    def short(text: Literal["a", "b"]) -> str:
        """Short."""
        return text

    with pytest.raises(ToolArgumentError) as caught:
        short.prepare({"text": "x" * 1_000_000})
    assert len(str(caught.value)) < 500
    assert "characters)" in str(caught.value)


# ---- the plain fast path: the same outcome as every step, for less ------------------------------------


@tool
def plain(name: str, n: int, ratio: float = 1.0, flag: bool = False, note: str | None = None) -> str:
    """Scalars only.

    Args:
        name: a name.
        n: a count.
    """
    return name


def _every_step(arguments: dict[str, Any]) -> dict[str, Any]:
    """What coerce, validate and convert make of ``arguments``, step by step (the full path)."""
    parameters = plain.schema().parameters
    coerced = coerce_arguments(arguments, parameters)
    validate_arguments(plain.name, coerced, plain.validator())
    return plain.convert(coerced)


def _outcome(step: Any, arguments: dict[str, Any]) -> tuple[str, Any]:
    try:
        values = step(arguments)
    except (ToolArgumentError, ValueError) as error:
        return "error", str(error)
    return "values", {k: (type(v), v) for k, v in values.items()}  # 1 and 1.0 told apart


@pytest.mark.parametrize(
    "arguments",
    [
        {"name": "a", "n": 1},
        {"name": "a", "n": 1, "ratio": 0.5, "flag": True, "note": None},
        {"name": "a", "n": 1, "note": "x"},
        {"name": "", "n": -3},
        {"name": "a", "n": 1, "ratio": 2},  # an int for a float: pydantic makes 2.0
        {"name": "a", "n": 2.0},  # JSON Schema's integer takes 2.0, pydantic makes 2
        {"name": "a", "n": "3"},  # coerced
        {"name": "a", "n": "", "flag": "true"},
        {"name": "a", "n": True},  # a boolean is no integer
        {"name": 5, "n": 1},
        {"name": "a"},
        {"n": 1},
        {"name": "a", "n": 1, "surprise": 1},
        {"name": "a", "n": 1, "flag": "yes"},
        {"name": "a", "n": 1, "note": 3},
        {"name": "a", "n": [1]},
        {},
    ],
)
def test_plain_arguments_give_what_every_step_gives(arguments: dict[str, Any]) -> None:
    # Taken as sent when they are exactly of their types; otherwise the same values or the same error.
    assert _outcome(plain.prepare, arguments) == _outcome(_every_step, arguments)


def test_bad_plain_arguments_keep_their_clear_errors() -> None:
    with pytest.raises(ToolArgumentError) as caught:
        plain.prepare({"name": "a", "n": True})
    assert "n: True is not of type 'integer' (rule: type)" in str(caught.value)
    with pytest.raises(ToolArgumentError) as caught:
        plain.prepare({"n": 1, "surprise": 1})
    message = str(caught.value)
    assert "name: is required but missing (rule: required)" in message
    assert "('surprise' was unexpected)" in message
    assert message.endswith("Fix the arguments and call the tool again.")


def test_presets_win_on_the_plain_path_too() -> None:
    assert plain.prepare({"name": "model's", "n": 1}, {"name": "preset"}) == {"name": "preset", "n": 1}


def test_a_validator_behind_a_plain_schema_still_converts() -> None:
    @tool
    def shout(text: Annotated[str, AfterValidator(str.upper)], ctx: ToolContext) -> str:
        """Shout."""
        return text

    assert shout.schema().parameters["properties"]["text"]["type"] == "string"  # the schema looks plain
    assert shout.prepare({"text": "hi"}) == {"text": "HI"}


def test_a_plain_schema_tool_still_reports_a_wrong_type() -> None:
    def call(arguments: dict[str, Any], context: ToolContext) -> str:
        return str(arguments)

    lookup = SchemaTool(
        "lookup",
        "Look up.",
        {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        call,
    )
    assert lookup.prepare({"key": "k"}) == {"key": "k"}
    with pytest.raises(ToolArgumentError, match=r"key: 7 is not of type 'string' \(rule: type\)"):
        lookup.prepare({"key": 7})


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "object", "properties": {"s": {"type": "string", "minLength": 2}}},
        {"type": "object", "properties": {"s": {"enum": ["a", "b"]}}},
        {"type": "object", "properties": {"p": {"type": "string", "format": "path"}}},
        {"type": "object", "properties": {"o": {"type": "object"}}},
        {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}},
        {"type": "object", "properties": {"x": {}}},
        {"type": "object", "properties": {"s": {"$ref": "#/$defs/S"}}, "$defs": {"S": {"type": "string"}}},
        {"type": "object", "properties": {}, "required": ["ghost"]},
        {"type": "object", "properties": {"s": {"anyOf": [{"type": "string"}, {"type": "object"}]}}},
        {"type": "array"},
    ],
)
def test_only_plain_schemas_get_the_fast_check(parameters: dict[str, Any]) -> None:
    assert PlainArguments.of(parameters) is None


def test_the_fast_check_reads_optional_and_listed_types() -> None:
    check = PlainArguments.of(
        {
            "type": "object",
            "properties": {
                "a": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
                "b": {"type": ["string", "boolean"], "description": "either"},
            },
            "required": ["b"],
            "additionalProperties": False,
        }
    )
    assert check is not None
    assert check.accepts({"b": "x"})
    assert check.accepts({"a": None, "b": True})
    assert check.accepts({"a": 3, "b": ""})
    assert not check.accepts({"a": 3})  # b is required
    assert not check.accepts({"b": 1})
    assert not check.accepts({"a": 1.5, "b": "x"})
    assert not check.accepts({"b": "x", "c": 1})


def test_a_subclass_that_converts_or_validates_more_keeps_every_step() -> None:
    def call(arguments: dict[str, Any], context: ToolContext) -> str:
        return str(arguments)

    schema: dict[str, Any] = {"type": "object", "properties": {"key": {"type": "string"}}}

    class Lowering(SchemaTool):
        def convert(self, arguments: Any, hidden: frozenset[str] = frozenset()) -> dict[str, Any]:
            return {k: v.lower() for k, v in arguments.items()}

    class Strict(SchemaTool):
        def validator(self, hidden: frozenset[str] = frozenset()) -> Draft202012Validator:
            return Draft202012Validator({**schema, "properties": {"key": {"type": "string", "maxLength": 2}}})

    assert Lowering("lower", "Lower.", schema, call).prepare({"key": "ABC"}) == {"key": "abc"}
    with pytest.raises(ToolArgumentError, match="is too long"):
        Strict("strict", "Strict.", schema, call).prepare({"key": "ABC"})
