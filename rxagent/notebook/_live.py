"""The live run view: a run drawn in one output area that updates in place as its events arrive.

Three parts, usable on their own:

- :class:`RunView` folds a run's events into what is worth showing (the transcript so far, the text and
  thinking streaming now, tool calls being written, running with their progress, or waiting for a
  decision, retries and errors, and the result) and renders it as HTML and as text;
- :class:`Throttle` coalesces redraws: at most one per ``interval`` of its clock, and a change that came
  too soon is drawn when the interval ends even if no further event arrives (a tool running for a minute
  still shows as running). The clock and the timer are injectable, so tests run on virtual time;
- :func:`live` consumes a run's events through the bounded bridge
  (:func:`rxagent.operators.to_async_iterator`), feeds a :class:`RunView`, draws through a
  :class:`Throttle` into an IPython display handle, leaves the final transcript and result behind and
  returns the :class:`~rxagent.events.AgentResult`.

Why a throttle and not one redraw per event: a redraw sends the whole output area to the front end; a
local model streams 50 tokens a second and a remote one several hundred, and a browser that receives a
few hundred full redraws a second falls behind and freezes the notebook. Ten redraws a second look live.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

from reactivex import Observable

from rxagent.events import (
    AgentEvent,
    AgentResult,
    ErrorEvent,
    MessageCompleted,
    ModelCallFinished,
    PhaseChanged,
    RetryScheduled,
    RunStarted,
    StepNote,
    StepStarted,
    TextDelta,
    ThinkingDelta,
    ToolCallArgumentsDelta,
    ToolCallStarted,
    ToolExecutionStarted,
    ToolPermissionAsked,
    ToolProgress,
    ToolResult,
    ToolSuspended,
    UsageTotals,
)
from rxagent.messages import Msg
from rxagent.notebook._markup import clip, esc, visible
from rxagent.notebook._views import message_html, message_text, result_html, result_text
from rxagent.operators import to_async_iterator

__all__ = ["Cancellable", "DisplayTarget", "Frame", "RunView", "Throttle", "live"]

RunOutcome: TypeAlias = Literal["running", "finished", "failed", "cancelled"]


class Cancellable(Protocol):
    """What a timer returns: something that can be cancelled (``asyncio.TimerHandle`` is one)."""

    def cancel(self) -> None:
        """Stop the timer; its callback will not run."""
        ...


CallLater: TypeAlias = Callable[[float, Callable[[], None]], Cancellable]
"""Run a callback after a delay in seconds (``loop.call_later``); returns a handle to cancel it."""


@dataclass(frozen=True, slots=True, repr=False)
class Frame:
    """One drawing of a run: the same picture as HTML and as text (what IPython displays)."""

    html: str
    text: str

    def _repr_html_(self) -> str:
        return self.html

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text)

    def __repr__(self) -> str:
        return self.text


class DisplayTarget(Protocol):
    """Where frames are drawn: ``IPython.display.DisplayHandle`` is one; tests and widgets bring their own."""

    def update(self, obj: Frame, /) -> None:
        """Replace what the output area shows with ``obj``."""
        ...


# ---- the view --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Call:
    """What the view knows about one tool call it has heard of."""

    name: str
    status: str
    arguments: list[str] = field(default_factory=lambda: [])
    progress: str = ""
    done: bool = False


class RunView:
    """A run's events folded into what a person watching it wants to see; renders as HTML and text.

    Feed it events with :meth:`add` (any order a run emits them in, several runs one after another too),
    read it with :meth:`frame`. Streaming text and argument fragments are kept as lists of pieces and
    joined only when drawn, so adding an event costs the same however long the run gets.

    Example:
        >>> view = RunView()
        >>> view.outcome
        'running'
    """

    def __init__(self) -> None:
        self.messages: list[Msg] = []
        """The conversation as far as the events told it: each run's input, then every completed message."""
        self.result: AgentResult | None = None
        """The run's result, once it arrived."""
        self.outcome: RunOutcome = "running"
        """``running`` until :meth:`finish` says how the stream ended."""
        self.events = 0
        """Events added."""
        self.usage = UsageTotals()
        """Token usage of the model calls finished so far."""
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._calls: dict[str, _Call] = {}
        self._writing: dict[int, str] = {}  # index in the message being written -> call key
        self._phase = ""
        self._iteration = 0
        self._step = ""  # the node whose step runs (a custom assembly's names say what the run does)
        self._notices: list[str] = []
        self._error = ""

    def add(self, event: AgentEvent) -> None:
        """Take one event into the view."""
        self.events += 1
        match event:
            case TextDelta():
                self._text.append(event.text)
            case ThinkingDelta():
                self._thinking.append(event.text)
            case ToolCallStarted():
                key = event.call_id or f"#{event.index}"
                self._writing[event.index] = key
                self._calls[key] = _Call(event.name or "?", "writing arguments")
            case ToolCallArgumentsDelta():
                key = self._writing.get(event.index) or event.call_id or f"#{event.index}"
                self._calls.setdefault(key, _Call("?", "writing arguments")).arguments.append(event.fragment)
            case MessageCompleted():
                self.messages.append(event.message)
                if event.message.role == "assistant":
                    self._text.clear()
                    self._thinking.clear()
                    for key in self._writing.values():
                        self._calls.pop(key, None)  # now shown as part of the message
                    self._writing.clear()
                    for call in event.message.tool_calls:
                        self._calls[call.id] = _Call(call.name, "queued")
                # A result can arrive without a ToolResult event (a custom step refused the call, or
                # the result was sent in): the tool message is then the only news of it.
                for result in event.message.tool_results:
                    call = self._call(result.tool_use_id, result.name)
                    if not call.done:
                        call.status, call.progress, call.done = result.status, "", True
            case ToolExecutionStarted():
                self._call(event.call.id, event.call.name).status = "running"
            case ToolProgress():
                call = self._call(event.call_id, event.name)
                share = f"{event.fraction:.0%} " if event.fraction is not None else ""
                call.progress = f"{share}{event.message}".strip()
            case ToolPermissionAsked():
                call = self._call(event.call.id, event.call.name)
                call.status = "awaiting approval"
                call.progress = event.reason
            case ToolSuspended():
                self._call(event.call.id, event.call.name).status = "waiting for an external result"
            case ToolResult():
                call = self._call(event.result.tool_use_id, event.result.name)
                ran = call.status == "running"  # a denial or an external result never ran: no duration
                call.status = (
                    f"{event.result.status} · {event.duration_s:.2f} s" if ran else event.result.status
                )
                call.progress, call.done = "", True
            case RunStarted():
                self.messages.extend(event.input)
            case PhaseChanged():
                self._phase, self._iteration = event.phase, event.iteration
            case StepStarted():
                self._step = event.node
            case ModelCallFinished():
                self.usage.add(event.usage)
            case RetryScheduled():
                self._notices.append(
                    f"retry {event.retry_number} in {event.delay_s:.1f} s after: {clip(event.error, 300)[0]}"
                )
            case ErrorEvent():
                self._notices.append(f"{event.error_type}: {clip(event.message, 300)[0]}")
            case StepNote():  # a custom step's plan item or verdict
                self._notices.append(f"{event.source}: {clip(event.text, 300)[0]}")
            case AgentResult():
                self.result = event
                self.usage = event.usage
            case _:
                pass

    def _call(self, call_id: str, name: str) -> _Call:
        call = self._calls.get(call_id)
        if call is None:
            call = self._calls[call_id] = _Call(name, "")
        return call

    def finish(self, outcome: Literal["finished", "failed", "cancelled"], error: str = "") -> None:
        """Record how the stream ended (``error``: what failed it)."""
        self.outcome = outcome
        self._error = error

    # ---- rendering ----------------------------------------------------------------------------------

    def _shows(self, message: Msg | None) -> bool:
        """Whether the transcript holds ``message`` already (a final answer is in both)."""
        return message is not None and any(m.id == message.id for m in reversed(self.messages))

    def _statuses(self) -> dict[str, str]:
        return {
            key: " · ".join(part for part in (call.status, call.progress) if part)
            for key, call in self._calls.items()
        }

    def _header(self) -> str:
        if self.outcome == "running":
            phase = (
                f"{self._phase.lower().replace('_', ' ')}, iteration {self._iteration}" if self._phase else ""
            )
            state = " · ".join(part for part in ("● running", visible(self._step), phase) if part)
        elif self.outcome == "finished":
            state = "✓ finished" + (f" · {self.result.reason}" if self.result is not None else "")
        elif self.outcome == "failed":
            state = "✗ failed"
        else:
            state = "■ cancelled"
        return f"{state} · {self.events:,} events · {self.usage.total_tokens:,} tokens"

    def _writing_calls(self) -> list[tuple[str, str]]:
        shown: list[tuple[str, str]] = []
        for key in self._writing.values():
            call = self._calls.get(key)
            if call is not None:
                shown.append((call.name, clip("".join(call.arguments), 500)[0]))
        return shown

    def html(self) -> str:
        """The view as an HTML fragment (every text escaped)."""
        statuses = self._statuses()
        parts = [f'<div style="color:#6b7280;margin-bottom:4px">{esc(self._header())}</div>']
        parts.extend(message_html(message, statuses) for message in self.messages)
        if self._thinking:
            thinking = clip("".join(self._thinking))[0]
            parts.append(
                '<details open style="margin:2px 0"><summary style="color:#6b7280">thinking</summary>'
                f'<div style="white-space:pre-wrap;color:#6b7280">{esc(thinking)}</div></details>'
            )
        if self._text:
            text = clip("".join(self._text))[0]
            parts.append(
                f'<div style="white-space:pre-wrap;border-left:3px solid #059669;padding:2px 8px">'
                f"{esc(text)}▍</div>"
            )
        for name, arguments in self._writing_calls():
            parts.append(f"<div>⚙ <code>{esc(name)}</code> <code>{esc(arguments)}</code>▍</div>")
        for notice in self._notices[-5:]:
            parts.append(f'<div style="color:#b45309">{esc(notice)}</div>')
        if self._error:
            parts.append(f'<div style="color:#dc2626">{esc(self._error)}</div>')
        if self.result is not None:
            parts.append(result_html(self.result, answer=not self._shows(self.result.message)))
        font = "font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:13px;line-height:1.4"
        return f'<div style="{font}">{"".join(parts)}</div>'

    def text(self) -> str:
        """The view as plain text (hidden characters made visible)."""
        statuses = self._statuses()
        lines = [self._header()]
        lines.extend(message_text(message, statuses) for message in self.messages)
        if self._thinking:
            lines.append("[thinking] " + visible(clip("".join(self._thinking), 2_000)[0]))
        if self._text:
            lines.append("assistant: " + visible(clip("".join(self._text))[0]) + "▍")
        for name, arguments in self._writing_calls():
            lines.append(f"  ⚙ {visible(name)}({visible(arguments)}▍")
        lines.extend(visible(notice) for notice in self._notices[-5:])
        if self._error:
            lines.append(visible(self._error))
        if self.result is not None:
            lines.append(result_text(self.result, answer=not self._shows(self.result.message)))
        return "\n".join(lines)

    def frame(self) -> Frame:
        """The view now, as a :class:`Frame` (HTML and text rendered once)."""
        return Frame(self.html(), self.text())

    def _repr_html_(self) -> str:
        return self.html()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text())


# ---- the throttle -----------------------------------------------------------------------------------------


class Throttle:
    """Calls ``draw`` for changes, at most once per ``interval`` seconds of ``clock``.

    :meth:`changed` says something changed: it draws at once if the last drawing is ``interval`` old,
    otherwise it makes sure one drawing happens when the interval ends (one timer at a time, however many
    changes arrive meanwhile). :meth:`flush` draws a pending change now; :meth:`close` cancels the timer.

    Args:
        draw: draws the current state.
        interval: seconds between drawings (0 draws every change).
        clock: the time in seconds (``time.monotonic``); tests pass a clock they control.
        call_later: schedules the end-of-interval drawing (``None``: the running loop's ``call_later``);
            tests pass a timer they fire themselves.

    Raises:
        ValueError: ``interval`` is negative or not finite.

    Example:
        >>> drawn = []
        >>> now = [0.0]
        >>> throttle = Throttle(lambda: drawn.append(now[0]), interval=1.0, clock=lambda: now[0],
        ...                     call_later=lambda delay, callback: None)
        >>> for t in (0.0, 0.3, 0.6, 1.2):
        ...     now[0] = t
        ...     throttle.changed()
        >>> drawn
        [0.0, 1.2]
    """

    def __init__(
        self,
        draw: Callable[[], None],
        *,
        interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        call_later: CallLater | None = None,
    ) -> None:
        if not math.isfinite(interval) or interval < 0:
            raise ValueError(f"interval must be a finite number of seconds >= 0, got {interval!r}")
        self._draw = draw
        self._interval = interval
        self._clock = clock
        self._call_later = call_later
        self._last = -math.inf
        self._pending = False
        self._timer: Cancellable | None = None
        self.draws = 0
        """How many times ``draw`` was called."""

    def changed(self) -> None:
        """Something changed: draw now, or once the interval since the last drawing ends."""
        now = self._clock()
        wait = self._last + self._interval - now
        if wait <= 0:
            self._draw_now(now)
            return
        self._pending = True
        if self._timer is None:
            call_later = self._call_later or asyncio.get_running_loop().call_later
            self._timer = call_later(wait, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._pending:
            self._draw_now(self._clock())

    def _draw_now(self, now: float) -> None:
        self._cancel_timer()
        self._pending = False
        self._last = now
        self.draws += 1
        self._draw()

    def _cancel_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def flush(self) -> None:
        """Draw a change not drawn yet, now."""
        if self._pending:
            self._draw_now(self._clock())

    def close(self) -> None:
        """Cancel the pending timer (a change not drawn yet stays undrawn)."""
        self._cancel_timer()
        self._pending = False


# ---- live ----------------------------------------------------------------------------------------------


def _notebook_target(first: Frame) -> DisplayTarget:
    try:
        display: Any = importlib.import_module("IPython.display").display
    except ImportError:  # pragma: no cover - IPython is in the `notebook` extra and in every kernel
        raise ImportError(
            "the live view draws into IPython's display: install rxagent[notebook], or pass target="
        ) from None
    handle: Any = display(first, display_id=True)
    return handle


async def live(
    events: Observable[AgentEvent],
    *,
    interval: float = 0.1,
    clock: Callable[[], float] = time.monotonic,
    call_later: CallLater | None = None,
    target: DisplayTarget | None = None,
    max_buffer: int = 256,
) -> AgentResult:
    """Implementation of :func:`rxagent.notebook.live`, where the contract is documented."""
    if max_buffer < 1:
        raise ValueError(f"max_buffer must be at least 1, got {max_buffer!r}")
    view = RunView()
    # Settings are checked (by the throttle) before anything is drawn: a refused call leaves no output.
    throttle = Throttle(
        lambda: surface.update(view.frame()), interval=interval, clock=clock, call_later=call_later
    )
    if target is None:
        surface = _notebook_target(view.frame())
    else:
        surface = target
        surface.update(view.frame())
    try:
        async with contextlib.aclosing(to_async_iterator(events, max_buffer=max_buffer)) as stream:
            async for event in stream:
                view.add(event)
                throttle.changed()
    except asyncio.CancelledError:
        view.finish("cancelled")
        raise
    except Exception as error:
        view.finish("failed", f"{type(error).__name__}: {error}")
        raise
    else:
        view.finish("finished")
    finally:
        throttle.close()
        surface.update(view.frame())
    if view.result is None:
        raise LookupError("the event stream completed without an AgentResult")
    return view.result
