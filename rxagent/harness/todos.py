"""The todo list: ``write_todos`` and ``read_todos``, kept in the session, recalled to the model each request.

:func:`todos_part` gives an agent two tools and one middleware:

=================  ==========================================================================================
``write_todos``    replaces the whole list (each item a line of text and a status: ``pending``,
                   ``in_progress``, ``completed``); at most :data:`MAX_TODOS` items
``read_todos``     the list as it stands
reminder           at the ``request`` cut point, a short system message after the history naming the open
                   items (at most :data:`REMINDER_ITEMS`); added to the request only, never stored
``acting``         after the ``ToolResult`` of a ``write_todos`` that changed the list, a
                   :class:`~rxagent.events.TodosUpdated` event with the whole list
=================  ==========================================================================================

Where the list is kept: the session state's extras, under :data:`TODOS_KEY`, as JSON. A change to the
extras is a fact of the session's log (``extras``, written with the tool call's result), and the log's
projection replays it, so a new agent over the same store finds the list again; no fact kind of its own is
needed. The reminder follows AgentScope's ``TaskReminderMiddleware``: a model deep in a long task sees
what is still open in every request, and the conversation does not fill up with copies of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Annotated

from pydantic import Field, JsonValue, TypeAdapter, ValidationError
from reactivex import Observable

from rxagent.agent.middleware import ActingStep, Middleware
from rxagent.context import RunContext, run_context_of
from rxagent.events import AgentEvent, TodoItem, TodosUpdated, ToolResult
from rxagent.harness._part import HarnessPart
from rxagent.messages import Msg
from rxagent.model.types import ChatRequest
from rxagent.operators import frame_pushing
from rxagent.state import AgentState
from rxagent.tools import ToolContext, tool

__all__ = [
    "MAX_TODOS",
    "REMINDER_ITEMS",
    "TODOS_INSTRUCTIONS",
    "TODOS_KEY",
    "TodoReminder",
    "read_todos",
    "todo_reminder",
    "todos_of",
    "todos_part",
    "write_todos",
]

TODOS_KEY = "todos"
"""Where the list is kept in ``AgentState.extras`` (a JSON list of ``{"content", "status"}``)."""

MAX_TODOS = 100
"""The most items a list may have."""

REMINDER_ITEMS = 10
"""The most open items the reminder names (it says how many more there are)."""

_REMINDER_CHARS = 120
"""The most characters of an item the reminder shows."""

TODOS_INSTRUCTIONS = (
    "You keep a todo list with write_todos and read_todos. For work of several steps, write the steps as "
    "items first; keep one item in_progress while you work on it and mark it completed as soon as it is "
    "done. write_todos replaces the whole list, so send every item each time."
)
"""The todo part's section of the system prompt."""

_ITEMS = TypeAdapter(list[TodoItem])
_MARKS = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}


def todos_of(state: AgentState | None) -> list[TodoItem]:
    """The todo list kept in ``state`` (empty when there is none).

    Raises:
        ValueError: the stored value is not a todo list (the session's extras were written by hand, say).
    """
    if state is None:
        return []
    stored = state.extras.get(TODOS_KEY)
    if stored is None:
        return []
    try:
        return _ITEMS.validate_python(stored)
    except ValidationError as error:
        raise ValueError(f"the session's todo list (extras[{TODOS_KEY!r}]) cannot be read: {error}") from None


def _render(items: Sequence[TodoItem]) -> str:
    if not items:
        return "The todo list is empty."
    return "\n".join(f"{i}. {_MARKS[item.status]} {item.content}" for i, item in enumerate(items, 1))


def _state_of(context: ToolContext[object]) -> AgentState:
    run = run_context_of(context.runtime)
    if run is None or run.state is None:
        raise RuntimeError("the todo list lives in a session: this tool works only inside an agent's run")
    return run.state


@tool(name="write_todos", idempotent=True)
async def write_todos(
    todos: Annotated[
        list[TodoItem],
        Field(description=f"the whole list in order, every item each time ({MAX_TODOS} at most)"),
    ],
    context: ToolContext[object],
) -> str:
    """Replace your todo list with ``todos`` (each item: content, and status pending, in_progress or
    completed). Returns the list as it now stands."""
    state = _state_of(context)
    if len(todos) > MAX_TODOS:
        raise ValueError(
            f"the list has {len(todos)} items, over the limit of {MAX_TODOS}: merge or drop some"
        )
    stripped = [item.model_copy(update={"content": " ".join(item.content.split())}) for item in todos]
    empty = [i for i, item in enumerate(stripped, 1) if not item.content]
    if empty:
        raise ValueError(f"item(s) {empty} have no text: give every item a line saying what is to be done")
    state.extras[TODOS_KEY] = [item.model_dump(mode="json") for item in stripped]
    counts = {
        s: sum(1 for item in stripped if item.status == s) for s in ("in_progress", "pending", "completed")
    }
    summary = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items() if n)
    return f"Todo list saved ({summary or 'empty'}):\n{_render(stripped)}"


@tool(name="read_todos", read_only=True, concurrency_safe=True)
async def read_todos(context: ToolContext[object]) -> str:
    """Your todo list as it stands."""
    return _render(todos_of(_state_of(context)))


def todo_reminder(items: Sequence[TodoItem]) -> Msg | None:
    """The reminder a request gets for ``items``: a system message naming the open ones (``None``: none
    is open)."""
    open_items = [item for item in items if item.status != "completed"]
    if not open_items:
        return None
    lines = [f"Reminder: {len(open_items)} item(s) of your todo list are still open:"]
    for item in open_items[:REMINDER_ITEMS]:
        text = item.content
        if len(text) > _REMINDER_CHARS:
            text = text[: _REMINDER_CHARS - 1] + "…"
        lines.append(f"- {_MARKS[item.status]} {text}")
    if len(open_items) > REMINDER_ITEMS:
        lines.append(f"- … and {len(open_items) - REMINDER_ITEMS} more (read_todos shows them)")
    lines.append("Update the list with write_todos as you finish them.")
    return Msg.system("\n".join(lines), metadata={"rxagent": "todo_reminder"})


class _TodoEvents(Middleware):
    """The ``acting`` hook of the todo part: a :class:`~rxagent.events.TodosUpdated` after the
    ``write_todos`` result that changed the list."""

    watches_events = False  # the acting hook adds an event after a ToolResult, when there is one

    def acting(
        self, step: ActingStep, ctx: RunContext, next: Callable[[ActingStep], Observable[AgentEvent]]
    ) -> Observable[AgentEvent]:
        """Tell a changed list with a :class:`~rxagent.events.TodosUpdated` right after the
        ``write_todos`` result that changed it."""
        state = ctx.state
        if state is None or not any(call.name == write_todos.name for call in step.calls):
            return next(step)
        told: list[JsonValue] = [state.extras.get(TODOS_KEY)]

        def each(event: AgentEvent, emit: Callable[[AgentEvent], None]) -> None:
            emit(event)
            if not isinstance(event, ToolResult) or event.result.name != write_todos.name:
                return
            now = state.extras.get(TODOS_KEY)
            if event.result.status != "ok" or now == told[0]:
                return
            told[0] = now
            emit(
                TodosUpdated(
                    run_id=event.run_id,
                    session_id=event.session_id,
                    trace_id=event.trace_id,
                    seq=event.seq,
                    parent_run_id=event.parent_run_id,
                    todos=todos_of(state),
                )
            )

        return next(step).pipe(frame_pushing(each))


class TodoReminder(_TodoEvents):
    """The todo part's middleware: the reminder of open items in each request, and the
    :class:`~rxagent.events.TodosUpdated` event after a ``write_todos`` that changed the list.

    Put it before (outside) a context budget, so that the budget counts the reminder with the rest of the
    request (:func:`~rxagent.harness.compose_parts` keeps the parts' order).

    Emits: :class:`~rxagent.events.TodosUpdated` (at the ``acting`` cut point, when anyone watches the
    run's events).
    """

    def request(
        self,
        request: ChatRequest,
        ctx: RunContext,
        next: Callable[[ChatRequest], Observable[ChatRequest | AgentEvent]],
    ) -> Observable[ChatRequest | AgentEvent]:
        """Add the reminder of open items after the request's messages (the request only: the session's
        history never holds it)."""
        try:
            reminder = todo_reminder(todos_of(ctx.state))
        except ValueError:
            reminder = None  # an unreadable list: read_todos says why when the model asks
        if reminder is None:
            return next(request)
        return next(replace(request, messages=(*request.messages, reminder)))


def todos_part(*, reminder: bool = True) -> HarnessPart:
    """The todo list as a harness part: ``write_todos``, ``read_todos``, their instructions, and the
    :class:`TodoReminder` middleware (``reminder=False``: no reminder in the requests; the
    ``TodosUpdated`` event is still emitted).

    Example:
        >>> part = todos_part()
        >>> [t.name for t in part.tools]
        ['write_todos', 'read_todos']
    """
    hooks = TodoReminder() if reminder else _TodoEvents()
    return HarnessPart(
        "todos", tools=(write_todos, read_todos), middleware=(hooks,), instructions=TODOS_INSTRUCTIONS
    )
