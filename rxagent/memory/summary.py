"""Summarisers: how the context window folds its oldest messages into a running summary.

A :class:`Summariser` turns the previous summary (or ``None``) and the next span of messages into the new
summary. The window calls it once per span and keeps the result in the session state, so a span is never
summarised twice. Two come with rxagent:

- :class:`ModelSummariser` asks a chat model, through the ordinary ``model.stream(ChatRequest(...))`` call,
  with its own small budget (input and reply); a span too long for one call is summarised in chunks.
- :class:`TruncatingSummariser` needs no model: one shortened line per message, the newest lines that fit.
  Deterministic, and the window's default.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from rxagent.memory.tokens import TokenCounter, call_arguments_text, default_counter, truncate_to_tokens
from rxagent.messages import Msg
from rxagent.model.types import ChatModel
from rxagent.requests import ChatRequest

__all__ = [
    "OMITTED_LINES",
    "SUMMARY_INSTRUCTIONS",
    "ModelSummariser",
    "Summariser",
    "TruncatingSummariser",
    "render_message",
]

OMITTED_LINES = "[earlier lines omitted]"
"""First line of a truncated summary whose oldest lines were dropped."""

SUMMARY_INSTRUCTIONS = (
    "You compress a conversation between a user and an AI assistant that uses tools, so that the assistant "
    "can continue without the original messages. Write a concise summary in plain text: the user's goals "
    "and requests (keep the latest request word for word), decisions taken, facts, numbers and names "
    "found, which tools were called and what they returned that matters, and what is still open. Do not "
    "add anything that is not in the conversation. At most {max_tokens} tokens."
)
"""System prompt of :class:`ModelSummariser` (``{max_tokens}`` is filled in)."""


@runtime_checkable
class Summariser(Protocol):
    """Writes the summary that replaces the oldest messages of a request."""

    @property
    def name(self) -> str:
        """Shown in :class:`~rxagent.events.ContextCompressed` events (``"truncate"``, ``"model:…"``)."""
        ...

    @property
    def max_summary_tokens(self) -> int:
        """The most tokens a summary may have; the window budgets for it and cuts anything longer."""
        ...

    async def summarise(self, previous: str | None, messages: Sequence[Msg]) -> str:
        """The new summary: ``previous`` (``None`` the first time) followed by ``messages``."""
        ...


_LABELS = {"user": "User", "assistant": "Assistant", "system": "System note"}


def _shorten(text: str, max_chars: int | None) -> str:
    text = " ".join(text.split())  # one line: newlines and runs of spaces cost tokens and say nothing
    if max_chars is None or len(text) <= max_chars:
        return text
    return text[: max(0, max_chars - 1)].rstrip() + "…"


def render_message(message: Msg, max_chars: int | None = 2_000) -> list[str]:
    """``message`` as labelled one-line texts, each at most ``max_chars`` characters (``None``: no limit).

    Example:
        >>> render_message(Msg.user("What is the weather\\nin Paris?"))
        ['User: What is the weather in Paris?']
    """
    lines: list[str] = []
    if message.role == "tool":
        for result in message.tool_results:
            status = "" if result.status == "ok" else f" ({result.status})"
            lines.append(_shorten(f"{result.name} returned{status}: {result.text}", max_chars))
        return lines
    label = _LABELS.get(message.role, message.role)
    if message.text.strip():
        lines.append(_shorten(f"{label}: {message.text}", max_chars))
    for call in message.tool_calls:
        lines.append(_shorten(f"{label} called {call.name}({call_arguments_text(call)})", max_chars))
    return lines


def _keep_newest(counter: TokenCounter, lines: Sequence[str], limit: int) -> str:
    """The newest ``lines`` whose joined text fits ``limit`` tokens, after an omission marker if any drop."""
    marker_cost = counter.count_text(OMITTED_LINES) + 1
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        cost = counter.count_text(line) + 1  # + the newline
        if used + cost + marker_cost > limit:
            break
        kept.append(line)
        used += cost
    kept.reverse()
    if len(kept) < len(lines):
        kept.insert(0, OMITTED_LINES)
    # Summed line counts approximate the joined text's count: cut exactly as the last step.
    return truncate_to_tokens(counter, "\n".join(kept), limit)


class TruncatingSummariser:
    """A summariser without a model: one shortened line per message, keeping the newest that fit.

    Each message becomes labelled lines (``User: …``, ``Assistant called search({...})``,
    ``search returned: …``) of at most ``max_line_chars`` characters, appended to the previous summary's
    lines; when they exceed ``max_summary_tokens``, the oldest lines go first (their place is taken by
    ``[earlier lines omitted]``). Deterministic and fast: its cost is the span plus the summary.

    Args:
        max_summary_tokens: the most tokens a summary may have.
        max_line_chars: the most characters kept of one line.
        counter: counts the summary (default: the shared tiktoken counter).

    Example:
        >>> import asyncio
        >>> summariser = TruncatingSummariser(max_summary_tokens=50)
        >>> asyncio.run(summariser.summarise(None, [Msg.user("Hi"), Msg.assistant("Hello!")]))
        'User: Hi\\nAssistant: Hello!'
    """

    def __init__(
        self,
        *,
        max_summary_tokens: int = 300,
        max_line_chars: int = 200,
        counter: TokenCounter | None = None,
    ) -> None:
        if max_summary_tokens < 1 or max_line_chars < 1:
            raise ValueError("max_summary_tokens and max_line_chars must be at least 1")
        self._max_summary_tokens = max_summary_tokens
        self.max_line_chars = max_line_chars
        self.counter = counter or default_counter()

    @property
    def name(self) -> str:
        """``"truncate"``."""
        return "truncate"

    @property
    def max_summary_tokens(self) -> int:
        """The most tokens a summary may have."""
        return self._max_summary_tokens

    async def summarise(self, previous: str | None, messages: Sequence[Msg]) -> str:
        """The previous summary's lines plus one line per message part, newest kept."""
        return self.summarise_now(previous, messages)

    def summarise_now(self, previous: str | None, messages: Sequence[Msg]) -> str:
        """:meth:`summarise`, synchronously."""
        lines = previous.splitlines() if previous else []
        if lines and lines[0] == OMITTED_LINES:
            lines = lines[1:]
        for message in messages:
            lines.extend(render_message(message, self.max_line_chars))
        return _keep_newest(self.counter, lines, self._max_summary_tokens)


class ModelSummariser:
    """A summariser that asks a chat model, through the normal ``model.stream(ChatRequest(...))`` call.

    Each call sends :data:`SUMMARY_INSTRUCTIONS` and one user message holding the summary so far and the
    new messages as labelled lines; it asks for at most ``max_summary_tokens`` (``max_tokens``) at
    temperature 0. A span whose lines do not fit ``max_input_tokens`` is summarised in several calls,
    each folding its chunk into the summary of the previous ones; a single line that is too long is cut.
    A model that answers with no text gets the truncating summary for that chunk instead of an empty one.

    Args:
        model: any :class:`~rxagent.model.types.ChatModel` (often the agent's own, or a cheaper one).
        max_summary_tokens: the reply budget of each call and the most tokens a summary may have.
        max_input_tokens: the most tokens one summarising request may send.
        counter: counts the requests (default: the shared tiktoken counter).
        instructions: the system prompt (``{max_tokens}`` is filled in).
        max_line_chars: the most characters kept of one rendered message line.

    Raises:
        ValueError: the budgets leave no room for the instructions and a line of conversation.
    """

    def __init__(
        self,
        model: ChatModel,
        *,
        max_summary_tokens: int = 300,
        max_input_tokens: int = 3_000,
        counter: TokenCounter | None = None,
        instructions: str = SUMMARY_INSTRUCTIONS,
        max_line_chars: int = 1_500,
    ) -> None:
        if max_summary_tokens < 1:
            raise ValueError("max_summary_tokens must be at least 1")
        self.model = model
        self._max_summary_tokens = max_summary_tokens
        self.max_input_tokens = max_input_tokens
        self.counter = counter or default_counter()
        self.max_line_chars = max_line_chars
        self._system = Msg.system(instructions.format(max_tokens=max_summary_tokens))
        # What a request costs before any conversation line: instructions, the user message's frame and a
        # previous summary at its largest.
        self._frame_tokens = self.counter.count_request(
            ChatRequest(messages=(self._system, Msg.user(self._prompt("", []))))
        )
        room = max_input_tokens - self._frame_tokens - max_summary_tokens
        if room < 16:
            raise ValueError(
                f"max_input_tokens={max_input_tokens} leaves {room} tokens for conversation lines after the "
                f"instructions ({self._frame_tokens}) and a previous summary ({max_summary_tokens}); "
                "raise it or shorten the instructions"
            )
        self._line_room = room

    @property
    def name(self) -> str:
        """``"model:<model name>"``."""
        return f"model:{self.model.model_name}"

    @property
    def max_summary_tokens(self) -> int:
        """The most tokens a summary may have."""
        return self._max_summary_tokens

    @staticmethod
    def _prompt(previous: str, lines: Sequence[str]) -> str:
        return (
            f"Summary so far:\n{previous or '(none)'}\n\nNew messages:\n"
            + "\n".join(lines)
            + "\n\nWrite the updated summary."
        )

    def _chunks(self, messages: Sequence[Msg]) -> list[list[str]]:
        chunks: list[list[str]] = [[]]
        used = 0
        for message in messages:
            for line in render_message(message, self.max_line_chars):
                cost = self.counter.count_text(line) + 1
                if cost > self._line_room:
                    line = truncate_to_tokens(self.counter, line, self._line_room - 1)
                    cost = self._line_room
                if used + cost > self._line_room and chunks[-1]:
                    chunks.append([])
                    used = 0
                chunks[-1].append(line)
                used += cost
        return [chunk for chunk in chunks if chunk]

    async def summarise(self, previous: str | None, messages: Sequence[Msg]) -> str:
        """Fold ``messages`` into ``previous`` with one model call per chunk that fits the input budget.

        Raises:
            ModelError: the model call failed (nothing is kept: the window will try again next request).
        """
        from rxagent.operators import fold_message, last_value

        summary = previous or ""
        for lines in self._chunks(messages):
            prompt = self._prompt(summary, lines)
            request = ChatRequest(
                messages=(self._system, Msg.user(prompt)),
                max_tokens=self._max_summary_tokens,
                temperature=0.0,
            )
            reply = await last_value(self.model.stream(request).pipe(fold_message()))
            text = reply.text.strip()
            if not text:
                prior = summary.splitlines() if summary else []
                text = _keep_newest(self.counter, [*prior, *lines], self._max_summary_tokens)
            summary = truncate_to_tokens(self.counter, text, self._max_summary_tokens)
        return summary
