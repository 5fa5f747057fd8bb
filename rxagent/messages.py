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
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Generic, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from rxagent.display import Displayable

__all__ = [
    "ContentBlock",
    "MessageMemo",
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
    attributes in ``==``.
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Msg], _V]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        """Whether a value is held for the message whose ``id()`` is ``key``."""
        return key in self._entries

    def get(self, message: Msg, compute: Callable[[Msg], _V]) -> _V:
        """The value for ``message``, computing it with ``compute`` the first time."""
        key = id(message)
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is message:
            return entry[1]
        value = compute(message)
        entries = self._entries

        def evict(ref: weakref.ref[Msg]) -> None:
            # Only our own entry: a new message may already be cached under the reused id.
            current = entries.get(key)
            if current is not None and current[0] is ref:
                del entries[key]

        entries[key] = (weakref.ref(message, evict), value)
        return value
