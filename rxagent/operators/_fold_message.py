"""Fold a model's chunk stream into the assistant message.

The accumulator is the hot path of every model call, so it does the least per chunk: it appends
fragments to lists (joined once at the end, so a 200 000-character argument streamed one character at a
time costs linear time, not quadratic) and parses tool-call arguments only when the stream is complete.

The message's blocks come in a fixed order: thinking, text, tool calls. Thinking streamed with signatures
(``ChatChunk.thinking_signature``) becomes one :class:`~rxagent.messages.ThinkingBlock` per signature, and a
withheld block (``ChatChunk.redacted_thinking``) one of its own, in the order they came: a provider that
signs its reasoning requires those blocks back exactly as they were.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, cast

from pydantic import JsonValue
from reactivex import Observable, abc

from rxagent.chunks import ChatChunk, FinishReason, ToolCallDelta, Usage
from rxagent.messages import (
    ContentBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    mend_surrogates,
    new_id,
)
from rxagent.operators._frame import Frame
from rxagent.operators._source import Source
from rxagent.operators._typing import Operator

__all__ = ["MessageFold", "fold_message"]


class _CallParts:
    """One tool call being streamed: its id, name and argument fragments."""

    __slots__ = ("arguments", "generated", "id", "name")

    def __init__(self, call_id: str | None) -> None:
        self.id = call_id
        # Used when the provider never sends an id; fixed now so events and the message agree on it.
        self.generated = None if call_id else new_id("call")
        self.name = ""
        self.arguments: list[str] = []

    @property
    def resolved_id(self) -> str:
        """The provider's id, else the generated one."""
        return self.id or self.generated or ""

    def add(self, delta: ToolCallDelta) -> None:
        name = delta.name
        # Some providers repeat the full name on every fragment; others stream it in pieces.
        if name and name != self.name:
            self.name = name if not self.name else self.name + name
        if delta.arguments:
            self.arguments.append(delta.arguments)

    def block(self, finish_reason: FinishReason | None, *, final: bool) -> ToolUseBlock:
        raw = "".join(self.arguments)
        call_id = self.resolved_id
        if not final:
            # No arguments to walk: the validating constructor, which costs less than `model_construct`
            # (Python), once per snapshot.
            return ToolUseBlock(
                id=call_id, name=self.name, input=None, raw_arguments=raw, state="streaming", error=None
            )
        error: str | None = None
        parsed: Any = None
        if not self.name:
            error = "the model sent a tool call without a tool name"
        elif not raw.strip():
            if finish_reason == "length":
                error = "the tool call's arguments were cut off by the output token limit"
            else:
                parsed = {}  # a call with no arguments: the provider sent none at all
        else:
            try:
                parsed = json.loads(raw)
            except json.JSONDecodeError as exc:
                cut = " (cut off by the output token limit)" if finish_reason == "length" else ""
                error = (
                    f"the tool call's arguments are not valid JSON{cut}: {exc.msg} at character {exc.pos} "
                    f"of {len(raw)}"
                )
            else:
                if not isinstance(parsed, dict):
                    error = f"the tool call's arguments must be a JSON object, got {type(parsed).__name__}"
        if error is not None:
            return ToolUseBlock(
                id=call_id, name=self.name, input=None, raw_arguments=raw, state="invalid", error=error
            )
        # Built without validation: `parsed` is what json.loads made of the text, and validating a call's
        # arguments walks them all (a millisecond for a thousand items) and refuses deep nesting.
        arguments = cast("dict[str, JsonValue]", parsed)
        return ToolUseBlock.model_construct(
            id=call_id, name=self.name, input=arguments, raw_arguments=raw, state="complete", error=None
        )


class MessageFold:
    """The mutable accumulator behind :func:`fold_message`; one per subscription.

    Use it directly to fold chunks outside a stream (``fold.add(chunk)`` … ``fold.message()``).
    """

    __slots__ = (
        "_by_id",
        "_by_index",
        "_calls",
        "_created_at",
        "_text",
        "_thinking",
        "_thoughts",
        "chunks",
        "finish_reason",
        "message_id",
        "model",
        "usage",
    )

    def __init__(self) -> None:
        self.message_id = new_id("msg")
        self._created_at = datetime.now(UTC)
        self._text: list[str] = []
        self._thinking: list[str] = []  # the thinking block still open: not closed by a signature yet
        self._thoughts: list[ThinkingBlock] = []  # closed thinking blocks (signed or withheld), in order
        self._calls: list[_CallParts] = []
        self._by_id: dict[str, _CallParts] = {}
        self._by_index: dict[int, _CallParts] = {}
        self.usage: Usage | None = None
        self.finish_reason: FinishReason | None = None
        self.model: str | None = None
        """The answering model's name, when a chunk said it."""
        self.chunks = 0

    @property
    def call_count(self) -> int:
        """How many tool calls have started so far."""
        return len(self._calls)

    def call_id_of(self, delta: ToolCallDelta) -> str:
        """The id of the call a delta (already added) belongs to: the provider's, or a generated one."""
        call = self._by_id.get(delta.id) if delta.id else None
        if call is None:
            call = self._by_index.get(delta.index)
        return call.resolved_id if call is not None else ""

    def add(self, chunk: ChatChunk) -> None:
        """Take one chunk into the message."""
        self.chunks += 1
        if chunk.text:
            self._text.append(chunk.text)
        if chunk.thinking:
            self._thinking.append(chunk.thinking)
        if chunk.thinking_signature is not None or chunk.redacted_thinking is not None:
            self._close_thinking(chunk.thinking_signature, chunk.redacted_thinking)
        if chunk.tool_calls:
            by_index = self._by_index
            for delta in chunk.tool_calls:
                # A fragment without an id continues the call at its index (`_call_for`'s last case), as
                # nearly every fragment of a call's arguments does: one lookup.
                call = None if delta.id else by_index.get(delta.index)
                (call or self._call_for(delta)).add(delta)
        if chunk.usage is not None:
            self._add_usage(chunk.usage)
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        if chunk.model is not None:
            self.model = chunk.model

    def _close_thinking(self, signature: str | None, redacted: str | None) -> None:
        if signature is not None or self._thinking:
            # A withheld block after unsigned thinking closes that thinking first, to keep the order.
            thinking = mend_surrogates("".join(self._thinking))
            self._thinking = []
            closed = ThinkingBlock.model_construct(
                thinking=thinking, signature=signature or None, redacted_data=None
            )
            self._thoughts.append(closed)
        if redacted is not None:
            self._thoughts.append(
                ThinkingBlock.model_construct(thinking="", signature=None, redacted_data=redacted)
            )

    def _call_for(self, delta: ToolCallDelta) -> _CallParts:
        # Key by id whenever the provider sends one: some providers reuse an index for different calls
        # (parallel calls streamed interleaved, all at index 0), and an id is the only thing that tells
        # them apart. Fragments without an id continue the latest call seen at their index.
        call_id = delta.id
        if call_id:
            call = self._by_id.get(call_id)
            if call is None:
                current = self._by_index.get(delta.index)
                if current is not None and current.id is None:
                    # The id arrived after id-less fragments of the same call: adopt it.
                    current.id = call_id
                    call = current
                else:
                    call = _CallParts(call_id)
                    self._calls.append(call)
                self._by_id[call_id] = call
            self._by_index[delta.index] = call
            return call
        call = self._by_index.get(delta.index)
        if call is None:
            call = _CallParts(None)
            self._calls.append(call)
            self._by_index[delta.index] = call
        return call

    def _add_usage(self, usage: Usage) -> None:
        # Providers report usage cumulatively (once at the end, or a running total per chunk, or input
        # first and output last): the largest value of each field is the call's usage in every case.
        current = self.usage
        if current is None:
            self.usage = Usage(
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.reasoning_tokens,
                usage.cache_write_tokens,
            )
            return
        current.input_tokens = max(current.input_tokens, usage.input_tokens)
        current.output_tokens = max(current.output_tokens, usage.output_tokens)
        current.cache_read_tokens = max(current.cache_read_tokens, usage.cache_read_tokens)
        current.reasoning_tokens = max(current.reasoning_tokens, usage.reasoning_tokens)
        current.cache_write_tokens = max(current.cache_write_tokens, usage.cache_write_tokens)

    def _blocks(self, *, final: bool) -> tuple[ContentBlock, ...]:
        blocks: list[ContentBlock] = [*self._thoughts]
        if self._thinking:
            thinking = mend_surrogates("".join(self._thinking))
            open_block = ThinkingBlock.model_construct(thinking=thinking, signature=None, redacted_data=None)
            blocks.append(open_block)
        if self._text:
            blocks.append(TextBlock.model_construct(text=mend_surrogates("".join(self._text))))
        blocks.extend(call.block(self.finish_reason, final=final) for call in self._calls)
        return tuple(blocks)

    def _metadata(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {}
        if self.finish_reason is not None:
            metadata["finish_reason"] = self.finish_reason
        if self.usage is not None:
            metadata["usage"] = self.usage.to_json()
        if self.model is not None:
            metadata["model"] = self.model
        return metadata

    def snapshot(self) -> Msg:
        """The message so far; tool calls still streaming have ``state="streaming"`` and no ``input``."""
        return Msg.model_construct(
            id=self.message_id,
            role="assistant",
            name=None,
            content=self._blocks(final=False),
            metadata={},
            created_at=self._created_at,
        )

    def message(self) -> Msg:
        """The final assistant message: text, thinking, parsed tool calls; usage, finish reason and the
        answering model (when a chunk named it) in its metadata."""
        return Msg.model_construct(
            id=self.message_id,
            role="assistant",
            name=None,
            content=self._blocks(final=True),
            metadata=self._metadata(),
            created_at=self._created_at,
        )


class _Folding(Frame[ChatChunk, Msg]):
    """One subscription of :func:`fold_message`: its accumulator in a slot, each chunk taken by ``on_next``
    itself rather than through ``Frame.each`` (one object per subscription and no closures; a chunk costs
    one call into the fold)."""

    __slots__ = ("_fold", "_snapshots")

    def __init__(
        self, observer: abc.ObserverBase[Msg], scheduler: abc.SchedulerBase | None, snapshots: bool
    ) -> None:
        super().__init__(observer, scheduler)
        self._fold = MessageFold()
        self._snapshots = snapshots

    def on_next(self, value: ChatChunk) -> None:
        if self.stopped or self.is_disposed:
            return
        fold = self._fold
        try:
            fold.add(value)
            snapshot = fold.snapshot() if self._snapshots else None
        except Exception as error:  # the fold's failure is the stream's failure
            self.on_error(error)
            return
        if snapshot is not None:
            self._observer.on_next(snapshot)

    def after(self) -> tuple[Msg, ...]:
        return (self._fold.message(),)


def fold_message(*, snapshots: bool = False) -> Operator[ChatChunk, Msg]:
    """Fold chunks into the final assistant message (see :func:`rxagent.operators.fold_message`)."""

    def operator(source: Observable[ChatChunk]) -> Observable[Msg]:
        def subscribe(
            observer: abc.ObserverBase[Msg], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            return _Folding(observer, scheduler, snapshots).attach(source)

        return Source(subscribe)

    return operator
