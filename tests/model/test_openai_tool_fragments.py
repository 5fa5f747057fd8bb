"""Malformed and unusual tool-call fragments of the chat-completions stream, end to end: the chunks the
parser makes of them, the message the fold makes of those, and the events a run streams.

Each case's expected outcome is what rxagent produced before the fragment path was made lean (recorded
from commit 80a52aa, with the generated ids of calls the server sent none for written ``gen0``, ``gen1``…
in order of appearance): a change to that path must give the same chunks, message, events and errors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pytest

from rxagent.agent import AgentOptions, ReActAgent
from rxagent.events import ToolCallArgumentsDelta, ToolCallCompleted, ToolCallStarted
from rxagent.messages import ToolUseBlock
from rxagent.model import ModelError
from rxagent.model._openai_wire import StreamParser
from rxagent.model.sse import SSEDecoder
from rxagent.operators import MessageFold, to_list
from rxagent.tools import Toolkit, tool
from tests.model.openai_server import DONE, OpenAIServer, Reply, chunk, event, make_model, text_chunk


def calls(*fragments: dict[str, Any]) -> str:
    """The data of a chunk whose delta holds ``fragments`` as its ``tool_calls``."""
    return json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": list(fragments)}}]})


def fragment(
    index: object = None, call_id: object = None, name: object = None, arguments: object = None
) -> dict[str, Any]:
    """One ``tool_calls`` entry; ``None`` leaves a field out."""
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    entry: dict[str, Any] = {"function": function}
    if index is not None:
        entry["index"] = index
    if call_id is not None:
        entry["id"] = call_id
    return entry


def finish(reason: str = "tool_calls") -> str:
    return json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})


CASES: dict[str, list[str]] = {
    "plain": [
        calls(fragment(0, "c1", "f", '{"a"')),
        calls(fragment(0, None, None, ": 1}")),
        finish(),
    ],
    "missing_index": [
        calls(fragment(None, "c1", "f", '{"a": ')),
        calls(fragment(None, None, None, "1}")),
        finish(),
    ],
    "two_calls_in_one_chunk_without_index": [
        calls(fragment(None, "c1", "f", '{"a": 1}'), fragment(None, "c2", "g", '{"b": 2}')),
        finish(),
    ],
    "index_not_a_number": [
        calls(fragment("0", "c1", "f", '{"a": 1}')),
        finish(),
    ],
    "id_only_on_a_later_fragment": [
        calls(fragment(0, None, "f", '{"a"')),
        calls(fragment(0, None, None, ": ")),
        calls(fragment(0, "c1", None, "1}")),
        finish(),
    ],
    "no_id_at_all": [
        calls(fragment(0, None, "f", '{"a": 1}')),
        calls(fragment(1, None, "g", "{}")),
        finish(),
    ],
    "empty_ids_and_name_repeated": [
        calls(fragment(0, "", "f", '{"a"')),
        calls(fragment(0, "", "f", ": 1")),
        calls(fragment(0, "", "f", "}")),
        finish(),
    ],
    "id_and_name_repeated": [
        calls(fragment(0, "c1", "f", '{"a"')),
        calls(fragment(0, "c1", "f", ": 1}")),
        finish(),
    ],
    "name_in_pieces": [
        calls(fragment(0, "c1", "get_", "")),
        calls(fragment(0, None, "weather", '{"city": "Lyon"}')),
        finish(),
    ],
    "name_not_a_string": [
        calls(fragment(0, "c1", 5, '{"a": 1}')),
        finish(),
    ],
    "no_function": [
        json.dumps({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1"}]}}]}),
        calls(fragment(0, None, "f", "{}")),
        finish(),
    ],
    "arguments_an_object": [
        calls(fragment(0, "c1", "f", {"a": 1, "b": "é"})),
        finish(),
    ],
    "arguments_a_number_and_null": [
        json.dumps(
            {
                "choices": [
                    {
                        "delta": {
                            "tool_calls": [
                                {"index": 0, "id": "c1", "function": {"name": "f", "arguments": None}}
                            ]
                        }
                    }
                ]
            }
        ),
        calls(fragment(0, None, None, 7)),
        finish(),
    ],
    "interleaved_by_index": [
        calls(fragment(0, "c1", "f", '{"a"')),
        calls(fragment(1, "c2", "g", '{"b"')),
        calls(fragment(0, None, None, ": 1}")),
        calls(fragment(1, None, None, ": 2}")),
        finish(),
    ],
    "interleaved_at_one_index_by_id": [
        calls(fragment(0, "c1", "f", '{"a"')),
        calls(fragment(0, "c2", "g", '{"b"')),
        calls(fragment(0, "c1", None, ": 1}")),
        calls(fragment(0, "c2", None, ": 2}")),
        finish(),
    ],
    "arguments_invalid_json": [
        calls(fragment(0, "c1", "f", '{"a": ')),
        finish(),
    ],
    "arguments_cut_off_by_length": [
        calls(fragment(0, "c1", "f", '{"a": "lo')),
        finish("length"),
    ],
    "arguments_not_an_object": [
        calls(fragment(0, "c1", "f", "[1, 2]")),
        finish(),
    ],
    "no_name": [
        calls(fragment(0, "c1", None, '{"a": 1}')),
        finish(),
    ],
    "no_arguments": [
        calls(fragment(0, "c1", "f", None)),
        finish(),
    ],
    "text_and_a_call_in_one_chunk": [
        json.dumps(
            {
                "choices": [
                    {"delta": {"content": "Let me see. ", "tool_calls": [fragment(0, "c1", "f", '{"a": 1}')]}}
                ]
            }
        ),
        finish(),
    ],
    "tool_calls_not_a_list": [
        json.dumps({"choices": [{"delta": {"tool_calls": {"index": 0}}}]}),
    ],
    "function_not_an_object": [
        calls(fragment(0, "c1", "f", "{}")),
        json.dumps({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": "f"}]}}]}),
    ],
}


class Ids:
    """Writes the ids rxagent generated (``call_…`` with 24 hex digits) as ``gen0``, ``gen1``, … in order
    of appearance, so outcomes compare across runs."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}

    def __call__(self, call_id: str | None) -> str | None:
        if call_id is None or not re.fullmatch(r"call_[0-9a-f]{24}", call_id):
            return call_id
        return self._seen.setdefault(call_id, f"gen{len(self._seen)}")


def block_outcome(block: ToolUseBlock, ids: Ids) -> tuple[object, ...]:
    return (ids(block.id), block.name, block.input, block.raw_arguments, block.state, block.error)


def decoded(datas: Sequence[str]) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]], str | None]:
    """The tool-call fragments of each chunk the parser makes of ``datas``, the final message's tool calls,
    and the error that stopped the stream (its class and message), if any."""
    body = b"".join(event(data) for data in datas)
    parser = StreamParser()
    chunks: list[Any] = []
    problem = parser.feed_all(SSEDecoder().feed(body), chunks)
    fold = MessageFold()
    for each in chunks:
        fold.add(each)
    ids = Ids()
    fragments = [(d.index, d.id, d.name, d.arguments) for each in chunks for d in each.tool_calls]
    blocks = [block_outcome(c, ids) for c in fold.message().tool_calls]
    error = None if problem is None else f"{type(problem).__name__}: {problem}"
    return fragments, blocks, error


@tool
def f(a: int = 0) -> int:
    """Return a.

    Args:
        a: a number.
    """
    return a


async def streamed(server: OpenAIServer, datas: Sequence[str]) -> tuple[list[tuple[object, ...]], ...]:
    """The tool-call events of a run whose first model call streams ``datas`` (its second answers)."""
    server.script(
        Reply.sse(chunk({"role": "assistant", "content": None}), *(event(d) for d in datas), DONE),
        Reply.sse(text_chunk("done"), chunk({}, finish_reason="stop"), DONE),
    )
    async with make_model(server) as model:
        agent = ReActAgent(model, Toolkit([f]), options=AgentOptions(max_iters=2))
        events = await to_list(agent.stream_events("go"))
    ids = Ids()
    started = [(e.index, ids(e.call_id), e.name) for e in events if isinstance(e, ToolCallStarted)]
    arguments = [
        (e.index, ids(e.call_id), e.fragment) for e in events if isinstance(e, ToolCallArgumentsDelta)
    ]
    completed = [block_outcome(e.call, ids) for e in events if isinstance(e, ToolCallCompleted)]
    return started, arguments, completed


DECODED: dict[str, tuple[list[tuple[object, ...]], list[tuple[object, ...]], str | None]] = {
    "arguments_a_number_and_null": (
        [(0, "c1", "f", ""), (0, None, None, "7")],
        [("c1", "f", None, "7", "invalid", "the tool call's arguments must be a JSON object, got int")],
        None,
    ),
    "arguments_an_object": (
        [(0, "c1", "f", '{"a": 1, "b": "é"}')],
        [("c1", "f", {"a": 1, "b": "é"}, '{"a": 1, "b": "é"}', "complete", None)],
        None,
    ),
    "arguments_cut_off_by_length": (
        [(0, "c1", "f", '{"a": "lo')],
        [
            (
                "c1",
                "f",
                None,
                '{"a": "lo',
                "invalid",
                "the tool call's arguments are not valid JSON (cut off by the output "
                "token limit): Unterminated string starting at at character 6 of 9",
            )
        ],
        None,
    ),
    "arguments_invalid_json": (
        [(0, "c1", "f", '{"a": ')],
        [
            (
                "c1",
                "f",
                None,
                '{"a": ',
                "invalid",
                "the tool call's arguments are not valid JSON: Expecting value at character 6 of 6",
            )
        ],
        None,
    ),
    "arguments_not_an_object": (
        [(0, "c1", "f", "[1, 2]")],
        [("c1", "f", None, "[1, 2]", "invalid", "the tool call's arguments must be a JSON object, got list")],
        None,
    ),
    "empty_ids_and_name_repeated": (
        [(0, None, "f", '{"a"'), (0, None, None, ": 1"), (0, None, None, "}")],
        [("gen0", "f", {"a": 1}, '{"a": 1}', "complete", None)],
        None,
    ),
    "function_not_an_object": (
        [(0, "c1", "f", "{}")],
        [("c1", "f", {}, "{}", "complete", None)],
        "MalformedStreamError: unexpected chunk shape (Expected `object | null`, got "
        "`str` - at `$.choices[0].delta.tool_calls[0].function`) at stream line 3: "
        '\'{"choices": [{"delta": {"tool_calls": [{"index": 0, "function": "f"}]}}]}\'',
    ),
    "id_and_name_repeated": (
        [(0, "c1", "f", '{"a"'), (0, "c1", None, ": 1}")],
        [("c1", "f", {"a": 1}, '{"a": 1}', "complete", None)],
        None,
    ),
    "id_only_on_a_later_fragment": (
        [(0, None, "f", '{"a"'), (0, None, None, ": "), (0, "c1", None, "1}")],
        [("c1", "f", {"a": 1}, '{"a": 1}', "complete", None)],
        None,
    ),
    "index_not_a_number": (
        [(0, "c1", "f", '{"a": 1}')],
        [("c1", "f", {"a": 1}, '{"a": 1}', "complete", None)],
        None,
    ),
    "interleaved_at_one_index_by_id": (
        [(0, "c1", "f", '{"a"'), (0, "c2", "g", '{"b"'), (0, "c1", None, ": 1}"), (0, "c2", None, ": 2}")],
        [
            ("c1", "f", {"a": 1}, '{"a": 1}', "complete", None),
            ("c2", "g", {"b": 2}, '{"b": 2}', "complete", None),
        ],
        None,
    ),
    "interleaved_by_index": (
        [(0, "c1", "f", '{"a"'), (1, "c2", "g", '{"b"'), (0, None, None, ": 1}"), (1, None, None, ": 2}")],
        [
            ("c1", "f", {"a": 1}, '{"a": 1}', "complete", None),
            ("c2", "g", {"b": 2}, '{"b": 2}', "complete", None),
        ],
        None,
    ),
    "missing_index": (
        [(0, "c1", "f", '{"a": '), (0, None, None, "1}")],
        [("c1", "f", {"a": 1}, '{"a": 1}', "complete", None)],
        None,
    ),
    "name_in_pieces": (
        [(0, "c1", "get_", ""), (0, None, "weather", '{"city": "Lyon"}')],
        [("c1", "get_weather", {"city": "Lyon"}, '{"city": "Lyon"}', "complete", None)],
        None,
    ),
    "name_not_a_string": (
        [(0, "c1", None, '{"a": 1}')],
        [("c1", "", None, '{"a": 1}', "invalid", "the model sent a tool call without a tool name")],
        None,
    ),
    "no_arguments": ([(0, "c1", "f", "")], [("c1", "f", {}, "", "complete", None)], None),
    "no_function": (
        [(0, "c1", None, ""), (0, None, "f", "{}")],
        [("c1", "f", {}, "{}", "complete", None)],
        None,
    ),
    "no_id_at_all": (
        [(0, None, "f", '{"a": 1}'), (1, None, "g", "{}")],
        [("gen0", "f", {"a": 1}, '{"a": 1}', "complete", None), ("gen1", "g", {}, "{}", "complete", None)],
        None,
    ),
    "no_name": (
        [(0, "c1", None, '{"a": 1}')],
        [("c1", "", None, '{"a": 1}', "invalid", "the model sent a tool call without a tool name")],
        None,
    ),
    "plain": (
        [(0, "c1", "f", '{"a"'), (0, None, None, ": 1}")],
        [("c1", "f", {"a": 1}, '{"a": 1}', "complete", None)],
        None,
    ),
    "text_and_a_call_in_one_chunk": (
        [(0, "c1", "f", '{"a": 1}')],
        [("c1", "f", {"a": 1}, '{"a": 1}', "complete", None)],
        None,
    ),
    "tool_calls_not_a_list": (
        [],
        [],
        "MalformedStreamError: unexpected chunk shape (Expected `array | null`, got "
        '`object` - at `$.choices[0].delta.tool_calls`) at stream line 1: \'{"choices": '
        '[{"delta": {"tool_calls": {"index": 0}}}]}\'',
    ),
    "two_calls_in_one_chunk_without_index": (
        [(0, "c1", "f", '{"a": 1}'), (1, "c2", "g", '{"b": 2}')],
        [
            ("c1", "f", {"a": 1}, '{"a": 1}', "complete", None),
            ("c2", "g", {"b": 2}, '{"b": 2}', "complete", None),
        ],
        None,
    ),
}
STREAMED: dict[str, tuple[list[tuple[object, ...]], ...]] = {
    "arguments_a_number_and_null": (
        [(0, "c1", "f")],
        [(0, "c1", "7")],
        [("c1", "f", None, "7", "invalid", "the tool call's arguments must be a JSON object, got int")],
    ),
    "arguments_an_object": (
        [(0, "c1", "f")],
        [(0, "c1", '{"a": 1, "b": "é"}')],
        [("c1", "f", {"a": 1, "b": "é"}, '{"a": 1, "b": "é"}', "complete", None)],
    ),
    "arguments_cut_off_by_length": (
        [(0, "c1", "f")],
        [(0, "c1", '{"a": "lo')],
        [
            (
                "c1",
                "f",
                None,
                '{"a": "lo',
                "invalid",
                "the tool call's arguments are not valid JSON (cut off by the output "
                "token limit): Unterminated string starting at at character 6 of 9",
            )
        ],
    ),
    "arguments_invalid_json": (
        [(0, "c1", "f")],
        [(0, "c1", '{"a": ')],
        [
            (
                "c1",
                "f",
                None,
                '{"a": ',
                "invalid",
                "the tool call's arguments are not valid JSON: Expecting value at character 6 of 6",
            )
        ],
    ),
    "arguments_not_an_object": (
        [(0, "c1", "f")],
        [(0, "c1", "[1, 2]")],
        [("c1", "f", None, "[1, 2]", "invalid", "the tool call's arguments must be a JSON object, got list")],
    ),
    "empty_ids_and_name_repeated": (
        [(0, "gen0", "f")],
        [(0, "gen0", '{"a"'), (0, "gen0", ": 1"), (0, "gen0", "}")],
        [("gen0", "f", {"a": 1}, '{"a": 1}', "complete", None)],
    ),
    "id_and_name_repeated": (
        [(0, "c1", "f")],
        [(0, "c1", '{"a"'), (0, "c1", ": 1}")],
        [("c1", "f", {"a": 1}, '{"a": 1}', "complete", None)],
    ),
    "id_only_on_a_later_fragment": (
        [(0, "gen0", "f")],
        [(0, "gen0", '{"a"'), (0, "gen0", ": "), (0, "c1", "1}")],
        [("c1", "f", {"a": 1}, '{"a": 1}', "complete", None)],
    ),
    "index_not_a_number": (
        [(0, "c1", "f")],
        [(0, "c1", '{"a": 1}')],
        [("c1", "f", {"a": 1}, '{"a": 1}', "complete", None)],
    ),
    "interleaved_at_one_index_by_id": (
        [(0, "c1", "f"), (0, "c2", "g")],
        [(0, "c1", '{"a"'), (0, "c2", '{"b"'), (0, "c1", ": 1}"), (0, "c2", ": 2}")],
        [
            ("c1", "f", {"a": 1}, '{"a": 1}', "complete", None),
            ("c2", "g", {"b": 2}, '{"b": 2}', "complete", None),
        ],
    ),
    "interleaved_by_index": (
        [(0, "c1", "f"), (1, "c2", "g")],
        [(0, "c1", '{"a"'), (1, "c2", '{"b"'), (0, "c1", ": 1}"), (1, "c2", ": 2}")],
        [
            ("c1", "f", {"a": 1}, '{"a": 1}', "complete", None),
            ("c2", "g", {"b": 2}, '{"b": 2}', "complete", None),
        ],
    ),
    "missing_index": (
        [(0, "c1", "f")],
        [(0, "c1", '{"a": '), (0, "c1", "1}")],
        [("c1", "f", {"a": 1}, '{"a": 1}', "complete", None)],
    ),
    "name_in_pieces": (
        [(0, "c1", "get_")],
        [(0, "c1", '{"city": "Lyon"}')],
        [("c1", "get_weather", {"city": "Lyon"}, '{"city": "Lyon"}', "complete", None)],
    ),
    "name_not_a_string": (
        [(0, "c1", None)],
        [(0, "c1", '{"a": 1}')],
        [("c1", "", None, '{"a": 1}', "invalid", "the model sent a tool call without a tool name")],
    ),
    "no_arguments": ([(0, "c1", "f")], [], [("c1", "f", {}, "", "complete", None)]),
    "no_function": ([(0, "c1", None)], [(0, "c1", "{}")], [("c1", "f", {}, "{}", "complete", None)]),
    "no_id_at_all": (
        [(0, "gen0", "f"), (1, "gen1", "g")],
        [(0, "gen0", '{"a": 1}'), (1, "gen1", "{}")],
        [("gen0", "f", {"a": 1}, '{"a": 1}', "complete", None), ("gen1", "g", {}, "{}", "complete", None)],
    ),
    "no_name": (
        [(0, "c1", None)],
        [(0, "c1", '{"a": 1}')],
        [("c1", "", None, '{"a": 1}', "invalid", "the model sent a tool call without a tool name")],
    ),
    "plain": (
        [(0, "c1", "f")],
        [(0, "c1", '{"a"'), (0, "c1", ": 1}")],
        [("c1", "f", {"a": 1}, '{"a": 1}', "complete", None)],
    ),
    "text_and_a_call_in_one_chunk": (
        [(0, "c1", "f")],
        [(0, "c1", '{"a": 1}')],
        [("c1", "f", {"a": 1}, '{"a": 1}', "complete", None)],
    ),
    "two_calls_in_one_chunk_without_index": (
        [(0, "c1", "f"), (1, "c2", "g")],
        [(0, "c1", '{"a": 1}'), (1, "c2", '{"b": 2}')],
        [
            ("c1", "f", {"a": 1}, '{"a": 1}', "complete", None),
            ("c2", "g", {"b": 2}, '{"b": 2}', "complete", None),
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_parser_and_the_fold_make_what_they_made_before(case: str) -> None:
    assert decoded(CASES[case]) == DECODED[case]


@pytest.mark.parametrize("case", sorted(STREAMED))
async def test_a_run_streams_the_tool_call_events_it_streamed_before(server: OpenAIServer, case: str) -> None:
    assert await streamed(server, CASES[case]) == STREAMED[case]


def test_a_bad_fragment_shape_is_a_model_error() -> None:
    for case in ("tool_calls_not_a_list", "function_not_an_object"):
        parser = StreamParser()
        body = b"".join(event(data) for data in CASES[case])
        assert isinstance(parser.feed_all(SSEDecoder().feed(body), []), ModelError)
