"""Messages and their content blocks.

A :class:`Msg` is one turn of a conversation: a role, an optional name, and an ordered tuple of content
blocks: text, thinking, tool calls and their results, and in user messages images (:class:`ImageBlock`)
and documents (:class:`DocumentBlock`), each inline or by URL. Blocks are a discriminated union on their
``type`` field, so a message survives a JSON round trip exactly
(``Msg.model_validate_json(m.model_dump_json()) == m``; inline bytes travel as standard base64).

Messages and blocks are frozen: a message that has been sent is a fact, and the model clients cache each
message's wire form on that promise. Derive a changed message with ``model_copy(update=...)``.
"""

from __future__ import annotations

import base64
import itertools
import os
import re
import uuid
import weakref
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final, Generic, Literal, Self, TypeAlias, TypeVar, cast
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_serializer, model_validator

from rxagent.display import Displayable
from rxagent.media import (
    DOCUMENT_MEDIA_TYPES,
    IMAGE_MEDIA_TYPES,
    DocumentMediaType,
    ImageMediaType,
    MediaType,
    image_size,
    pdf_pages,
    sniff,
)

if TYPE_CHECKING:
    from array import array

__all__ = [
    "ContentBlock",
    "ConversationMemo",
    "DocumentBlock",
    "ImageBlock",
    "ImageDetail",
    "InvalidMediaError",
    "MediaBlock",
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
    "UserContent",
    "mend_surrogates",
    "new_id",
    "user_blocks",
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


_FIELD_SETS: dict[frozenset[str], set[str]] = {}
"""One set of field names per combination in use, shared by the frozen messages and blocks that have it."""


def _share_fields_set(model: BaseModel) -> None:
    """Give ``model`` the shared copy of its set of fields set.

    Pydantic keeps a set of the fields given per instance: a session's history kept in memory would hold
    one per message and one per block, each one more object that every full collection of the garbage
    collector walks (about a fifth of what a turn adds to a session). Frozen models never change that set
    (``model_copy`` copies it before it adds to it), so the instances that have the same one share it.
    """
    fields = model.__pydantic_fields_set__
    key = frozenset(fields)
    shared = _FIELD_SETS.get(key)
    if shared is None:
        if len(_FIELD_SETS) < 4096:  # a bound: the combinations in use are few
            _FIELD_SETS[key] = fields
    elif shared is not fields:
        object.__setattr__(model, "__pydantic_fields_set__", shared)


class _Block(BaseModel):
    # defer_build (here, inherited by every block, and on Msg): pydantic builds a model's validator and
    # serializer when the model is first used, not when the class is defined, so `import rxagent` does not
    # pay for them (nor for pydantic's plugin lookup, which reads every installed package's metadata).
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    def model_post_init(self, context: object, /) -> None:
        """Share the set of fields set with the blocks that have the same (see ``_share_fields_set``)."""
        _share_fields_set(self)


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


# ---- images and documents ----------------------------------------------------------------------------

ImageDetail: TypeAlias = Literal["auto", "low", "high"]
"""How closely a model looks at an image (OpenAI's ``detail``; other providers ignore it): ``low`` is a
512-pixel view at a fixed small cost, ``high`` the tiles of the full image, ``auto`` the provider's pick."""

_SUFFIXES: Final[dict[str, MediaType]] = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".pdf": "application/pdf",
    ".txt": "text/plain",
}
"""Media types told by a file or URL name, for URLs (never fetched) and for text, which has no magic."""


class InvalidMediaError(ValueError):
    """Bytes, a file or a URL that cannot be an image or document block: a type that is not one of ours,
    bytes whose magic says another type than the one given, text that is not UTF-8, or a URL that is not
    ``http(s)``. Raised when the block is made, before it reaches a model or a log."""


def _what(kind: str) -> str:
    return "an image" if kind == "image" else "a document"


def _not_of(media_type: str, allowed: tuple[str, ...], kind: str) -> InvalidMediaError:
    return InvalidMediaError(
        f"{media_type!r} is not a media type of {_what(kind)}: use one of {', '.join(allowed)}"
    )


def _checked_type(data: bytes, given: str | None, allowed: tuple[str, ...], kind: str, name: str = "") -> str:
    """The media type of ``data``: ``given`` when its bytes agree, else what they are; refused when it is
    not one of ``allowed`` or the bytes say otherwise."""
    found = sniff(data)
    if given is None:
        # Only text, which has no magic bytes, is told by its name.
        named = _SUFFIXES.get(Path(name).suffix.lower()) if name else None
        given = found or (named if named == "text/plain" else None)
        if given is None:
            raise InvalidMediaError(
                f"cannot tell what {_what(kind)} of {len(data):,} bytes is from its first bytes "
                f"({data[:8]!r}): pass media_type, one of {', '.join(allowed)}"
            )
    if given not in allowed:
        raise _not_of(given, allowed, kind)
    if given == "text/plain":
        if found is not None:
            raise InvalidMediaError(f"the bytes are {found}, not text/plain")
        try:
            data.decode()
        except UnicodeDecodeError as error:
            raise InvalidMediaError(f"a text/plain document must be UTF-8: {error}") from None
    elif found != given:
        says = f"they are {found}" if found is not None else f"they begin {data[:8]!r}"
        raise InvalidMediaError(f"the bytes are not {given}: {says}")
    return given


def _checked_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in url):
        from rxagent.redaction import mask_url  # the error path only: yarl stays out of `import rxagent`

        raise InvalidMediaError(
            f"a media URL must be an absolute http(s) URL, got {mask_url(url)!r}: pass local data with "
            "from_bytes or from_path"
        )
    return url


def _url_type(url: str, given: str | None, allowed: tuple[str, ...], kind: str) -> str:
    if given is None:
        found = _SUFFIXES.get(Path(urlsplit(url).path).suffix.lower())
        if found is None or found not in allowed:
            from rxagent.redaction import mask_url

            raise InvalidMediaError(
                f"cannot tell what {_what(kind)} at {mask_url(url)!r} is from its name (it is not fetched): "
                f"pass media_type, one of {', '.join(allowed)}"
            )
        given = found
    if given not in allowed:
        raise _not_of(given, allowed, kind)
    return given


def _read(path: str | os.PathLike[str]) -> bytes:
    """The file's bytes (``FileNotFoundError``, ``IsADirectoryError``, … as ``open`` raises them)."""
    with open(path, "rb") as file:
        return file.read()


class _Shown(str):
    """Text a repr shows as it is (not quoted)."""

    def __repr__(self) -> str:
        return str(self)


class _MediaBlock(_Block):
    """What an image and a document share: a media type, and the bytes inline or a URL to fetch them from.

    Inline bytes are written to JSON (and so to a session's log) as standard base64; a URL is kept as the
    reference it is, never fetched by rxagent (the provider fetches it).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True, val_json_bytes="base64")

    # Each kind narrows these two (a Literal each). Not a generic model: parametrising one builds its
    # validator at import time, which `import rxagent` must not pay for (tests/test_startup.py).
    type: str
    media_type: str
    """The media type (checked against the bytes' magic when they are inline)."""
    data: bytes | None = None
    """The bytes, inline (``None`` when the block is a :attr:`url`)."""
    url: str | None = None
    """Where the provider fetches the bytes from (an ``http(s)`` URL), when they are not inline."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        if (self.data is None) == (self.url is None):
            raise ValueError(f"{_what(self.type)} block holds either data or a url, exactly one of them")
        if self.url is not None:
            _checked_url(self.url)
        else:
            allowed = IMAGE_MEDIA_TYPES if self.type == "image" else DOCUMENT_MEDIA_TYPES
            _checked_type(cast("bytes", self.data), self.media_type, allowed, self.type)
        return self

    @field_serializer("data", when_used="json")
    def _data_json(self, data: bytes | None) -> str | None:
        # Standard base64 (pydantic's own is URL-safe), as every provider's wire format and most tools want.
        return None if data is None else base64.b64encode(data).decode("ascii")

    def __repr_args__(self) -> Iterable[tuple[str | None, object]]:
        # Megabytes of bytes in a repr (a traceback, a log line) help no one; a signed URL's secrets
        # must not be shown either.
        for name, value in super().__repr_args__():
            if name == "data" and value is not None:
                yield name, _Shown(f"<{len(cast('bytes', value)):,} bytes>")
            elif name == "url" and value is not None:
                from rxagent.redaction import mask_url

                yield name, mask_url(cast("str", value))
            else:
                yield name, value

    @property
    def size(self) -> int | None:
        """How many bytes are inline (``None`` for a URL)."""
        return None if self.data is None else len(self.data)

    def data_base64(self) -> str:
        """The inline bytes as standard base64 (what wire formats carry).

        Raises:
            ValueError: the block is a URL.
        """
        if self.data is None:
            raise ValueError(f"{_what(self.type)} given by URL has no inline data")
        return base64.b64encode(self.data).decode("ascii")

    def data_url(self) -> str:
        """The inline bytes as a ``data:`` URL (``data:image/png;base64,…``).

        Raises:
            ValueError: the block is a URL.
        """
        return f"data:{self.media_type};base64,{self.data_base64()}"


class ImageBlock(_MediaBlock):
    """An image in a message: PNG, JPEG, GIF or WebP, inline or at a URL.

    Make one with :meth:`from_path`, :meth:`from_bytes` or :meth:`from_url`, and put it in a user message
    beside text (``agent.call(["What is in this picture?", ImageBlock.from_path("cat.png")])``).

    Example:
        >>> gif = b"GIF89a" + (2).to_bytes(2, "little") + (2).to_bytes(2, "little") + b"\\x00" * 20
        >>> image = ImageBlock.from_bytes(gif)
        >>> image.media_type, image.dimensions(), image.data_url()[:22]
        ('image/gif', (2, 2), 'data:image/gif;base64,')
    """

    # The block is frozen: narrowing the base's fields is safe (nothing assigns them).
    type: Literal["image"] = "image"  # pyright: ignore[reportIncompatibleVariableOverride]
    media_type: ImageMediaType  # pyright: ignore[reportIncompatibleVariableOverride]
    detail: ImageDetail = "auto"
    """How closely the model looks (see :data:`ImageDetail`)."""

    @classmethod
    def from_bytes(
        cls, data: bytes, media_type: ImageMediaType | None = None, *, detail: ImageDetail = "auto"
    ) -> ImageBlock:
        """An inline image of ``data``; ``media_type`` is read from its magic bytes when not given.

        Raises:
            InvalidMediaError: not PNG, JPEG, GIF or WebP, or not the ``media_type`` given.
        """
        kind = _checked_type(bytes(data), media_type, IMAGE_MEDIA_TYPES, "image")
        return cls.model_validate({"media_type": kind, "data": bytes(data), "detail": detail})

    @classmethod
    def from_path(
        cls,
        path: str | os.PathLike[str],
        media_type: ImageMediaType | None = None,
        *,
        detail: ImageDetail = "auto",
    ) -> ImageBlock:
        """An inline image of the file at ``path`` (its type from its magic bytes when not given).

        Raises:
            FileNotFoundError: no such file (and the other errors of reading it).
            InvalidMediaError: as :meth:`from_bytes`.
        """
        return cls.from_bytes(_read(path), media_type, detail=detail)

    @classmethod
    def from_url(
        cls, url: str, media_type: ImageMediaType | None = None, *, detail: ImageDetail = "auto"
    ) -> ImageBlock:
        """An image the provider fetches from ``url`` (rxagent never does); its type from the URL's file
        name (``.png``, ``.jpg``, ``.gif``, ``.webp``) when not given.

        Raises:
            InvalidMediaError: not an absolute ``http(s)`` URL, or a type neither given nor told by its name.
        """
        kind = _url_type(_checked_url(url), media_type, IMAGE_MEDIA_TYPES, "image")
        return cls.model_validate({"media_type": kind, "url": url, "detail": detail})

    def dimensions(self) -> tuple[int, int] | None:
        """``(width, height)`` read from the inline image's header; ``None`` for a URL (or a header that
        does not say)."""
        return None if self.data is None else image_size(self.data)


class DocumentBlock(_MediaBlock):
    """A document in a message: a PDF (inline or at a URL), or plain UTF-8 text (inline).

    Example:
        >>> pdf = DocumentBlock.from_bytes(b"%PDF-1.4 <</Type /Page>> %%EOF", name="brief.pdf")
        >>> pdf.media_type, pdf.name, pdf.pages()
        ('application/pdf', 'brief.pdf', 1)
    """

    type: Literal["document"] = "document"  # pyright: ignore[reportIncompatibleVariableOverride]
    media_type: DocumentMediaType  # pyright: ignore[reportIncompatibleVariableOverride]
    name: str | None = None
    """The file name shown to the model (OpenAI's ``filename``, Anthropic's ``title``)."""

    @model_validator(mode="after")
    def _check_text(self) -> Self:
        if self.media_type == "text/plain" and self.url is not None:
            raise ValueError("a text/plain document is sent inline: read the text and use from_bytes")
        return self

    @classmethod
    def from_bytes(
        cls, data: bytes, media_type: DocumentMediaType | None = None, *, name: str | None = None
    ) -> DocumentBlock:
        """An inline document of ``data``: a PDF by its magic bytes, or text when ``media_type`` is
        ``"text/plain"`` (or ``name`` ends in ``.txt``).

        Raises:
            InvalidMediaError: neither a PDF nor declared text, text that is not UTF-8, or bytes that are
                not the ``media_type`` given.
        """
        kind = _checked_type(bytes(data), media_type, DOCUMENT_MEDIA_TYPES, "document", name or "")
        return cls.model_validate({"media_type": kind, "data": bytes(data), "name": name})

    @classmethod
    def from_path(
        cls, path: str | os.PathLike[str], media_type: DocumentMediaType | None = None
    ) -> DocumentBlock:
        """An inline document of the file at ``path``, named after it.

        Raises:
            FileNotFoundError: no such file (and the other errors of reading it).
            InvalidMediaError: as :meth:`from_bytes`.
        """
        return cls.from_bytes(_read(path), media_type, name=Path(path).name)

    @classmethod
    def from_url(
        cls, url: str, media_type: Literal["application/pdf"] | None = None, *, name: str | None = None
    ) -> DocumentBlock:
        """A PDF the provider fetches from ``url`` (rxagent never does).

        Raises:
            InvalidMediaError: not an absolute ``http(s)`` URL, or a name that does not end in ``.pdf``
                with no ``media_type`` given.
        """
        kind = _url_type(_checked_url(url), media_type, ("application/pdf",), "document")
        return cls.model_validate({"media_type": kind, "url": url, "name": name})

    def pages(self) -> int | None:
        """How many pages the inline PDF has (:func:`rxagent.media.pdf_pages`); ``None`` for a URL, for
        text, or when the PDF does not show it."""
        if self.data is None or self.media_type != "application/pdf":
            return None
        return pdf_pages(self.data)


MediaBlock: TypeAlias = ImageBlock | DocumentBlock
"""An image or a document."""

UserContent: TypeAlias = str | TextBlock | ImageBlock | DocumentBlock
"""What a user message is made of: text (a string is a :class:`TextBlock`), images and documents."""


ContentBlock: TypeAlias = Annotated[
    TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock | ImageBlock | DocumentBlock,
    Field(discriminator="type"),
]
"""Any content block, discriminated by ``type``."""


def user_blocks(content: str | Sequence[UserContent]) -> tuple[TextBlock | MediaBlock, ...]:
    """The content blocks of a user message made of ``content`` (see :meth:`Msg.user`).

    Raises:
        TypeError: a part that is not text, an image or a document.
    """
    if isinstance(content, str):
        return (TextBlock(text=content),)
    blocks: list[TextBlock | MediaBlock] = []
    for index, part in enumerate(content):
        if isinstance(part, str):
            blocks.append(TextBlock(text=part))
        elif isinstance(part, TextBlock | ImageBlock | DocumentBlock):  # pyright: ignore[reportUnnecessaryIsInstance]
            blocks.append(part)
        else:  # untyped callers
            raise TypeError(
                f"part {index} of a user message is {type(part).__name__}: use text, ImageBlock or "
                "DocumentBlock"
            )
    return tuple(blocks)


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

    def model_post_init(self, context: object, /) -> None:
        """Share the set of fields set with the messages that have the same (see ``_share_fields_set``)."""
        _share_fields_set(self)

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
    def user(cls, content: str | Sequence[UserContent], **fields: object) -> Msg:
        """A user message: one text block, or text, images and documents in the order given (a string
        in the sequence is a text block).

        Example:
            >>> pdf = DocumentBlock.from_bytes(b"%PDF-1.4 <</Type /Page>>", name="a.pdf")
            >>> [block.type for block in Msg.user(["Summarise this.", pdf]).content]
            ['text', 'document']

        Raises:
            TypeError: a part that is not text, an image or a document.
        """
        return cls.model_validate({"role": "user", "content": user_blocks(content), **fields})

    @classmethod
    def assistant(cls, text: str, **fields: object) -> Msg:
        """An assistant message holding one text block."""
        return cls.model_validate({"role": "assistant", "content": (TextBlock(text=text),), **fields})

    @classmethod
    def from_tool_results(cls, *results: ToolResultBlock, **fields: object) -> Msg:
        """A ``tool`` message carrying the given results, in the order of their calls."""
        # Validated, though the results are blocks already: pydantic's validator takes a block as it is and
        # costs less than its `model_construct`, which is Python (once per tool round).
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
        # Computed on each read (several per tool round), not kept: a kept tuple per message would be one
        # more object in every session's history for the collector to walk. A list made in place, then
        # the tuple, costs two thirds of a generator's.
        return tuple([block for block in self.content if isinstance(block, ToolUseBlock)])

    @property
    def tool_results(self) -> tuple[ToolResultBlock, ...]:
        """The tool results in this message, in order."""
        return tuple([block for block in self.content if isinstance(block, ToolResultBlock)])

    @property
    def media(self) -> tuple[MediaBlock, ...]:
        """The images and documents in this message, in order."""
        return tuple(block for block in self.content if isinstance(block, ImageBlock | DocumentBlock))

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
