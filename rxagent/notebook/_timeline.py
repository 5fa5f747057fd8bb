"""Pictures of a finished run: where the time went (a timeline) and where the tokens went (per step).

:meth:`Timeline.from_events` turns a run's events into :class:`Span` values: one per model call
(``ModelCallStarted`` → ``ModelCallFinished``, with the ``RetryScheduled`` notices that fell inside it)
and one per tool call (``ToolExecutionStarted`` plus the ``duration_s`` of its ``ToolResult``; a call
refused or rejected before it ran is a span of no length at its result; a call still waiting for a
decision or an external result is a span of no length where it started waiting). Overlapping spans of
a kind go on separate lanes, so parallel tool calls are drawn side by side. :meth:`Timeline.svg` draws
them; :class:`UsageChart` draws the tokens of each model call.

The SVG is written here (no plotting library): one ``<rect class="rxa-bar">`` per span with
``data-kind``, ``data-lane`` and a ``<title>`` tooltip, one ``<g class="rxa-retry">`` per retry. Every
text in it is escaped and made visible (a model may name a tool anything), so the file always parses as
XML. Both pictures display inline in notebooks (``_repr_svg_``) and ``save`` to a file.

Times are the events' wall-clock ``time`` fields, so events read back from JSON
(:func:`rxagent.events.event_from_json`) give the same picture as live ones.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

from rxagent.chunks import Usage
from rxagent.events import (
    AgentEvent,
    EventHeader,
    ModelCallFinished,
    ModelCallStarted,
    RetryScheduled,
    ToolExecutionStarted,
    ToolPermissionAsked,
    ToolResult,
    ToolSuspended,
)
from rxagent.notebook._markup import esc

__all__ = ["Retry", "Span", "SpanKind", "StepUsage", "Timeline", "UsageChart"]

SpanKind: TypeAlias = Literal["model", "tool"]
"""What a span measures: a model call or a tool call."""

_COLOURS = {
    "model": "#4c78a8",
    "ok": "#59a14f",
    "error": "#e15759",
    "denied": "#b07aa1",
    "interrupted": "#9d9d9d",
    "waiting": "#f28e2b",
    "unfinished": "#bab0ac",
}
_FONT = 'font-family="system-ui,-apple-system,Segoe UI,sans-serif" font-size="11"'


class _Picture(ABC):
    """What the pictures share: an SVG drawing, written to a file or shown by a notebook."""

    __slots__ = ()

    @abstractmethod
    def svg(self, width: int = 860) -> str:
        """The picture as an SVG document ``width`` pixels wide."""

    def save(self, path: str | Path, width: int = 860) -> Path:
        """Write :meth:`svg` to ``path`` (UTF-8) and return the path."""
        target = Path(path)
        target.write_text(self.svg(width), encoding="utf-8")
        return target

    def _repr_svg_(self) -> str:
        return self.svg()


@dataclass(frozen=True, slots=True)
class Retry:
    """A retry inside a model call: when it was scheduled, how long it waited, and why."""

    at: float
    delay_s: float
    number: int
    error: str


@dataclass(frozen=True, slots=True)
class Span:
    """One model or tool call on the time axis.

    Attributes:
        kind: ``model`` or ``tool``.
        label: the model's name or the tool's.
        start: when it started (seconds since the epoch).
        end: when it ended (``start`` for a call that never ran).
        lane: its row among the spans of its kind (overlapping spans get different lanes).
        status: a model call's finish reason, or a tool result's status; ``waiting`` for a call waiting
            for a decision or a result, ``unfinished`` when the events end before the call did.
        run_id: the run it belongs to.
        call_id: the tool call's id (``None`` for model calls).
        iteration: the reasoning step of a model call.
        usage: a model call's token usage.
        retries: retries scheduled during a model call.
    """

    kind: SpanKind
    label: str
    start: float
    end: float
    lane: int
    status: str
    run_id: str
    call_id: str | None = None
    iteration: int | None = None
    usage: Usage | None = None
    retries: tuple[Retry, ...] = ()

    @property
    def duration(self) -> float:
        """Seconds from start to end."""
        return self.end - self.start


def _checked(events: Iterable[AgentEvent]) -> list[AgentEvent]:
    checked = list(events)
    for position, event in enumerate(checked):
        if not isinstance(event, EventHeader):  # pyright: ignore[reportUnnecessaryIsInstance] - untyped callers
            raise TypeError(f"item {position} is a {type(event).__name__}, not an rxagent event")
    if not checked:
        raise ValueError(
            "no events: pass the events of a run (e.g. `await to_list(agent.stream_events(...))`)"
        )
    return checked


def _lanes(spans: list[Span]) -> list[Span]:
    """The same spans, each on the first lane free at its start (interval partitioning)."""
    lane_ends: list[float] = []
    placed: list[Span] = []
    for span in sorted(spans, key=lambda s: (s.start, s.end)):
        lane = next((i for i, end in enumerate(lane_ends) if end <= span.start), len(lane_ends))
        if lane == len(lane_ends):
            lane_ends.append(-math.inf)
        # a zero-length span still takes its instant, so two at the same moment stay apart
        lane_ends[lane] = max(span.end, span.start + 1e-9)
        placed.append(_with_lane(span, lane))
    return placed


def _with_lane(span: Span, lane: int) -> Span:
    return Span(
        kind=span.kind,
        label=span.label,
        start=span.start,
        end=span.end,
        lane=lane,
        status=span.status,
        run_id=span.run_id,
        call_id=span.call_id,
        iteration=span.iteration,
        usage=span.usage,
        retries=span.retries,
    )


def _nice_step(span: float, ticks: int = 8) -> float:
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * power:
            return factor * power
    return 10 * power


def _seconds(value: float, step: float) -> str:
    decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    return f"{value:.{decimals}f} s"


@dataclass(frozen=True, slots=True)
class Timeline(_Picture):
    """The model and tool calls of one or more runs on a time axis.

    Attributes:
        spans: model spans first, then tool spans, each in order of start.
        origin: the time axis' zero (the first event's time).
        end: the last moment the events cover.

    Example:
        >>> # events = await to_list(agent.stream_events("..."))
        >>> # Timeline.from_events(events).save("run.svg")
    """

    spans: tuple[Span, ...]
    origin: float
    end: float

    @classmethod
    def from_events(cls, events: Iterable[AgentEvent]) -> Timeline:
        """The timeline of the calls the events report.

        Raises:
            ValueError: no events.
            TypeError: an item is not an rxagent event.
        """
        checked = _checked(events)
        origin = min(e.time for e in checked)
        last = max(e.time for e in checked)
        models: list[Span] = []
        open_models: dict[str, tuple[ModelCallStarted, list[Retry]]] = {}
        started: dict[str, ToolExecutionStarted] = {}
        waiting: dict[str, ToolPermissionAsked | ToolSuspended] = {}
        tools: list[Span] = []
        for event in checked:
            match event:
                case ModelCallStarted():
                    open_models[event.run_id] = (event, [])
                case RetryScheduled():
                    if event.run_id in open_models:
                        retry = Retry(event.time, event.delay_s, event.retry_number, event.error)
                        open_models[event.run_id][1].append(retry)
                case ModelCallFinished():
                    opened = open_models.pop(event.run_id, None)
                    start = opened[0].time if opened else event.time - event.latency_s
                    models.append(
                        Span(
                            kind="model",
                            label=opened[0].model if opened else "model",
                            start=start,
                            end=event.time,
                            lane=0,
                            status=event.finish_reason or "ok",
                            run_id=event.run_id,
                            iteration=event.iteration,
                            usage=event.usage,
                            retries=tuple(opened[1]) if opened else (),
                        )
                    )
                case ToolExecutionStarted():
                    started[event.call.id] = event
                case ToolPermissionAsked() | ToolSuspended():
                    waiting[event.call.id] = event
                case ToolResult():
                    result = event.result
                    waiting.pop(result.tool_use_id, None)
                    began = started.pop(result.tool_use_id, None)
                    start = began.time if began is not None else event.time
                    end = start + event.duration_s if began is not None else start
                    tools.append(
                        Span(
                            kind="tool",
                            label=result.name,
                            start=start,
                            end=end,
                            lane=0,
                            status=result.status,
                            run_id=event.run_id,
                            call_id=result.tool_use_id,
                        )
                    )
                case _:
                    pass
        for opened, retries in open_models.values():
            models.append(
                Span(
                    kind="model",
                    label=opened.model,
                    start=opened.time,
                    end=last,
                    lane=0,
                    status="unfinished",
                    run_id=opened.run_id,
                    iteration=opened.iteration,
                    retries=tuple(retries),
                )
            )
        for call_id, began in started.items():
            tools.append(
                Span("tool", began.call.name, began.time, last, 0, "unfinished", began.run_id, call_id)
            )
        for call_id, asked in waiting.items():
            tools.append(
                Span("tool", asked.call.name, asked.time, asked.time, 0, "waiting", asked.run_id, call_id)
            )
        end = max([last, *(s.end for s in models), *(s.end for s in tools)])
        return cls(spans=(*_lanes(models), *_lanes(tools)), origin=origin, end=end)

    @property
    def model_calls(self) -> tuple[Span, ...]:
        """The model spans."""
        return tuple(s for s in self.spans if s.kind == "model")

    @property
    def tool_calls(self) -> tuple[Span, ...]:
        """The tool spans."""
        return tuple(s for s in self.spans if s.kind == "tool")

    def lanes(self, kind: SpanKind) -> int:
        """How many lanes the spans of ``kind`` need (the most that overlapped at once)."""
        return max((s.lane + 1 for s in self.spans if s.kind == kind), default=0)

    def svg(self, width: int = 860) -> str:
        """The timeline as an SVG document.

        Raises:
            ValueError: ``width`` below 200 pixels.
        """
        if width < 200:
            raise ValueError(f"width must be at least 200 pixels, got {width}")
        left, right, top, lane_height, gap = 96, 16, 28, 20, 4
        rows = [("model", lane) for lane in range(self.lanes("model"))]
        rows += [("tool", lane) for lane in range(self.lanes("tool"))]
        height = top + len(rows) * (lane_height + gap) + 34
        duration = max(self.end - self.origin, 1e-3)
        scale = (width - left - right) / duration

        def x(moment: float) -> float:
            return left + (moment - self.origin) * scale

        def y(kind: str, lane: int) -> float:
            return top + rows.index((kind, lane)) * (lane_height + gap)

        summary = f"{len(self.model_calls)} model call(s), {len(self.tool_calls)} tool call(s)"
        out = [
            f'<svg xmlns="http://www.w3.org/2000/svg" class="rxa-timeline" width="{width}" height="{height}"'
            f' viewBox="0 0 {width} {height}" {_FONT}>',
            f"<title>{esc(summary)}</title>",
            f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        ]
        out.extend(self._legend(left))
        for kind, lane in rows:
            name = "model" if kind == "model" else "tools"
            label = name if lane == 0 else f"{name} {lane + 1}"
            out.append(
                f'<text class="rxa-lane" x="{left - 8}" y="{y(kind, lane) + 14:.1f}" text-anchor="end"'
                f' fill="#374151">{esc(label)}</text>'
            )
        axis_y = top + len(rows) * (lane_height + gap) + 6
        step = _nice_step(duration)
        tick = 0.0
        while tick <= duration + 1e-9:
            tx = x(self.origin + tick)
            out.append(
                f'<line x1="{tx:.1f}" y1="{top - 4}" x2="{tx:.1f}" y2="{axis_y}" stroke="#e5e7eb"/>'
                f'<text class="rxa-tick" x="{tx:.1f}" y="{axis_y + 14}" text-anchor="middle" '
                f'fill="#6b7280">{esc(_seconds(tick, step))}</text>'
            )
            tick += step
        for span in self.spans:
            out.append(self._bar(span, x(span.start), x(span.end), y(span.kind, span.lane), lane_height))
            for retry in span.retries:
                rx = x(retry.at)
                wait = max(retry.delay_s * scale, 1.0)
                by = y(span.kind, span.lane)
                tip = f"retry {retry.number} after {retry.error}; waited {retry.delay_s:.2f} s"
                out.append(
                    f'<g class="rxa-retry"><title>{esc(tip)}</title>'
                    f'<rect x="{rx:.1f}" y="{by:.1f}" width="{wait:.1f}" height="{lane_height}" '
                    f'fill="#ffffff" fill-opacity="0.45"/>'
                    f'<path d="M{rx:.1f},{by - 3:.1f} l-4,-6 h8 z" fill="#dc2626"/>'
                    f'<line x1="{rx:.1f}" y1="{by:.1f}" x2="{rx:.1f}" y2="{by + lane_height:.1f}" '
                    f'stroke="#dc2626" stroke-width="1.5"/></g>'
                )
        out.append("</svg>")
        return "".join(out)

    @staticmethod
    def _legend(left: int) -> list[str]:
        items = [
            ("model call", _COLOURS["model"]),
            ("tool ok", _COLOURS["ok"]),
            ("tool error", _COLOURS["error"]),
        ]
        items += [("denied", _COLOURS["denied"]), ("waiting", _COLOURS["waiting"]), ("retry", "#dc2626")]
        out: list[str] = []
        cursor = left
        for label, colour in items:
            out.append(
                f'<rect x="{cursor}" y="6" width="10" height="10" fill="{colour}"/>'
                f'<text x="{cursor + 14}" y="15" fill="#374151">{esc(label)}</text>'
            )
            cursor += 24 + 7 * len(label)
        return out

    @staticmethod
    def _bar(span: Span, x0: float, x1: float, y: float, height: int) -> str:
        colour = _COLOURS["model"] if span.kind == "model" else _COLOURS.get(span.status, "#6b7280")
        width = max(x1 - x0, 2.0)
        tip = f"{span.label} · {span.duration:.3f} s · {span.status}"
        if span.kind == "model":
            tip += f" · iteration {span.iteration}"
            if span.usage is not None:
                tip += f" · {span.usage.input_tokens} in / {span.usage.output_tokens} out tokens"
        else:
            tip += f" · {span.call_id}"
        hollow = span.status in ("waiting", "unfinished")
        fill = f'fill="#ffffff" stroke="{colour}" stroke-dasharray="3 2"' if hollow else f'fill="{colour}"'
        call = f' data-call-id="{esc(span.call_id)}"' if span.call_id is not None else ""
        label = ""
        if width > 7 * len(span.label) + 8:
            text_colour = colour if hollow else "#ffffff"
            label = (
                f'<text x="{x0 + 4:.1f}" y="{y + 14:.1f}" fill="{text_colour}" pointer-events="none">'
                f"{esc(span.label)}</text>"
            )
        return (
            f'<rect class="rxa-bar" data-kind="{span.kind}" data-lane="{span.lane}" '
            f'data-status="{esc(span.status)}"{call} x="{x0:.1f}" y="{y:.1f}" width="{width:.1f}" '
            f'height="{height}" rx="3" {fill}>'
            f"<title>{esc(tip)}</title></rect>{label}"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(
            f"Timeline: {len(self.model_calls)} model call(s), {len(self.tool_calls)} tool call(s) over "
            f"{self.end - self.origin:.3f} s; lanes: model {self.lanes('model')}, tools {self.lanes('tool')}"
        )


@dataclass(frozen=True, slots=True)
class StepUsage:
    """The tokens of one model call: its position in the run, its reasoning step, and its usage."""

    step: int
    iteration: int
    run_id: str
    usage: Usage


@dataclass(frozen=True, slots=True)
class UsageChart(_Picture):
    """Input and output tokens of each model call, as stacked bars.

    Attributes:
        steps: one per ``ModelCallFinished``, in order.
    """

    steps: tuple[StepUsage, ...]

    @classmethod
    def from_events(cls, events: Iterable[AgentEvent]) -> UsageChart:
        """The usage of every model call the events report.

        Raises:
            ValueError: no events.
            TypeError: an item is not an rxagent event.
        """
        finished = [e for e in _checked(events) if isinstance(e, ModelCallFinished)]
        return cls(
            tuple(
                StepUsage(number, e.iteration, e.run_id, e.usage or Usage())
                for number, e in enumerate(finished, start=1)
            )
        )

    def svg(self, width: int = 860) -> str:
        """The chart as an SVG document (one ``<g class="rxa-step">`` per model call).

        Raises:
            ValueError: ``width`` below 200 pixels.
        """
        if width < 200:
            raise ValueError(f"width must be at least 200 pixels, got {width}")
        left, top, plot, bottom = 64, 28, 180, 34
        height = top + plot + bottom
        peak = max((s.usage.total_tokens for s in self.steps), default=0) or 1
        count = max(len(self.steps), 1)
        slot = (width - left - 16) / count
        bar = max(min(slot * 0.6, 60.0), 2.0)
        total_in = sum(s.usage.input_tokens for s in self.steps)
        total_out = sum(s.usage.output_tokens for s in self.steps)
        summary = f"{len(self.steps)} model call(s): {total_in} input, {total_out} output tokens"
        out = [
            f'<svg xmlns="http://www.w3.org/2000/svg" class="rxa-usage" width="{width}" height="{height}"'
            f' viewBox="0 0 {width} {height}" {_FONT}>',
            f"<title>{esc(summary)}</title>",
            f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
            f'<rect x="{left}" y="6" width="10" height="10" fill="#4c78a8"/>'
            f'<text x="{left + 14}" y="15" fill="#374151">input tokens</text>'
            f'<rect x="{left + 100}" y="6" width="10" height="10" fill="#f58518"/>'
            f'<text x="{left + 114}" y="15" fill="#374151">output tokens</text>',
        ]
        step = _nice_step(peak, 4)
        level = 0.0
        while level <= peak + 1e-9:
            ly = top + plot - level / peak * plot
            out.append(
                f'<line x1="{left}" y1="{ly:.1f}" x2="{width - 16}" y2="{ly:.1f}" stroke="#e5e7eb"/>'
                f'<text x="{left - 6}" y="{ly + 4:.1f}" text-anchor="end" fill="#6b7280">'
                f"{int(level):,}</text>"
            )
            level += max(step, 1.0)
        for index, item in enumerate(self.steps):
            bx = left + index * slot + (slot - bar) / 2
            input_h = item.usage.input_tokens / peak * plot
            output_h = item.usage.output_tokens / peak * plot
            base = top + plot
            tip = (
                f"model call {item.step} (iteration {item.iteration}): {item.usage.input_tokens} input, "
                f"{item.usage.output_tokens} output tokens"
            )
            out.append(
                f'<g class="rxa-step" data-step="{item.step}"><title>{esc(tip)}</title>'
                f'<rect x="{bx:.1f}" y="{base - input_h:.1f}" width="{bar:.1f}" height="{input_h:.1f}" '
                f'fill="#4c78a8"/>'
                f'<rect x="{bx:.1f}" y="{base - input_h - output_h:.1f}" width="{bar:.1f}" '
                f'height="{output_h:.1f}" fill="#f58518"/>'
                f'<text x="{bx + bar / 2:.1f}" y="{base + 14}" text-anchor="middle" fill="#6b7280">'
                f"{item.step}</text></g>"
            )
        out.append(
            f'<text x="{left + (width - left) / 2:.1f}" y="{height - 4}" text-anchor="middle" fill="#374151">'
            "model call</text></svg>"
        )
        return "".join(out)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        tokens_in = sum(s.usage.input_tokens for s in self.steps)
        tokens_out = sum(s.usage.output_tokens for s in self.steps)
        printer.text(
            f"UsageChart: {len(self.steps)} model call(s), {tokens_in} input / {tokens_out} output tokens"
        )
