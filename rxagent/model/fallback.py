"""A model that asks the next one when a model fails before answering: :class:`FallbackModel`.

``FallbackModel([primary, secondary, ...])`` is a :class:`~rxagent.model.types.ChatModel`. Each call goes
to the first model; when that one fails *before its first chunk* with an error that says the model is out
of reach, the call goes to the next, and so on:

=====================================  ==================================================================
the error                              moves on?
=====================================  ==================================================================
connection failed or broke             yes (:class:`~rxagent.model.errors.ModelConnectionError`)
a timeout (connect, idle, total)       yes (:class:`~rxagent.model.errors.ModelTimeoutError`)
HTTP 5xx, HTTP 429                     yes (:class:`~rxagent.model.errors.ModelHTTPError`)
any error ``fallback_on`` names        yes
other 4xx, a malformed stream, …       no: the error is the call's
anything after the first chunk         no: the error is the call's (the answer has begun)
=====================================  ==================================================================

A model's own retries come first: an OpenAI-compatible model retries a 503 or a 429 by its
:class:`~rxagent.retry.RetryPolicy` (drawing on the run's budget), and only the
:class:`~rxagent.retry.RetryExhausted` it ends with moves the call on; the rule above is applied to the
error it gave up on. Once a model has streamed a chunk the answer is that model's: an error after it
propagates, since another model would start the answer over and the deltas already shown would be
repeated.

The answering model's name rides on the first chunk (``ChatChunk.model``), so the folded message keeps it
as ``metadata["model"]`` and the ``chat`` span of :class:`~rxagent.telemetry.Telemetry` as
``gen_ai.response.model``. When every model failed, the call fails with :class:`AllModelsFailed`, which
names each model's error.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from types import TracebackType
from typing import Self, TypeAlias, cast

from reactivex import Observable, abc

from rxagent.model.errors import ModelConnectionError, ModelError, ModelHTTPError, ModelTimeoutError
from rxagent.model.types import ChatChunk, ChatModel, ChatRequest, ModelCapabilities
from rxagent.operators import Slot, Source, subscribe_to
from rxagent.retry import RetryExhausted

__all__ = ["AllModelsFailed", "FallbackModel", "FallbackOn", "falls_back"]

_log = logging.getLogger("rxagent")

FallbackOn: TypeAlias = tuple[type[BaseException], ...] | Callable[[BaseException], bool]
"""The errors besides the built-in ones that move a call on: exception types, or a predicate."""


def falls_back(error: BaseException, also: FallbackOn = ()) -> bool:
    """Whether ``error`` (raised before a model's first chunk) moves a call to the next model: a
    connection error, a timeout, HTTP 5xx or 429, or an error ``also`` names. A
    :class:`~rxagent.retry.RetryExhausted` is judged by the error the retries gave up on (and by itself,
    for ``also``).

    Example:
        >>> falls_back(ModelHTTPError(503, "busy")), falls_back(ModelHTTPError(400, "bad request"))
        (True, False)
        >>> falls_back(ValueError("content policy"), also=(ValueError,))
        True
    """
    named: Callable[[BaseException], bool] = partial(_is_a, also) if isinstance(also, tuple | type) else also
    candidates = [error]
    if isinstance(error, RetryExhausted):
        candidates.append(error.last_error)
    for candidate in candidates:
        if isinstance(candidate, ModelConnectionError | ModelTimeoutError):
            return True
        if isinstance(candidate, ModelHTTPError) and (candidate.status >= 500 or candidate.status == 429):
            return True
        if named(candidate):
            return True
    return False


def _is_a(types: type[BaseException] | tuple[type[BaseException], ...], error: BaseException) -> bool:
    return isinstance(error, types)


class AllModelsFailed(ModelError):
    """Every model of a :class:`FallbackModel` failed before answering.

    Attributes:
        failures: each model's name and error, in the order they were tried; ``__cause__`` is the last.
    """

    def __init__(self, failures: Sequence[tuple[str, BaseException]]) -> None:
        listed = "; ".join(f"{name!r}: {type(error).__name__}: {error}" for name, error in failures)
        super().__init__(f"all {len(failures)} models failed before answering: {listed}")
        self.failures = tuple(failures)


class FallbackModel:
    """A chat model made of several: a call goes to the first, and to the next when one fails before it
    answers (see the module for which errors move it on).

    Args:
        models: the models in the order they are asked; at least one.
        fallback_on: further errors that move a call on: exception types, or a predicate on the error.
        name: the model's name (default ``fallback:first,second,…``).

    Its :attr:`capabilities` are what *every* model accepts, so a request built for it (tools, structured
    output, images) suits whichever model answers. ``async with FallbackModel([...]) as model`` (or
    :meth:`aclose`) closes the models.

    Example:
        >>> from rxagent.model.scripted import ScriptedModel
        >>> big, small = ScriptedModel(["hi"], model_name="big"), ScriptedModel(["hi"], model_name="small")
        >>> model = FallbackModel([big, small])
        >>> model.model_name
        'fallback:big,small'

    Raises:
        ValueError: no models.
    """

    provider_name = "rxagent.fallback"
    """Who serves the model (OpenTelemetry's ``gen_ai.provider.name``); the span's
    ``gen_ai.response.model`` names the model that answered."""

    def __init__(
        self, models: Sequence[ChatModel], *, fallback_on: FallbackOn = (), name: str | None = None
    ) -> None:
        if not models:
            raise ValueError("FallbackModel needs at least one model")
        self.models: tuple[ChatModel, ...] = tuple(models)
        """The models, in the order they are asked."""
        self._fallback_on = fallback_on
        self._name = name or "fallback:" + ",".join(model.model_name for model in self.models)
        every = [model.capabilities for model in self.models]
        self._capabilities = ModelCapabilities(
            tools=all(c.tools for c in every),
            forced_tool_choice=all(c.forced_tool_choice for c in every),
            json_schema_output=all(c.json_schema_output for c in every),
            thinking=all(c.thinking for c in every),
            images=all(c.images for c in every),
            documents=all(c.documents for c in every),
        )

    def __repr__(self) -> str:
        return f"FallbackModel([{', '.join(repr(m) for m in self.models)}])"

    async def aclose(self) -> None:
        """Close every model that can be closed (``aclose()``), each even when another one's close fails.

        Raises:
            ExceptionGroup: what the closes raised, if any did.
        """
        failures: list[Exception] = []
        for model in self.models:
            close = getattr(model, "aclose", None)
            if callable(close):
                try:
                    await cast("Callable[[], Awaitable[object]]", close)()
                except Exception as error:
                    failures.append(error)
        if failures:
            raise ExceptionGroup("closing the fallback's models failed", failures)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    @property
    def model_name(self) -> str:
        """The name given, or ``fallback:`` and the models' names."""
        return self._name

    @property
    def capabilities(self) -> ModelCapabilities:
        """What every one of the models accepts."""
        return self._capabilities

    def stream(self, request: ChatRequest) -> Observable[ChatChunk]:
        """The first answer to ``request`` any model gives, as a cold stream of chunks.

        The first chunk carries the answering model's name (``ChatChunk.model``, unless the model put one
        there itself).

        Returns:
            The chunks of the model that answered; an error after its first chunk is that model's, as is
            an error that does not move the call on (with a note naming the models that failed before
            it); when every model failed, :class:`AllModelsFailed`.

        Lifecycle:
            complete: when the answering model's stream completes.
            error: as above.
            cancel: disposes the model being asked (its request is cancelled and its connection freed);
                no further model is asked.
            re-subscribe: a new call, from the first model again.
        """

        def subscribe(
            observer: abc.ObserverBase[ChatChunk], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            call = _FallbackCall(self.models, self._fallback_on, request, observer, scheduler)
            call.ask(0)
            return call.slot

        return Source(subscribe)


class _FallbackCall:
    """One subscription: which model is being asked, what failed so far, and whether the answer began."""

    __slots__ = (
        "_fallback_on",
        "_models",
        "_observer",
        "_request",
        "_scheduler",
        "answering",
        "failures",
        "index",
        "slot",
    )

    def __init__(
        self,
        models: tuple[ChatModel, ...],
        fallback_on: FallbackOn,
        request: ChatRequest,
        observer: abc.ObserverBase[ChatChunk],
        scheduler: abc.SchedulerBase | None,
    ) -> None:
        self._models = models
        self._fallback_on = fallback_on
        self._request = request
        self._observer = observer
        self._scheduler = scheduler
        self.index = -1
        self.answering = False
        self.failures: list[tuple[str, BaseException]] = []
        self.slot = Slot()
        """Holds the subscription to the model being asked; disposing it ends the call."""

    def ask(self, index: int) -> None:
        """Subscribe to model ``index``."""
        self.index = index
        try:
            source = self._models[index].stream(self._request)
        except Exception as error:  # a model that fails to build its stream failed before answering
            self._failed(index, error)
            return
        failed = partial(self._failed, index)
        subscription = subscribe_to(source, self._on_next, failed, self._on_completed, self._scheduler)
        # A model that failed at once (inside subscribe) has already moved the call on: its subscription is
        # spent, and the slot holds the next model's.
        if self.index == index and not self.slot.is_disposed:
            self.slot.current = subscription
        else:
            subscription.dispose()

    def _on_next(self, chunk: ChatChunk) -> None:
        if not self.answering:
            self.answering = True
            if chunk.model is None:
                chunk = replace(chunk, model=self._models[self.index].model_name)
        self._observer.on_next(chunk)

    def _on_completed(self) -> None:
        self._observer.on_completed()

    def _failed(self, index: int, error: Exception) -> None:
        if self.slot.is_disposed:
            return
        name = self._models[index].model_name
        if self.answering or not falls_back(error, self._fallback_on):
            if self.failures and not self.answering:
                tried = ", ".join(f"{n!r} ({type(e).__name__})" for n, e in self.failures)
                error.add_note(f"after the fallback from {tried}")
            self._observer.on_error(error)
            return
        self.failures.append((name, error))
        following = index + 1
        if following == len(self._models):
            failed = AllModelsFailed(self.failures)
            failed.__cause__ = error
            self._observer.on_error(failed)
            return
        _log.warning(
            "model %r failed before answering (%s: %s); asking %r",
            name,
            type(error).__name__,
            error,
            self._models[following].model_name,
        )
        self.ask(following)
