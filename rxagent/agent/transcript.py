"""Repairing a damaged conversation before it is sent, so a bad history never kills a session.

Providers reject a conversation in which an assistant's tool call has no result, or a result answers no
call. Crashes, cancellations and hand-edited histories produce both. Before every request:

- a call with no result gets an ``error`` result saying no result was recorded, placed where it belongs
  (right after the assistant message, merged into the tool message that follows, if any);
- a result whose call is not in the preceding assistant message is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from rxagent.messages import Msg, TextBlock, ToolResultBlock

__all__ = ["MISSING_RESULT", "repair_transcript"]

MISSING_RESULT = "No result was recorded for this call (it was interrupted or lost); call it again if needed."


def _missing(call_id: str, name: str) -> ToolResultBlock:
    return ToolResultBlock(
        tool_use_id=call_id, name=name, output=(TextBlock(text=MISSING_RESULT),), status="error"
    )


def repair_transcript(messages: Sequence[Msg]) -> list[Msg]:
    """``messages`` with orphan calls answered and orphan results dropped; unchanged messages are reused.

    Returns the same message objects where nothing needed repair (so their cached wire forms stay valid).
    """
    repaired: list[Msg] = []
    open_calls: dict[str, str] = {}  # id -> name, for the latest assistant message's calls
    index = 0
    while index < len(messages):
        msg = messages[index]
        if msg.role == "assistant":
            open_calls = {call.id: call.name for call in msg.tool_calls}
            repaired.append(msg)
            following = messages[index + 1] if index + 1 < len(messages) else None
            if open_calls and (following is None or following.role != "tool"):
                repaired.append(Msg.from_tool_results(*(_missing(i, n) for i, n in open_calls.items())))
                open_calls = {}
            index += 1
            continue
        if msg.role == "tool":
            kept = [r for r in msg.tool_results if r.tool_use_id in open_calls]
            answered = {r.tool_use_id for r in kept}
            missing = [_missing(i, n) for i, n in open_calls.items() if i not in answered]
            others = [b for b in msg.content if not isinstance(b, ToolResultBlock)]
            if len(kept) == len(msg.tool_results) and not missing and not others:
                repaired.append(msg)
            elif kept or missing:
                order = {call_id: position for position, call_id in enumerate(open_calls)}
                results = sorted([*kept, *missing], key=lambda r: order[r.tool_use_id])
                repaired.append(msg.model_copy(update={"content": tuple(results)}))
            open_calls = {}
            index += 1
            continue
        open_calls = {}
        repaired.append(msg)
        index += 1
    return repaired
