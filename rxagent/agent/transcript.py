"""Repairing a damaged conversation before it is sent, so a bad history never kills a session.

Providers reject a conversation in which an assistant's tool call has no result, or a result answers no
call. Crashes, cancellations and hand-edited histories produce both. Before every request:

- a call with no result gets an ``error`` result saying no result was recorded, placed where it belongs
  (right after the assistant message, merged into the tool message that follows, if any);
- a result whose call is not in the preceding assistant message is dropped.

:class:`RepairedHistory` keeps the repaired form of a growing history between requests, so that each
request repairs only what was appended since the last one.
"""

from __future__ import annotations

from collections.abc import Sequence

from rxagent.messages import Msg, TextBlock, ToolResultBlock

__all__ = ["MISSING_RESULT", "RepairedHistory", "repair_transcript"]

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
            results = msg.tool_results
            kept = [r for r in results if r.tool_use_id in open_calls]
            answered = {r.tool_use_id for r in kept}
            missing = [_missing(i, n) for i, n in open_calls.items() if i not in answered]
            if len(kept) == len(results) == len(msg.content) and not missing:  # nothing to mend
                repaired.append(msg)
            elif kept or missing:
                order = {call_id: position for position, call_id in enumerate(open_calls)}
                mended = sorted([*kept, *missing], key=lambda r: order[r.tool_use_id])
                repaired.append(msg.model_copy(update={"content": tuple(mended)}))
            open_calls = {}
            index += 1
            continue
        open_calls = {}
        repaired.append(msg)
        index += 1
    return repaired


class RepairedHistory:
    """The repaired form of one conversation's history, extended as the history grows.

    Repair carries state only across an assistant message with tool calls, so the repaired form of a
    prefix that does not end in one is final: this keeps that prefix repaired, in a list it extends in
    place, and repairs only the rest at each request. A request for turn *N* then repairs what turn *N*
    added, and copies the history once, into the request's tuple.

    Each call checks, with one list comparison in C (identical objects compare without a Python call),
    that the history still begins with the messages repaired; if not (a message edited or replaced, a
    shorter or another history), the repair starts over.

    Example:
        >>> history = [Msg.user("hi"), Msg.assistant("hello")]
        >>> repaired = RepairedHistory()
        >>> prefix, rest = repaired.parts(history)
        >>> [m.text for m in (*prefix, *rest)]
        ['hi', 'hello']
    """

    __slots__ = ("_originals", "_prefix")

    def __init__(self) -> None:
        self._originals: list[Msg] = []
        """The history messages whose repair is final, as the history held them."""
        self._prefix: list[Msg] = []
        """Their repaired form."""

    def parts(self, history: Sequence[Msg]) -> tuple[Sequence[Msg], list[Msg]]:
        """``history`` repaired, as two parts: the repaired prefix kept between calls (read it, never
        change it: it is extended in place by later calls) and the repaired rest (a new list).

        Costs the repair of what was appended since the last call, plus the check in C of the prefix.
        """
        originals = self._originals
        length = len(originals)
        head = history[:length]
        if (head if type(head) is list else list(head)) != originals:
            # Another history, or an edited one: start over (in new lists; the old ones stay as they were).
            length = 0
            self._originals, self._prefix = [], []
        end = len(history)
        while end > length and history[end - 1].role == "assistant" and history[end - 1].tool_calls:
            end -= 1
        if end > length:
            appended = history[length:end]
            self._originals.extend(appended)
            self._prefix.extend(repair_transcript(appended))
            length = end
        if length == len(history):  # the usual request: the history ends with the results of its calls
            return self._prefix, []
        return self._prefix, repair_transcript(history[length:])
