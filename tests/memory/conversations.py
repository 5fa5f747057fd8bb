"""Conversation builders for the memory tests: turns, tool exchanges of a chosen size, a run context."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from rxagent.context import RunContext
from rxagent.messages import Msg, TextBlock, ToolResultBlock, ToolUseBlock
from rxagent.requests import ChatRequest, ToolSchema
from rxagent.state import AgentState

SYSTEM = Msg.system("You are a careful assistant. Answer briefly.")


def filler(tokens: int, word: str = "data") -> str:
    """About ``tokens`` tokens of text (``" data"`` is one cl100k token)."""
    return (word + " ") * tokens


def exchange(call_id: str, size: int, *, tool: str = "fetch", page: int = 0) -> list[Msg]:
    """An assistant message calling ``tool`` and the tool message with a result of about ``size`` tokens."""
    call = ToolUseBlock(id=call_id, name=tool, input={"page": page})
    result = ToolResultBlock(tool_use_id=call_id, name=tool, output=(TextBlock(text=filler(size)),))
    return [Msg(role="assistant", content=(call,)), Msg.from_tool_results(result)]


def turn(index: int, *, rounds: int = 1, size: int = 300, user_words: int = 10) -> list[Msg]:
    """A user message, ``rounds`` tool exchanges with results of ``size`` tokens, and an answer."""
    messages = [Msg.user(f"Question {index}: " + filler(user_words, "why"))]
    for r in range(rounds):
        messages += exchange(f"call_{index}_{r}", size, page=r)
    messages.append(Msg.assistant(f"Answer {index}."))
    return messages


def context(state: AgentState, *, session: str = "s1", user: str | None = "ada") -> RunContext:
    return RunContext(user_id=user, session_id=session, run_id="run_test", state=state)


def request_for(
    state: AgentState,
    *,
    tools: Sequence[ToolSchema] = (),
    trailing: Sequence[Msg] = (),
    max_tokens: int | None = None,
) -> ChatRequest:
    """The request an agent with system prompt :data:`SYSTEM` would build from ``state``."""
    return ChatRequest(
        messages=(SYSTEM, *state.messages, *trailing), tools=tuple(tools), max_tokens=max_tokens
    )


def assert_pairs_intact(messages: Sequence[Msg]) -> None:
    """Every tool result answers a call of the assistant message just before it; every call is answered."""
    for index, message in enumerate(messages):
        calls = {c.id for c in message.tool_calls}
        if calls:
            following = messages[index + 1] if index + 1 < len(messages) else None
            assert following is not None, "a tool call ends the request without its result"
            assert following.role == "tool", f"call(s) {calls} not followed by their results"
            assert {r.tool_use_id for r in following.tool_results} == calls
        if message.role == "tool":
            assert index > 0, "a tool message opens the history"
            previous = messages[index - 1]
            assert previous.role == "assistant", "a tool message does not follow its assistant message"
            assert {r.tool_use_id for r in message.tool_results} == {c.id for c in previous.tool_calls}


def bag_of_words(text: str, dimension: int = 64) -> list[float]:
    """A deterministic embedding: counts of hashed words (texts sharing words are similar)."""
    vector = [0.0] * dimension
    for raw in text.lower().split():
        word = raw.strip(".,:;!?()[]{}\"'`")
        if len(word) > 2:
            vector[zlib.crc32(word.encode()) % dimension] += 1.0
    return vector
