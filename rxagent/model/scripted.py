"""Test doubles: models that replay a script or compute answers from a function.

They stream exactly like a remote model (text and thinking in small deltas, tool-call arguments in
fragments with the id and name on the first one, a finish reason, then usage), record every request, and
run on the asyncio loop, so an agent tested against them behaves as it will in production.

Example:
    >>> from rxagent.model.scripted import ScriptedModel, ScriptedResponse, ScriptedToolCall
    >>> model = ScriptedModel([
    ...     ScriptedResponse(tool_calls=[ScriptedToolCall("add", {"a": 2, "b": 3})]),
    ...     "2 + 3 = 5",
    ... ])
"""

from __future__ import annotations

import inspect
import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from pydantic import JsonValue
from reactivex import Observable

from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.messages import MessageTotals, Msg
from rxagent.model.types import (
    ChatChunk,
    ChatRequest,
    FinishReason,
    ModelCapabilities,
    ToolCallDelta,
    Usage,
    check_content,
)
from rxagent.operators import from_async_iterable

__all__ = [
    "FunctionModel",
    "ScriptExhaustedError",
    "ScriptStep",
    "ScriptedModel",
    "ScriptedResponse",
    "ScriptedToolCall",
]


@dataclass(frozen=True, slots=True)
class ScriptedToolCall:
    """A tool call the scripted model makes.

    Attributes:
        name: tool name.
        arguments: a mapping (sent as its JSON) or the exact argument text, which may be broken on purpose.
        id: call id; ``None`` numbers calls ``call_1``, ``call_2``, … per model.
        fragments: how many pieces the argument text is streamed in.
    """

    name: str
    arguments: Mapping[str, JsonValue] | str = "{}"
    id: str | None = None
    fragments: int = 3

    @property
    def argument_text(self) -> str:
        """The argument text as streamed."""
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass(frozen=True, slots=True)
class ScriptedResponse:
    """One scripted model answer.

    Attributes:
        text: answer text, streamed in ``chunk_size``-character deltas.
        thinking: reasoning text, streamed before the answer.
        tool_calls: calls streamed after the text.
        usage: reported usage; ``None`` reports an estimate (about four characters a token, each message
            measured once however many requests repeat it).
        finish_reason: ``None`` picks ``tool_calls`` when there are calls, else ``stop``.
        chunk_size: characters per text or thinking delta.
        delay: seconds to wait before each chunk (on the model's clock; disposing cancels the wait).
        error: raise this after ``error_after`` chunks instead of finishing.
        error_after: chunks emitted before ``error`` is raised.
    """

    text: str = ""
    thinking: str = ""
    tool_calls: Sequence[ScriptedToolCall] = ()
    usage: Usage | None = None
    finish_reason: FinishReason | None = None
    chunk_size: int = 4
    delay: float = 0.0
    error: Exception | None = None
    error_after: int = 0


ScriptStep: TypeAlias = ScriptedResponse | str | Exception
"""A script entry: a response, a plain answer text, or an error the call fails with."""


class ScriptExhaustedError(AssertionError):
    """The model was called more often than its script allows."""


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), max(1, size))]


def _fragments(text: str, count: int) -> list[str]:
    if not text:
        return [""]
    count = max(1, min(count, len(text)))
    step = -(-len(text) // count)
    return [text[i : i + step] for i in range(0, len(text), step)]


def _characters(msg: Msg) -> int:
    """The length of a message's content blocks as JSON: what the input estimate counts."""
    return sum(len(block.model_dump_json()) for block in msg.content)


class _RecordingModel(ABC):
    """Shared behaviour of the test models: request recording, chunk rendering, the stream itself."""

    provider_name = "rxagent.scripted"
    """Who serves the model (OpenTelemetry's ``gen_ai.provider.name``): a script, in this process."""

    def __init__(self, *, model_name: str, capabilities: ModelCapabilities | None, clock: Clock) -> None:
        self._model_name = model_name
        self._clock = clock
        self._capabilities = capabilities or ModelCapabilities(json_schema_output=True, thinking=True)
        self._call_counter = 0
        # Each message's size is measured once and each conversation's running total kept, so estimating
        # a request's input costs what is new in it (a benchmark on this model measures the agent, not
        # the estimate).
        self._sizes = MessageTotals(_characters)
        self.requests: list[ChatRequest] = []
        """Every request received, in order (recorded when the call starts, i.e. at subscription)."""

    @property
    def model_name(self) -> str:
        """The name given at construction."""
        return self._model_name

    @property
    def capabilities(self) -> ModelCapabilities:
        """What this test model claims to accept (configurable, to exercise callers' fallbacks)."""
        return self._capabilities

    @abstractmethod
    async def _respond(self, request: ChatRequest) -> ScriptStep:
        """The answer to ``request``."""

    def stream(self, request: ChatRequest) -> Observable[ChatChunk]:
        """Emit the next answer as chunks. Each subscription is one call (recorded in ``requests``).

        Lifecycle:
            complete: after the finish reason and usage chunks. error: the scripted error,
            :class:`ScriptExhaustedError`, or :class:`~rxagent.model.errors.UnsupportedContentError` for
            images or documents its capabilities refuse (nothing recorded then). cancel: the pending delay
            is cancelled, nothing more is emitted.
        """

        def chunks() -> AsyncIterator[ChatChunk]:
            return self._chunks(request)

        return from_async_iterable(chunks)

    async def _chunks(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        check_content(request, self)  # capabilities without images or documents refuse them, as models do
        self.requests.append(request)
        step = await self._respond(request)
        if isinstance(step, Exception):
            raise step
        response = ScriptedResponse(text=step) if isinstance(step, str) else step
        for emitted, chunk in enumerate(self._render(response, request)):
            if response.error is not None and emitted >= response.error_after:
                raise response.error
            if response.delay:
                await self._clock.sleep(response.delay)
            yield chunk
        if response.error is not None:
            raise response.error

    def _estimate_input_tokens(self, request: ChatRequest) -> int:
        """About four characters a token, over the JSON of every content block the request sends."""
        return max(1, self._sizes.total(request.messages) // 4)

    def _render(self, response: ScriptedResponse, request: ChatRequest) -> Iterable[ChatChunk]:
        for piece in _pieces(response.thinking, response.chunk_size):
            yield ChatChunk(thinking=piece)
        for piece in _pieces(response.text, response.chunk_size):
            yield ChatChunk(text=piece)
        for index, call in enumerate(response.tool_calls):
            self._call_counter += 1
            call_id = call.id or f"call_{self._call_counter}"
            for position, fragment in enumerate(_fragments(call.argument_text, call.fragments)):
                first = position == 0
                yield ChatChunk(
                    tool_calls=(
                        ToolCallDelta(
                            index=index,
                            id=call_id if first else None,
                            name=call.name if first else None,
                            arguments=fragment,
                        ),
                    )
                )
        finish: FinishReason = response.finish_reason or ("tool_calls" if response.tool_calls else "stop")
        yield ChatChunk(finish_reason=finish)
        usage = response.usage
        if usage is None:
            produced = len(response.text) + len(response.thinking)
            produced += sum(len(call.argument_text) + len(call.name) for call in response.tool_calls)
            usage = Usage(
                input_tokens=self._estimate_input_tokens(request), output_tokens=max(1, produced // 4)
            )
        yield ChatChunk(usage=usage)


class ScriptedModel(_RecordingModel):
    """A model that answers with the next step of a script, one step per call.

    Args:
        script: the answers in order: :class:`ScriptedResponse`, plain text, or an exception to fail with.
        model_name: the name it reports.
        capabilities: what it claims to accept.
        clock: where the responses' ``delay`` passes: the loop's by default, a
            :class:`~rxagent.clock.VirtualClock` in tests.

    Example:
        >>> model = ScriptedModel(["Hello!"])
        >>> len(model.remaining)
        1
    """

    def __init__(
        self,
        script: Iterable[ScriptStep] = (),
        *,
        model_name: str = "scripted",
        capabilities: ModelCapabilities | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(model_name=model_name, capabilities=capabilities, clock=clock)
        self._script: list[ScriptStep] = list(script)
        self._next = 0

    @property
    def remaining(self) -> Sequence[ScriptStep]:
        """Script steps not used yet."""
        return tuple(self._script[self._next :])

    def extend(self, *steps: ScriptStep) -> None:
        """Append steps to the script."""
        self._script.extend(steps)

    def assert_complete(self) -> None:
        """Fail if script steps were left unused (the code under test called the model too rarely)."""
        if self._next < len(self._script):
            left = len(self._script) - self._next
            raise AssertionError(
                f"{left} scripted response(s) were never requested; the model was called {self._next} "
                f"time(s). Unused: {self.remaining!r}"
            )

    async def _respond(self, request: ChatRequest) -> ScriptStep:
        if self._next >= len(self._script):
            last_user = next((m.text for m in reversed(request.messages) if m.role == "user"), "")
            raise ScriptExhaustedError(
                f"ScriptedModel has no response left for call #{self._next + 1} "
                f"(script has {len(self._script)} step(s); last user text: {last_user[:80]!r})"
            )
        step = self._script[self._next]
        self._next += 1
        return step


class FunctionModel(_RecordingModel):
    """A model whose answers a function computes from the request (sync or async).

    Args:
        respond: computes the answer to a request (a :data:`ScriptStep`), or a coroutine of it.
        model_name: the name it reports.
        capabilities: what it claims to accept.
        clock: where the responses' ``delay`` passes: the loop's by default, a
            :class:`~rxagent.clock.VirtualClock` in tests.

    Example:
        >>> echo = FunctionModel(lambda request: "You said: " + request.messages[-1].text)
    """

    def __init__(
        self,
        respond: Callable[[ChatRequest], ScriptStep | Awaitable[ScriptStep]],
        *,
        model_name: str = "function",
        capabilities: ModelCapabilities | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(model_name=model_name, capabilities=capabilities, clock=clock)
        self._function = respond

    async def _respond(self, request: ChatRequest) -> ScriptStep:
        answer = self._function(request)
        if inspect.isawaitable(answer):
            return await answer
        return answer
