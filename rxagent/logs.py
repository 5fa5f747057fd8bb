"""Log lines that say which run wrote them, as JSON.

While a run's code runs — its steps, its model call, its tools (async ones, and sync ones in their worker
threads) — its :class:`~rxagent.context.RunContext` is the *current run*: a context variable set around
the run's subscription, which every asyncio task the run starts inherits. :class:`RunLogFilter` stamps
each log record with the current run's ``trace_id``, ``run_id`` and ``session_id`` (and the current
OpenTelemetry ``span_id`` when :mod:`rxagent.telemetry` is at work), so log lines of rxagent and of your
own tools join the run's events and spans; :class:`JsonLogFormatter` writes a record as one JSON object
per line.

Enable it with one handler (on the root logger it takes your tools' loggers too)::

    import logging
    from rxagent.logs import json_log_handler

    logging.getLogger().addHandler(json_log_handler())   # stderr; json_log_handler(stream) for another
    logging.getLogger().setLevel(logging.INFO)

A line::

    {"time": "2026-12-01T10:00:00.123Z", "level": "WARNING", "logger": "shop.tools", "message": "card
    declined", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7",
    "run_id": "run_5c1e…", "session_id": "alice"}

Fields a record already has (``logger.info(..., extra={"run_id": ...})``) win over the current run's.
Outside any run the ids are left out, or taken from the current OpenTelemetry span when there is one.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import IO, Any, TypeVar

from reactivex import Observable, abc

from rxagent.context import RunContext
from rxagent.operators import Operator, Source, subscribe_through

__all__ = ["JsonLogFormatter", "RunLogFilter", "current_run", "json_log_handler", "with_current_run"]

_T = TypeVar("_T")

_current_run: ContextVar[RunContext | None] = ContextVar("rxagent_current_run", default=None)

_LOG_FIELDS = ("trace_id", "span_id", "run_id", "parent_run_id", "session_id")
"""The run fields a line carries when known, in this order."""


def _span_ids() -> tuple[str, str] | None:
    """The current OpenTelemetry span's ``(trace_id, span_id)``, if there is one."""
    # Only when something imported OpenTelemetry already: otherwise there can be no current span, and
    # importing it here would cost every program that logs some 40 ms.
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    get_current_span: Callable[[], Any] = getattr(trace, "get_current_span")  # noqa: B009
    span_context = get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}"


def current_run() -> RunContext | None:
    """The context of the run whose code is running now (``None`` outside runs)."""
    return _current_run.get()


def with_current_run(ctx: RunContext[object]) -> Operator[_T, _T]:
    """Subscribe the source with ``ctx`` as the current run (see the module docstring).

    Items and signals pass unchanged; the context variable is set only while the source subscribes, so
    what the subscription starts (tasks, and the worker threads of sync tools) inherits it and nothing
    else does.

    Lifecycle:
        complete, error, cancel: as the source's. re-subscribe: sets it again.
    """

    def operator(source: Observable[_T]) -> Observable[_T]:
        def subscribe(
            observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            token = _current_run.set(ctx)
            try:
                return subscribe_through(source, observer, scheduler)  # no link of its own
            finally:
                _current_run.reset(token)

        return Source(subscribe)

    return operator


class RunLogFilter(logging.Filter):
    """Stamp each record with the current run's ``trace_id``, ``run_id``, ``parent_run_id``,
    ``session_id`` and the current span's ``span_id`` (fields it already has are kept).

    Put it on a handler (as :func:`json_log_handler` does) so it runs in the thread that logs, where the
    current run is known: a handler that formats in another thread (``QueueHandler``'s listener) then
    still writes the ids.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Add the fields; never drops a record."""
        run = _current_run.get()
        spans = _span_ids()
        fields: dict[str, str | None] = {}
        if run is not None:
            fields = {
                "trace_id": run.trace_id,
                "run_id": run.run_id or None,
                "parent_run_id": run.parent_run_id,
                "session_id": run.session_id,
            }
        if spans is not None and fields.get("trace_id", spans[0]) == spans[0]:
            fields.setdefault("trace_id", spans[0])
            fields["span_id"] = spans[1]
        for name, value in fields.items():
            if value is not None and not hasattr(record, name):
                setattr(record, name, value)
        return True


class JsonLogFormatter(logging.Formatter):
    """Write a record as one JSON object on one line.

    Keys: ``time`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``, ``message``, then those of
    ``trace_id``, ``span_id``, ``run_id``, ``parent_run_id``, ``session_id`` the record carries (see
    :class:`RunLogFilter`), then ``exception`` and ``stack`` (formatted text) when the record has them.
    A message that is not text is written as its ``str``.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line (no trailing newline: the handler adds it)."""
        moment = datetime.fromtimestamp(record.created, UTC)
        line: dict[str, str] = {
            "time": moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _LOG_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = str(value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False)


def json_log_handler(stream: IO[str] | None = None, level: int = logging.NOTSET) -> logging.Handler:
    """A handler writing JSON lines with the run's ids to ``stream`` (default: ``sys.stderr``).

    It is a ``logging.StreamHandler`` with a :class:`RunLogFilter` and a :class:`JsonLogFormatter`; add it
    to the loggers you want as JSON (the root logger for all of them, ``"rxagent"`` for rxagent's own).
    """
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setLevel(level)
    handler.addFilter(RunLogFilter())
    handler.setFormatter(JsonLogFormatter())
    return handler
