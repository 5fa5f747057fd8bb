"""What streams out of a model: :class:`ChatChunk` and its parts, the bottom layer of rxagent.

Chunks are the hot path (one per streamed token or fragment), so they are plain slotted classes built
without validation. They depend on nothing of rxagent's, so operators (``fold_message``), events and
models all use them without importing each other; :mod:`rxagent.model` re-exports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from pydantic import JsonValue

__all__ = ["ChatChunk", "FinishReason", "ToolCallDelta", "Usage"]

FinishReason: TypeAlias = Literal["stop", "tool_calls", "length", "content_filter", "error"]
"""Why the model stopped: natural end, to call tools, token limit, provider filter, or provider error."""


@dataclass(slots=True)
class Usage:
    """Token usage of one model call (or, added up with ``+``, of several).

    ``input_tokens`` counts every input token, those read from and written to the provider's prompt
    cache included: ``cache_read_tokens`` and ``cache_write_tokens`` say how many of them were (OpenAI
    counts cached tokens inside its prompt tokens; Anthropic counts them apart, and its client adds them
    in). ``reasoning_tokens`` are part of ``output_tokens`` likewise.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    @classmethod
    def from_json(cls, data: JsonValue) -> Usage | None:
        """The usage :meth:`to_json` wrote (as a folded message's ``metadata["usage"]`` holds it), or
        ``None`` when ``data`` is not such an object."""
        if not isinstance(data, dict):
            return None
        counts = {k: v for k, v in data.items() if k in _FIELDS and isinstance(v, int)}
        return cls(**counts)

    def to_json(self) -> dict[str, JsonValue]:
        """The usage as a JSON object (as stored in ``Msg.metadata["usage"]``).

        ``cache_write_tokens`` is written only when there are some, so the records of providers that never
        report it stay as they were before it existed.
        """
        written: dict[str, JsonValue] = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }
        if self.cache_write_tokens:
            written["cache_write_tokens"] = self.cache_write_tokens
        return written


@dataclass(slots=True)
class ToolCallDelta:
    """A fragment of one streamed tool call.

    Providers send a call's id and name once (usually first) and its arguments in fragments. ``index``
    says which call a fragment belongs to, but some providers reuse an index for different calls, so
    :func:`rxagent.operators.fold_message` keys calls by ``id`` whenever one is present.
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(slots=True)
class ChatChunk:
    """One streamed piece of a model's answer. Every field is optional; most chunks carry one delta.

    Treat chunks as immutable once emitted: several subscribers may see the same object.
    """

    text: str = ""
    thinking: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    usage: Usage | None = None
    finish_reason: FinishReason | None = None
    raw: Mapping[str, Any] | None = None
    """The provider's decoded chunk, for fields rxagent does not model: a read-only mapping, which a model
    may decode only when it is first read (``dict(chunk.raw)`` gives a plain dictionary)."""
    thinking_signature: str | None = None
    """The signature that closes the thinking streamed since the previous one (Anthropic's
    ``signature_delta``): the fold makes that thinking one :class:`~rxagent.messages.ThinkingBlock`
    carrying it, which the provider requires back unchanged (``""`` closes the block without one)."""
    redacted_thinking: str | None = None
    """A whole reasoning block the provider withheld, as the opaque data it sent instead (Anthropic's
    ``redacted_thinking``): the fold keeps it, in its place among the thinking blocks, to be sent back."""
    model: str | None = None
    """The name of the model that is answering, when the stream says (a
    :class:`~rxagent.model.fallback.FallbackModel` puts it on its first chunk): the folded message keeps it
    as ``metadata["model"]``, a model call's span as ``gen_ai.response.model``."""


_FIELDS = frozenset(
    {"input_tokens", "output_tokens", "cache_read_tokens", "reasoning_tokens", "cache_write_tokens"}
)
