"""The session benches' agent: a scripted tool loop with no network, so what they measure is rxagent's.

Each turn, the model (a :class:`~rxagent.model.scripted.FunctionModel`) calls the given tools in one batch
after the user's message, then answers once their results are in. Usage is given, so the test model
estimates nothing from the history; answers stream in one delta. Payloads are message-sized.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rxagent.agent import ReActAgent
from rxagent.model.scripted import FunctionModel, ScriptedResponse, ScriptedToolCall, ScriptStep
from rxagent.model.types import ChatRequest, Usage
from rxagent.session import SessionStore
from rxagent.tools import Tool, Toolkit, tool

__all__ = ["FILLER", "TOOLS", "agent_on", "question"]

TOOLS = ("lookup", "price", "stock")
FILLER = "the quick brown fox jumps over the lazy dog " * 4
USAGE = Usage(input_tokens=100, output_tokens=20)


def _tool(name: str, answer: str, parallel: bool) -> Tool:
    async def body(item: str) -> str:
        return f"{item}: {answer}. {FILLER}"

    body.__doc__ = f"The {name} of an item.\n\nArgs:\n    item: the item.\n"
    return tool(name=name, concurrency_safe=parallel)(body)


_ANSWERS = {"lookup": "found", "price": "12.50 EUR", "stock": "42 left"}


def _respond(names: Sequence[str]) -> Callable[[ChatRequest], ScriptStep]:
    def respond(request: ChatRequest) -> ScriptStep:
        messages = request.messages
        if messages[-1].role == "user":
            n = len(messages)  # unique per request within a session, so call ids stay unique
            calls = [ScriptedToolCall(name, {"item": f"item {n}"}, id=f"c{n}-{name}") for name in names]
            return ScriptedResponse(tool_calls=calls, usage=USAGE)
        return ScriptedResponse(text=f"Here is what I found. {FILLER}", usage=USAGE, chunk_size=1000)

    return respond


class _Unrecorded(list[ChatRequest]):
    """A request log that keeps nothing: the test model records every request (a real one keeps none,
    and thousands of recorded requests would be measured as the sessions' memory)."""

    def append(self, request: ChatRequest, /) -> None:
        del request


def agent_on(store: SessionStore, tools: Sequence[str] = TOOLS, *, parallel: bool = True) -> ReActAgent:
    """An agent on ``store`` whose every turn calls ``tools`` (at once when ``parallel``), then answers."""
    toolkit = Toolkit([_tool(name, _ANSWERS[name], parallel) for name in tools])
    model = FunctionModel(_respond(tools))
    model.requests = _Unrecorded()
    return ReActAgent(model, toolkit, store=store)


def question(turn: int) -> str:
    """The user's message of turn ``turn``."""
    return f"Turn {turn}: what about item {turn}? {FILLER}"
