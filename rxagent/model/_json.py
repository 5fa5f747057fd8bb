"""JSON as the HTTP model clients read and write it: compact bytes out, a fast parser in, lazy raw chunks.

Shared by every wire format here (:mod:`rxagent.model._openai_wire`, :mod:`rxagent.model._anthropic_wire`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar, cast

import msgspec
from pydantic_core import from_json

from rxagent.chunks import ChatChunk, FinishReason, ToolCallDelta
from rxagent.model.errors import MalformedStreamError

if TYPE_CHECKING:
    from rxagent.model.sse import SSEEvent

__all__ = [
    "SHAPE_ERRORS",
    "LazyJsonObject",
    "call_fragment",
    "delta_chunk",
    "dumps",
    "is_object",
    "lazy_raw",
    "loads",
    "reread",
]

_T = TypeVar("_T")

SHAPE_ERRORS: tuple[type[Exception], ...] = (TypeError, AttributeError, KeyError, IndexError, ValueError)
"""What reading a decoded value of an unexpected shape raises."""


def is_object(value: object) -> TypeGuard[dict[str, Any]]:
    """Whether decoded JSON is an object."""
    return isinstance(value, dict)


def reread(
    event: SSEEvent, read: Callable[[dict[str, Any]], _T], redact: Callable[[str], str], what: str
) -> _T | None:
    """``event``'s data, which msgspec refused, read the slow way with ``read``: the standard library
    accepts a little more (a lone surrogate escape, "\\ud800", sent by servers that cut a token inside an
    emoji), and otherwise says what is wrong. ``None`` for ``data:`` with nothing after it (an event
    without content).

    Raises:
        MalformedStreamError: not JSON, not an object, or not of the shape ``read`` takes (``what`` names
            it: "chunk", "event"). Raised outside the ``except`` blocks: a decoder's exception may hold the
            server's text (which may quote the API key) and would ride along as ``__context__``.
    """
    data = event.data
    try:
        decoded = loads(data)
    except ValueError as error:
        if not data.strip():
            return None
        problem = f"malformed JSON in the event stream ({error})"
    else:
        if not is_object(decoded):
            problem = "stream data is not a JSON object"
        else:
            try:
                return read(decoded)
            except msgspec.ValidationError as error:
                problem = f"unexpected {what} shape ({redact(str(error))})"
            except SHAPE_ERRORS as error:
                problem = f"unexpected {what} shape ({type(error).__name__}: {redact(str(error))})"
    raise MalformedStreamError(problem, line=event.line, data=redact(data))


def loads(data: str) -> Any:
    """``json.loads`` at a third of the cost: pydantic-core's parser, with the standard library
    as the fallback for the little it rejects that ``json`` accepts (a lone surrogate escape, ``\\ud800``).

    Raises:
        ValueError: ``data`` is not JSON (the standard library's error, naming the position).
    """
    try:
        return from_json(data)
    except ValueError:
        return json.loads(data)


_encode = msgspec.json.Encoder().encode


def dumps(value: object) -> bytes:
    """Compact UTF-8 JSON, as sent on the wire, at a tenth of ``json.dumps``'s cost (msgspec's encoder;
    every request encodes its new messages with it).

    A float that JSON cannot hold (``nan``, ``inf``) is written as ``null``, as JavaScript's
    ``JSON.stringify`` does (the standard library wrote ``NaN``, which a server's JSON parser refuses);
    what msgspec does not encode (a dictionary with boolean keys) is written by the standard library.

    Raises:
        TypeError: ``value`` holds something JSON cannot write.
        UnicodeEncodeError: a string holds a lone surrogate.
    """
    try:
        return _encode(value)
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


class LazyJsonObject(msgspec.Struct, gc=False):
    """A streamed chunk's JSON object, decoded on first use (what ``ChatChunk.raw`` holds): a read-only
    :class:`~collections.abc.Mapping`.

    rxagent reads chunks through typed shapes; few consumers ever look at ``raw``, and decoding every
    chunk twice would double the hot path's cost. ``source`` holds the chunk's text (which msgspec read as
    an object, so the general decoder does too) until then, the object after. A parser makes one per
    streamed token, so it is a msgspec struct, built in C at a third of the cost of a slotted class, and
    one the collector does not track (decoded JSON holds no reference cycle); it is registered as a
    ``Mapping`` and takes that class's methods, as a subclass would.
    """

    source: str | dict[str, Any]

    def _decoded(self) -> dict[str, Any]:
        source = self.source
        if isinstance(source, str):
            source = self.source = loads(source)
        return source

    def __getitem__(self, key: str) -> Any:
        return self._decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._decoded())

    def __repr__(self) -> str:
        return repr(self._decoded())

    # What a `Mapping` subclass inherits, which a struct cannot: the same behaviour, on the decoded object.
    def __contains__(self, key: object) -> bool:
        return key in self._decoded()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return self._decoded() == dict(cast("Mapping[object, object]", other))

    def keys(self) -> KeysView[str]:
        """The object's keys."""
        return self._decoded().keys()

    def items(self) -> ItemsView[str, Any]:
        """The object's items."""
        return self._decoded().items()

    def values(self) -> ValuesView[Any]:
        """The object's values."""
        return self._decoded().values()

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key``, or ``default``."""
        return self._decoded().get(key, default)


Mapping.register(LazyJsonObject)  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]

lazy_raw = cast("Callable[[str | dict[str, Any]], Mapping[str, Any]]", LazyJsonObject)
"""Makes a :class:`LazyJsonObject` of a chunk's JSON text (or of the object already decoded), typed as the
``Mapping`` it is (a checker does not see the registration)."""

_new = object.__new__


def delta_chunk(
    text: str,
    thinking: str,
    tool_calls: tuple[ToolCallDelta, ...],
    finish_reason: FinishReason | None,
    source: str | dict[str, Any],
) -> ChatChunk:
    """A streamed token's :class:`~rxagent.chunks.ChatChunk`, its ``raw`` a :class:`LazyJsonObject` of
    ``source`` (the event's JSON text, or the object already decoded).

    What ``ChatChunk(text, thinking, tool_calls, None, finish_reason, raw)`` makes, without the call of the
    class and its ``__init__``, which cost a quarter more than setting the slots, once per token. Every
    field is set here (``tests/model/test_openai_decoding.py`` compares the two field by field, so a field
    added to ``ChatChunk`` cannot be missed).
    """
    chunk: ChatChunk = _new(ChatChunk)
    chunk.text = text
    chunk.thinking = thinking
    chunk.tool_calls = tool_calls
    chunk.usage = None
    chunk.finish_reason = finish_reason
    chunk.raw = lazy_raw(source)
    chunk.thinking_signature = None
    chunk.redacted_thinking = None
    chunk.model = None
    return chunk


def call_fragment(index: int, call_id: str | None, name: str | None, arguments: str) -> ToolCallDelta:
    """A streamed tool-call fragment's :class:`~rxagent.chunks.ToolCallDelta`: what
    ``ToolCallDelta(index, call_id, name, arguments)`` makes, without the call of the class and its
    ``__init__`` (half the cost, once per fragment of a call's arguments). Every field is set here
    (``tests/model/test_openai_decoding.py`` compares the two field by field)."""
    fragment: ToolCallDelta = _new(ToolCallDelta)
    fragment.index = index
    fragment.id = call_id
    fragment.name = name
    fragment.arguments = arguments
    return fragment
