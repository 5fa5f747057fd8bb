"""Approvals in a notebook: approve / deny buttons for the tool calls that wait for a human.

A run that ends with reason ``PERMISSION_ASKING`` leaves its asking calls in the session state.
``panel = await approvals(agent, ctx)`` shows one row per call (the call, its arguments, why it asks,
Approve and Deny buttons, an optional reason); once every call has a decision the panel resumes the
session with them, ``agent.stream_events([ToolDecision(...), ...], ctx)``, drawn live under the buttons.
If the resumed run asks again, a new panel for the new calls appears below (``panel.next``).

Without ``ipywidgets`` (the ``notebook`` extra) the panel prints the call to make instead, with the
calls' ids filled in; the snippet is valid Python whatever the model put in the call (ids are written
with ``repr``, an exact literal; names and arguments go in comments with every line break and hidden
character escaped).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rxagent.agent import ReActAgent, ToolDecision
from rxagent.context import RuntimeContext
from rxagent.events import AgentResult
from rxagent.messages import Msg
from rxagent.notebook._live import Frame, live
from rxagent.notebook._markup import esc
from rxagent.notebook._views import arguments_text, message_html
from rxagent.state import PendingCall

__all__ = ["ApprovalPanel", "approvals"]


def _one_line(text: str) -> str:
    """``text`` for a comment: ``repr`` escapes every line break and every non-printable character."""
    return repr(text)[1:-1]


@dataclass(slots=True)
class _Row:
    approve: Any
    deny: Any
    reason: Any
    status: Any


class ApprovalPanel:
    """The calls of one session that wait for a decision, with the means to decide them.

    Build it with :func:`approvals`. :meth:`decide` records one decision (the buttons call it); when every
    call has one, the panel resumes the session with all of them in one run, whose result
    :attr:`result` resolves to.

    Args:
        agent: the agent whose session holds the calls.
        calls: the calls asking for permission (``PendingCall`` values of kind ``ask``).
        ctx: the session's context (``None``: the default session).
        agent_name: how the snippet names the agent.
        ctx_name: how the snippet names the context.
        interval: seconds between redraws of the resumed run.

    Raises:
        ValueError: a name is not a Python identifier, or a call is not of kind ``ask``.
        RuntimeError: created outside a running event loop.
    """

    def __init__(
        self,
        agent: ReActAgent,
        calls: Sequence[PendingCall],
        ctx: RuntimeContext | None = None,
        *,
        agent_name: str = "agent",
        ctx_name: str = "ctx",
        interval: float = 0.1,
    ) -> None:
        for name in (agent_name, ctx_name):
            if not name.isidentifier():
                raise ValueError(f"{name!r} is not a Python identifier")
        external = [p.call.id for p in calls if p.kind != "ask"]
        if external:
            raise ValueError(f"calls {external} wait for an external result, not for a decision")
        self.agent = agent
        self.ctx = ctx
        self.calls = tuple(calls)
        """The calls waiting for a decision, in call order."""
        self.decisions: dict[str, ToolDecision] = {}
        """Decisions made so far, by call id."""
        self.agent_name = agent_name
        self.ctx_name = ctx_name
        self.interval = interval
        self._loop = asyncio.get_running_loop()
        self.result: asyncio.Future[AgentResult] = self._loop.create_future()
        """The resumed run's result (its error, if it failed), once every call was decided."""
        # The panel shows a failed run's error; nobody need await `result` to hear of it.
        self.result.add_done_callback(lambda done: done.cancelled() or done.exception())
        self.frame: Frame | None = None
        """The resumed run's latest drawing."""
        self.next: ApprovalPanel | None = None
        """A panel for calls the resumed run asked about in turn."""
        self._sending: concurrent.futures.Future[None] | None = None
        self._rows: dict[str, _Row] = {}
        self._box: Any = None
        self._output: Any = None

    # ---- deciding --------------------------------------------------------------------------------------

    @property
    def sent(self) -> bool:
        """True once the decisions went to the agent."""
        return self._sending is not None

    def decide(self, call_id: str, allow: bool, reason: str = "") -> None:
        """Record the decision on one call; the last decision sends them all (from any thread).

        Raises:
            ValueError: no waiting call has this id, or it was decided already.
            RuntimeError: the decisions were sent already.
        """
        if self.sent:
            raise RuntimeError("the decisions were sent already; a new panel shows calls asked since")
        if call_id not in {p.call.id for p in self.calls}:
            waiting = ", ".join(p.call.id for p in self.calls) or "none"
            raise ValueError(f"no call with id {call_id!r} waits for a decision here (waiting: {waiting})")
        if call_id in self.decisions:
            raise ValueError(f"call {call_id!r} was decided already")
        self.decisions[call_id] = ToolDecision(call_id, allow=allow, reason=reason)
        row = self._rows.get(call_id)
        if row is not None:
            row.approve.disabled = row.deny.disabled = row.reason.disabled = True
            row.status.value = f"<b>{'approved' if allow else 'denied'}</b>"
        if len(self.decisions) == len(self.calls):
            decisions = [self.decisions[p.call.id] for p in self.calls]
            # Widget callbacks may come from another thread than the loop's: hand the run to the loop.
            self._sending = asyncio.run_coroutine_threadsafe(self._resume(decisions), self._loop)

    async def _resume(self, decisions: list[ToolDecision]) -> None:
        try:
            result = await live(
                self.agent.stream_events(decisions, self.ctx), target=self, interval=self.interval
            )
        except asyncio.CancelledError:
            self.result.cancel()
            raise
        except Exception as error:  # the panel shows it; whoever awaits `result` gets it
            self.result.set_exception(error)
            return
        self.result.set_result(result)
        if result.reason == "PERMISSION_ASKING":
            self.next = await approvals(
                self.agent,
                self.ctx,
                agent_name=self.agent_name,
                ctx_name=self.ctx_name,
                interval=self.interval,
            )
            if self._box is not None:
                self._box.children = (*self._box.children, self.next.widget())

    def update(self, obj: Frame, /) -> None:
        """Show a drawing of the resumed run (the live view draws here)."""
        self.frame = obj
        if self._output is not None:
            self._output.value = obj.html

    # ---- showing -----------------------------------------------------------------------------------------

    def snippet(self) -> str:
        """The Python to run instead of pressing the buttons: one ``ToolDecision`` per waiting call."""
        if not self.calls:
            return "# nothing waits for a decision in this session"
        lines = [
            "from rxagent.agent import ToolDecision",
            "",
            f"result = await {self.agent_name}.call(",
            "    [",
        ]
        for pending in self.calls:
            call = pending.call
            decided = self.decisions.get(call.id)
            allow = decided.allow if decided is not None else True
            about = f"{call.name}({arguments_text(call)[:200]})"
            if pending.reason:
                about += f" asks: {pending.reason[:200]}"
            lines.append(f"        ToolDecision({call.id!r}, allow={allow}),  # {_one_line(about)}")
        lines.append("    ],")
        if self.ctx is not None:
            lines.append(f"    {self.ctx_name},")
        lines.append(")")
        return "\n".join(lines)

    def widget(self) -> Any:
        """The panel as an ``ipywidgets.VBox`` (built once).

        Raises:
            ImportError: ipywidgets is not installed (``pip install rxagent[notebook]``).
        """
        if self._box is not None:
            return self._box
        widgets: Any = importlib.import_module("ipywidgets")
        count = len(self.calls)
        title = f"{count} call(s) wait for your decision" if count else "nothing waits for a decision"
        children: list[Any] = [widgets.HTML(f"<b>{esc(title)}</b>")]
        for pending in self.calls:
            children.append(self._row_widget(widgets, pending))
        self._output = widgets.HTML(self.frame.html if self.frame is not None else "")
        children.append(self._output)
        self._box = widgets.VBox(children)
        return self._box

    def _row_widget(self, widgets: Any, pending: PendingCall) -> Any:
        call = pending.call
        shown = message_html(Msg(role="assistant", content=(call,)))
        if pending.reason:
            shown += f'<div style="color:#6b7280">asks: {esc(pending.reason)}</div>'
        approve = widgets.Button(description="Approve", button_style="success", tooltip=f"approve {call.id}")
        deny = widgets.Button(description="Deny", button_style="danger", tooltip=f"deny {call.id}")
        reason = widgets.Text(placeholder="reason (optional, sent with a denial)")
        status = widgets.HTML("")

        def approved(_: object) -> None:
            self.decide(call.id, True, reason.value)

        def denied(_: object) -> None:
            self.decide(call.id, False, reason.value)

        approve.on_click(approved)
        deny.on_click(denied)
        self._rows[call.id] = _Row(approve, deny, reason, status)
        return widgets.VBox([widgets.HTML(shown), widgets.HBox([approve, deny, reason, status])])

    def _ipython_display_(self) -> None:
        try:
            box = self.widget()
        except ImportError:
            print("ipywidgets is not installed (pip install rxagent[notebook]); run this instead:\n")
            print(self.snippet())
            return
        display: Any = importlib.import_module("IPython.display").display
        display(box)

    def __repr__(self) -> str:
        return self.snippet()


async def approvals(
    agent: ReActAgent,
    ctx: RuntimeContext | None = None,
    *,
    agent_name: str = "agent",
    ctx_name: str = "ctx",
    interval: float = 0.1,
) -> ApprovalPanel:
    """Implementation of :func:`rxagent.notebook.approvals`, where the contract is documented."""
    state = await agent.sessions.state(ctx)
    asking = [p for p in state.pending if p.kind == "ask"]
    return ApprovalPanel(agent, asking, ctx, agent_name=agent_name, ctx_name=ctx_name, interval=interval)
