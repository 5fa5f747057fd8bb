"""Messages and their content blocks.

A :class:`Msg` is one turn of a conversation: a role, an optional name, and an ordered tuple of content
blocks. Blocks are a discriminated union on their ``type`` field, so a message survives a JSON round trip
exactly (``Msg.model_validate_json(m.model_dump_json()) == m``).

Messages and blocks are frozen: a message that has been sent is a fact, and the model clients cache each
message's wire form on that promise. Derive a changed message with ``model_copy(update=...)``.
"""

from __future__ import annotations

import itertools
import os
import re
import uuid
import weakref
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Final, Generic, Literal, TypeAlias, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from rxagent.display import Displayable

if TYPE_CHECKING:
    from array import array

__all__ = [
    "ContentBlock",
    "ConversationMemo",
    "MessageMemo",
    "MessageTotals",
    "Msg",
    "Role",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolResultContent",
    "ToolResultStatus",
    "ToolUseBlock",
    "ToolUseState",
    "mend_surrogates",
    "new_id",
]

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
"""Who speaks: ``system`` instructions, the ``user``, the ``assistant`` (model), or ``tool`` results."""

ToolUseState: TypeAlias = Literal["streaming", "complete", "invalid"]
"""``streaming``: arguments still arriving (running snapshots only); ``complete``: parsed into ``input``;
``invalid``: the argument text is not a JSON object (``input`` is ``None``, ``error`` says why)."""

ToolResultStatus: TypeAlias = Literal["ok", "error", "denied", "interrupted"]
"""How a tool call ended: ran fine, failed (or had bad arguments), refused by permissions, or cut short."""


_ID_BASE = uuid.uuid4().hex[:12]
_id_counter = itertools.count(int.from_bytes(os.urandom(4), "big"))


_SURROGATE = re.compile("[\ud800-\udfff]")


def mend_surrogates(text: str) -> str:
    """``text`` with each surrogate pair made the one character it stands for.

    A server that streams UTF-16-minded JSON may cut an emoji's pair across two deltas; joined, the halves
    are two code points that no UTF-8 encoder takes. Mended, they are the emoji; a half with no partner
    stays as it is (it is written with a ``\\u`` escape wherever JSON is written).

    Example:
        >>> mend_surrogates("smile \ud83d\ude00") == "smile 😀"
        True
    """
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def new_id(prefix: str) -> str:
    """Return a fresh unique id such as ``msg_3f2a…`` (prefix, underscore, 24 hex digits).

    Twelve random hex digits chosen once per process, then a counter: unique across processes (what
    shared session stores need) and cheap enough to make several per agent step, unlike a uuid4 each.
    """
    return f"{prefix}_{_ID_BASE}{next(_id_counter) & 0xFFFFFFFFFFFF:012x}"


class _Block(BaseModel):
    # defer_build (here, inherited by every block, and on Msg): pydantic builds a model's validator and
    # serializer when the model is first used, not when the class is defined, so `import rxagent` does not
    # pay for them (nor for pydantic's plugin lookup, which reads every installed package's metadata).
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class TextBlock(_Block):
    """Plain text written by a user, the model or a tool."""

    type: Literal["text"] = "text"
    text: str
    """The text."""


class ThinkingBlock(_Block):
    """The model's visible reasoning (``reasoning_content`` and the like). Never counts as an answer."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    """The reasoning text."""
    signature: str | None = None
    """Provider signature that must be sent back with the reasoning, where a provider uses one."""
    redacted_data: str | None = None
    """Reasoning the provider withheld, as the encrypted data it sent instead (Anthropic's
    ``redacted_thinking``); ``thinking`` is then empty. Sent back to the provider exactly as it came."""


class ToolUseBlock(_Block):
    """A call of a tool by the model.

    ``raw_arguments`` always holds the argument text exactly as the model produced it. ``input`` holds the
    parsed arguments only when ``state == "complete"``; a half-written or non-object argument text is
    ``state == "invalid"`` with ``input=None`` and ``error`` saying what is wrong, never an empty dict that
    would run the tool with no arguments.
    """

    type: Literal["tool_use"] = "tool_use"
    id: str
    """Call id, pairing this call with its :class:`ToolResultBlock`."""
    name: str
    """Name of the tool called."""
    input: dict[str, JsonValue] | None = None
    """Parsed arguments (``state == "complete"``), else ``None``."""
    raw_arguments: str = ""
    """Argument text exactly as streamed by the model."""
    state: ToolUseState = "complete"
    """Whether the arguments are still streaming, parsed, or invalid."""
    error: str | None = None
    """Why the arguments are invalid (``state == "invalid"``)."""


ToolResultContent: TypeAlias = Annotated[TextBlock, Field(discriminator="type")]
"""What a tool result may contain (text today; images and files extend this union)."""


class ToolResultBlock(_Block):
    """The outcome of one tool call, paired with it by ``tool_use_id``."""

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    """Id of the :class:`ToolUseBlock` this answers."""
    name: str
    """Name of the tool that was called."""
    output: tuple[ToolResultContent, ...] = ()
    """What the tool returned, as content blocks."""
    status: ToolResultStatus = "ok"
    """ok, error, denied or interrupted."""

    @property
    def text(self) -> str:
        """The output's text blocks joined with newlines."""
        return "\n".join(block.text for block in self.output)


ContentBlock: TypeAlias = Annotated[
    TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock, Field(discriminator="type")
]
"""Any content block, discriminated by ``type``."""


def _now() -> datetime:
    return datetime.now(UTC)


class Msg(Displayable, BaseModel):
    """One message of a conversation.

    Example:
        >>> m = Msg.user("What is 17 * 23?")
        >>> m.role, m.text
        ('user', 'What is 17 * 23?')
        >>> Msg.model_validate_json(m.model_dump_json()) == m
        True
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: str = Field(default_factory=lambda: new_id("msg"))
    """Unique message id."""
    role: Role
    """Who wrote the message."""
    name: str | None = None
    """Optional author name (an agent's or a user's)."""
    content: tuple[ContentBlock, ...] = ()
    """Ordered content blocks."""
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    """Free-form JSON data: usage, finish reason, model name, application tags."""
    created_at: datetime = Field(default_factory=_now)
    """When the message was created (UTC)."""

    # ---- constructors -------------------------------------------------------------------------------

    @classmethod
    def system(cls, text: str, **fields: object) -> Msg:
        """A system message holding one text block."""
        return cls.model_validate({"role": "system", "content": (TextBlock(text=text),), **fields})

    @classmethod
    def user(cls, text: str, **fields: object) -> Msg:
        """A user message holding one text block."""
        return cls.model_validate({"role": "user", "content": (TextBlock(text=text),), **fields})

    @classmethod
    def assistant(cls, text: str, **fields: object) -> Msg:
        """An assistant message holding one text block."""
        return cls.model_validate({"role": "assistant", "content": (TextBlock(text=text),), **fields})

    @classmethod
    def from_tool_results(cls, *results: ToolResultBlock, **fields: object) -> Msg:
        """A ``tool`` message carrying the given results, in the order of their calls."""
        return cls.model_validate({"role": "tool", "content": results, **fields})

    # ---- views --------------------------------------------------------------------------------------

    @property
    def text(self) -> str:
        """All text blocks joined with no separator (thinking excluded)."""
        return "".join(block.text for block in self.content if isinstance(block, TextBlock))

    @property
    def thinking(self) -> str:
        """All thinking blocks joined."""
        return "".join(block.thinking for block in self.content if isinstance(block, ThinkingBlock))

    @property
    def tool_calls(self) -> tuple[ToolUseBlock, ...]:
        """The tool calls in this message, in order."""
        return tuple(block for block in self.content if isinstance(block, ToolUseBlock))

    @property
    def tool_results(self) -> tuple[ToolResultBlock, ...]:
        """The tool results in this message, in order."""
        return tuple(block for block in self.content if isinstance(block, ToolResultBlock))

    @property
    def has_answer_text(self) -> bool:
        """True when at least one text block is not blank (thinking alone is not an answer)."""
        return any(isinstance(b, TextBlock) and b.text.strip() for b in self.content)


_V = TypeVar("_V")


class MessageMemo(Generic[_V]):
    """A value computed once per message object (its wire bytes, its token count), dropped with the message.

    Keyed by the object, not by ``Msg.id``: messages are frozen, so an object's value never changes, but
    two objects may share an id. Not stored on the message itself, since pydantic compares private
    attributes in ``==``. Values are never ``None`` (``None`` marks a message not seen yet).

    A request repeats the whole conversation, so :meth:`get_all` looks its messages up in bulk: one
    C-level dictionary probe per message (``map``), not a Python call, so a long history costs about
    60 ns a message, and only what is new is computed.
    """

    __slots__ = ("_evict", "_refs", "_values")

    def __init__(self) -> None:
        # Two dictionaries on the same keys, so that the bulk lookup reads values without a Python step.
        # A key is present only while its message lives: the weak reference's callback removes it as the
        # message is freed, before its ``id()`` can be given to another object.
        values: dict[int, _V] = {}
        refs: dict[int, weakref.KeyedRef[int, Msg]] = {}

        def evict(ref: weakref.KeyedRef[int, Msg]) -> None:
            # Only our own entry: a new message may already be cached under the reused id.
            if refs.get(ref.key) is ref:
                del refs[ref.key], values[ref.key]

        self._values, self._refs, self._evict = values, refs, evict

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        """Whether a value is held for the message whose ``id()`` is ``key``."""
        return key in self._values

    def get(self, message: Msg, compute: Callable[[Msg], _V]) -> _V:
        """The value for ``message``, computing it with ``compute`` the first time."""
        key = id(message)
        ref = self._refs.get(key)
        if ref is not None and ref() is message:
            return self._values[key]
        value = compute(message)
        # One callback for the memo, the key on the reference: an entry keeps one object for the collector
        # to walk (a closure per entry kept five more, for every message of every conversation).
        self._refs[key] = weakref.KeyedRef(message, self._evict, key)
        self._values[key] = value
        return value

    def get_all(self, messages: Sequence[Msg], compute: Callable[[Msg], _V]) -> list[_V]:
        """The values for ``messages``, in order, computing only those of messages not seen before.

        The lookups run in C (see the class); ``compute`` is called once per new message object.
        """
        found = list(map(self._values.get, map(id, messages)))
        try:
            index = found.index(None)
        except ValueError:
            return cast("list[_V]", found)
        while True:  # only the new messages, found by C-level scans for the gaps
            found[index] = self.get(messages[index], compute)
            try:
                index = found.index(None, index + 1)
            except ValueError:
                return cast("list[_V]", found)


_S = TypeVar("_S")

_BACKTRACK: Final = 8
"""How many trailing messages of a request may differ from the last request's and still find the history
they share: the closing messages a turn adds after the history (an instruction, a summarising prompt)."""


class ConversationMemo(Generic[_S]):
    """What a cache derived from the last request of each conversation, so the next request derives only
    what it appends: a conversation's requests repeat its history and grow at its end.

    A conversation is known by its requests' first message (the system prompt, or the first user message),
    held weakly: the record goes when that message goes. A record holds the rest of the request's
    messages, so that :meth:`resume` can tell how much of a new request is the same: one tuple comparison
    in C over the shared part (about 5 ns a message, identical objects compare without a Python call),
    with no Python step per message of the history.

    States are recorded whole and never changed afterwards (the next request records a new one), so a
    memo shared between threads never shows a half-written state.
    """

    __slots__ = ("_evict", "_last")

    def __init__(self) -> None:
        last: dict[int, tuple[weakref.KeyedRef[int, Msg], tuple[Msg, ...], _S]] = {}

        def evict(ref: weakref.KeyedRef[int, Msg]) -> None:
            # Only our own record: another conversation may already start with an object of that id.
            current = last.get(ref.key)
            if current is not None and current[0] is ref:
                del last[ref.key]

        self._last, self._evict = last, evict

    def __len__(self) -> int:
        return len(self._last)

    def resume(self, messages: Sequence[Msg]) -> tuple[int, _S | None]:
        """``(shared, state)``: ``messages[:shared]`` are the messages the conversation's last recorded
        request began with (the same objects, or equal ones), and ``state`` was recorded with that
        request (a state that describes a request message by message describes its first ``shared``
        too). ``(0, None)`` when none is recorded."""
        if not messages:
            return 0, None
        first = messages[0]
        entry = self._last.get(id(first))
        if entry is None or entry[0]() is not first:
            return 0, None
        rest, state = entry[1], entry[2]
        matched = min(len(messages) - 1, len(rest))  # messages[1 : 1 + matched] against rest[:matched]
        stop = max(0, matched - _BACKTRACK)
        while matched > stop and messages[matched] is not rest[matched - 1]:
            matched -= 1
        if matched and messages[matched] is rest[matched - 1]:
            # One comparison in C over the shared part: identical objects compare without a Python call,
            # and an equal copy (a reloaded message) is as good, since a state is a function of values.
            head = messages[1 : matched + 1]
            if (head if type(head) is tuple else tuple(head)) != rest[:matched]:
                matched = 0  # changed inside the history (an edited or evicted message)
        else:
            matched = 0
        return 1 + matched, state

    def record(self, messages: Sequence[Msg], state: _S) -> None:
        """Remember ``messages`` as their conversation's last request, with ``state`` (never to be changed
        afterwards)."""
        if not messages:
            return
        first = messages[0]
        key = id(first)
        entry = self._last.get(key)
        ref = entry[0] if entry is not None and entry[0]() is first else None
        if ref is None:
            ref = weakref.KeyedRef(first, self._evict, key)
        self._last[key] = (ref, tuple(messages[1:]), state)


def _no_sums() -> array[int]:
    """Running sums of no message: ``[0]``, as machine integers (not objects for the collector)."""
    from array import array  # here, not at the top: `import rxagent` stays without it

    return array("q", (0,))


class MessageTotals:
    """The sum of a number per message (tokens, characters) over a request's messages, computing the
    number of each message object once and summing only what a conversation's next request appends.

    Args:
        measure: the number for one message.
        memo: where the numbers of single messages are kept (default: a memo of its own); share one with
            a cache that also gives them out one by one.

    Example:
        >>> totals = MessageTotals(lambda m: len(m.text))
        >>> history = (Msg.system("be brief"), Msg.user("hi"))
        >>> totals.total(history), totals.total((*history, Msg.assistant("hello")))
        (10, 15)
    """

    __slots__ = ("_conversations", "_measure", "_values")

    def __init__(self, measure: Callable[[Msg], int], memo: MessageMemo[int] | None = None) -> None:
        self._measure = measure
        self._values: MessageMemo[int] = MessageMemo() if memo is None else memo
        # Per conversation, the running sums of its last request: sums[i] is the total of messages[:i].
        self._conversations: ConversationMemo[array[int]] = ConversationMemo()

    def total(self, messages: Sequence[Msg]) -> int:
        """The sum of ``measure`` over ``messages``."""
        shared, recorded = self._conversations.resume(messages)
        if recorded is None:
            sums = _no_sums()
        elif shared == len(messages) == len(recorded) - 1:
            return recorded[-1]  # the same request again
        else:
            sums = recorded[: shared + 1]
        running = sums[-1]
        for value in self._values.get_all(messages[len(sums) - 1 :], self._measure):
            running += value
            sums.append(running)
        self._conversations.record(messages, sums)
        return running
