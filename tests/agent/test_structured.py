"""Structured output on both paths: native JSON schema, and the per-run generate_response tool."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, Field

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import AgentOptions, ReActAgent
from rxagent.agent.structured import OUTPUT_TOOL
from rxagent.model import ForceTool, ModelCapabilities, ModelHTTPError
from rxagent.tools import Toolkit, tool

from .helpers import run

NATIVE = ModelCapabilities(json_schema_output=True)
TOOLS_ONLY = ModelCapabilities(json_schema_output=False, forced_tool_choice=True)
NO_FORCING = ModelCapabilities(json_schema_output=False, forced_tool_choice=False)


class City(BaseModel):
    """A city and its population."""

    name: str
    population: int = Field(ge=0)


@tool
def lookup(name: str) -> str:
    """Look a city up."""
    return f"{name}: 709000 people"


def answer(**arguments: Any) -> ScriptedResponse:
    return ScriptedResponse(tool_calls=[ScriptedToolCall(OUTPUT_TOOL, arguments)])


async def test_native_path_validates_the_answer_text() -> None:
    model = ScriptedModel(['{"name": "Oslo", "population": 709000}'], capabilities=NATIVE)
    agent = ReActAgent(model, output_type=City)
    result, _ = await run(agent, "Oslo?")
    assert result.reason == "STRUCTURED_OUTPUT"
    assert result.structured == City(name="Oslo", population=709000)
    request = model.requests[0]
    assert request.response_format is not None
    assert request.response_format.name == "City"  # type: ignore[union-attr]
    assert OUTPUT_TOOL not in [t.name for t in request.tools]


async def test_native_path_sends_an_invalid_first_attempt_back_with_the_error() -> None:
    model = ScriptedModel(
        ['{"name": "Oslo", "population": -1}', '```json\n{"name": "Oslo", "population": 709000}\n```'],
        capabilities=NATIVE,
    )
    result, _ = await run(ReActAgent(model, output_type=City), "Oslo?")
    assert result.structured == City(name="Oslo", population=709000)
    feedback = model.requests[1].messages[-1].text
    assert "population" in feedback
    assert "greater than or equal to 0" in feedback


async def test_native_path_gives_up_after_the_retry_limit_and_says_why() -> None:
    model = ScriptedModel(["not json", "still not", "nope"], capabilities=NATIVE)
    agent = ReActAgent(model, output_type=City, options=AgentOptions(structured_retries=2))
    result, _ = await run(agent, "Oslo?")
    assert result.reason == "STRUCTURED_OUTPUT"
    assert result.structured is None
    assert result.structured_error is not None
    assert "in 3 attempts" in result.structured_error
    assert "not valid JSON" in result.structured_error
    model.assert_complete()


async def test_tool_path_offers_a_per_run_tool_and_forces_it_when_alone() -> None:
    toolkit = Toolkit()
    model = ScriptedModel([answer(name="Oslo", population=709000)], capabilities=TOOLS_ONLY)
    result, _ = await run(ReActAgent(model, toolkit, output_type=City), "Oslo?")
    assert result.structured == City(name="Oslo", population=709000)
    request = model.requests[0]
    assert [t.name for t in request.tools] == [OUTPUT_TOOL]
    assert request.tool_choice == ForceTool(OUTPUT_TOOL)
    assert toolkit.names == ()  # never registered on the shared toolkit
    assert request.tools[0].parameters["required"] == ["name", "population"]


async def test_tool_path_with_other_tools_requires_a_tool_and_can_use_them_first() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(tool_calls=[ScriptedToolCall("lookup", {"name": "Oslo"})]),
            answer(name="Oslo", population=709000),
        ],
        capabilities=TOOLS_ONLY,
    )
    result, _ = await run(ReActAgent(model, Toolkit([lookup]), output_type=City), "Oslo?")
    assert result.structured == City(name="Oslo", population=709000)
    assert model.requests[0].tool_choice == "required"
    assert [t.name for t in model.requests[0].tools] == ["lookup", OUTPUT_TOOL]


async def test_tool_path_invalid_first_attempt_goes_back_as_a_tool_error() -> None:
    model = ScriptedModel(
        [answer(name="Oslo", population="many"), answer(name="Oslo", population=709000)],
        capabilities=TOOLS_ONLY,
    )
    result, _ = await run(ReActAgent(model, output_type=City), "Oslo?")
    assert result.structured == City(name="Oslo", population=709000)
    error = model.requests[1].messages[-1].tool_results[0]
    assert error.status == "error"
    assert "population" in error.text


async def test_tool_path_retry_limit() -> None:
    bad = answer(name="Oslo")
    model = ScriptedModel([bad, bad], capabilities=TOOLS_ONLY)
    agent = ReActAgent(model, output_type=City, options=AgentOptions(structured_retries=1))
    result, _ = await run(agent, "Oslo?")
    assert (result.reason, result.structured) == ("STRUCTURED_OUTPUT", None)
    assert "population" in (result.structured_error or "")


async def test_tool_path_steps_down_the_ladder_when_forcing_is_rejected() -> None:
    rejected = ModelHTTPError(400, '{"error": "tool_choice is not supported by this model"}')
    model = ScriptedModel([rejected, rejected, answer(name="Oslo", population=1)], capabilities=TOOLS_ONLY)
    result, _ = await run(ReActAgent(model, output_type=City), "Oslo?")
    assert result.structured == City(name="Oslo", population=1)
    assert [r.tool_choice for r in model.requests] == [ForceTool(OUTPUT_TOOL), "required", "auto"]
    assert "call the `generate_response` tool" in model.requests[2].messages[-1].text


async def test_a_model_that_cannot_force_starts_at_auto_and_text_answers_are_re_prompted() -> None:
    model = ScriptedModel(
        ["Oslo has 709000 people.", answer(name="Oslo", population=709000)], capabilities=NO_FORCING
    )
    result, _ = await run(ReActAgent(model, output_type=City), "Oslo?")
    assert result.structured == City(name="Oslo", population=709000)
    assert model.requests[0].tool_choice == "auto"
    assert f"call the `{OUTPUT_TOOL}` tool" in model.requests[1].messages[-1].text


async def test_a_json_schema_output_type_gives_plain_json() -> None:
    schema = {"type": "object", "properties": {"yes": {"type": "boolean"}}, "required": ["yes"]}
    model = ScriptedModel(['{"yes": "maybe"}', json.dumps({"yes": True})], capabilities=NATIVE)
    result, _ = await run(ReActAgent(model, output_type=schema), "Well?")
    assert result.structured == {"yes": True}
    assert "'maybe' is not of type 'boolean'" in model.requests[1].messages[-1].text


async def test_without_an_output_type_structured_is_none_and_there_is_no_error() -> None:
    result, _ = await run(ReActAgent(ScriptedModel(["plain"])), "hi")
    assert (result.reason, result.structured, result.structured_error) == ("MODEL_STOP", None, None)


# ---- prompted JSON: for models with neither tool calling nor JSON-schema output --------------------------

PLAIN = ModelCapabilities(tools=False, forced_tool_choice=False, json_schema_output=False)


async def test_auto_picks_prompted_json_when_the_model_has_neither_tools_nor_json_schema() -> None:
    model = ScriptedModel(
        ['Sure! Here is the city: {"name": "Oslo", "population": 709000} — hope that helps.'],
        capabilities=PLAIN,
    )
    result, _ = await run(ReActAgent(model, output_type=City), "Oslo?")
    assert (result.reason, result.structured) == ("STRUCTURED_OUTPUT", City(name="Oslo", population=709000))
    request = model.requests[0]
    assert request.tools == ()
    assert request.response_format is None
    instruction = request.messages[-1].text
    assert "JSON schema" in instruction
    assert '"population"' in instruction  # the schema itself is in the instructions


async def test_prompted_json_asks_again_with_the_validation_error_then_accepts() -> None:
    model = ScriptedModel(
        [
            "I think it is Oslo, with lots of people.",  # no JSON at all
            '```json\n{"name": "Oslo", "population": -5}\n```',  # JSON that fails validation
            'Corrected:\n```json\n{"name": "Oslo", "population": 709000}\n```',
        ],
        capabilities=PLAIN,
    )
    agent = ReActAgent(model, output_type=City, options=AgentOptions(structured_retries=2))
    result, _ = await run(agent, "Oslo?")
    assert result.structured == City(name="Oslo", population=709000)
    assert "holds no JSON object" in model.requests[1].messages[-2].text
    assert "greater than or equal to 0" in model.requests[2].messages[-2].text


async def test_prompted_json_gives_up_after_the_retry_limit_with_the_reason() -> None:
    model = ScriptedModel(["no json", "still none"], capabilities=PLAIN)
    agent = ReActAgent(model, output_type=City, options=AgentOptions(structured_retries=1))
    result, _ = await run(agent, "Oslo?")
    assert result.reason == "STRUCTURED_OUTPUT"
    assert result.structured is None
    assert "no valid structured output in 2 attempts" in (result.structured_error or "")


async def test_prompted_mode_can_be_chosen_for_any_model() -> None:
    model = ScriptedModel(['{"name": "Oslo", "population": 1}'], capabilities=TOOLS_ONLY)
    options = AgentOptions(structured_mode="prompted")
    agent = ReActAgent(model, Toolkit([lookup]), output_type=City, options=options)
    result, _ = await run(agent, "Oslo?")
    assert result.structured == City(name="Oslo", population=1)
    assert [t.name for t in model.requests[0].tools] == ["lookup"]  # its tools stay, no output tool


def test_extract_json_takes_the_first_complete_object() -> None:
    from rxagent.agent.structured import extract_json

    assert extract_json('{"a": 1}') == {"a": 1}
    assert extract_json('noise {not json} then {"a": {"b": [1, 2]}} and {"c": 3}') == {"a": {"b": [1, 2]}}
    assert extract_json('```\n[1, 2]\n```\n```json\n{"ok": true}\n```') == {"ok": True}
    assert extract_json('a list [1, 2] then {"x": "}"}') == {"x": "}"}


@pytest.mark.parametrize("bad", ["", "no braces", "[1, 2]", '{"open": ', "{'single': 'quotes'}"])
def test_extract_json_refuses_text_without_an_object(bad: str) -> None:
    from rxagent.agent.structured import extract_json

    with pytest.raises(ValueError, match="no JSON object"):
        extract_json(bad)
