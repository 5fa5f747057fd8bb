"""The command line's sessions: where they live, ``rxagent sessions``, and answering with ``rxagent respond``.

``run``, ``chat``, ``serve``, ``sessions`` and ``respond`` keep sessions in one SQLite file in the user's
data folder (:func:`~rxagent.session.default_db_path`) unless given ``--db`` (``:memory:`` keeps them only
while the command runs). A run that stops for an approval or an external result leaves its calls waiting in
that store; ``rxagent sessions SESSION`` shows them and ``rxagent respond SESSION --approve CALL_ID`` (or
``--deny``, ``--result``) answers them and carries the run on. Whenever a command ends with calls waiting,
it says which command answers them (:func:`answer_advice`).

Everything a model, a tool or a user wrote is shown through :func:`~rxagent.cli.terminal_safe` (messages
through :func:`~rxagent.notebook.text_of`, which makes hidden characters visible). ``rxagent.cli`` imports
this module, so this one imports it only where it prints.
"""

from __future__ import annotations

import argparse
import json
import secrets
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import JsonValue

from rxagent.agent import AnswerTakenError, ExternalResult, PendingToolCallsError, ToolDecision
from rxagent.context import RuntimeContext
from rxagent.messages import ToolUseBlock
from rxagent.session import Projection, SessionInfo, SessionStore, open_store
from rxagent.session.open import default_db_path, store_file, store_name
from rxagent.state import AgentState, PendingCall

if TYPE_CHECKING:
    from rxagent.agent import ReActAgent

__all__ = [
    "DENIED",
    "SessionCondition",
    "SessionSummary",
    "add_answer_options",
    "answer_advice",
    "list_sessions",
    "make_default_folder",
    "missing_file",
    "new_session_name",
    "refuse_answers",
    "show_session",
    "unknown_session",
    "waiting_calls",
]

DENIED = "the user said no"
"""The reason a denial on the command line gives the model (``chat``'s ``n``, ``respond --deny``)."""

Answer = ToolDecision | ExternalResult


# ---- where sessions live ------------------------------------------------------------------------------


def make_default_folder(where: str) -> None:
    """Create the folder of :func:`~rxagent.session.default_db_path` when ``where`` is that file.

    Only the default's folder is made (readable by its owner alone: sessions hold conversations); a folder
    given with ``--db`` must exist, so a typo is an error rather than a new tree.
    """
    if store_file(where) == default_db_path():
        default_db_path().parent.mkdir(mode=0o700, parents=True, exist_ok=True)


def missing_file(where: str) -> bool:
    """``where`` names a SQLite file that does not exist (a command that only reads does not create it)."""
    path = store_file(where)
    return path is not None and not path.exists()


async def new_session_name(store: SessionStore) -> str:
    """A name for a new session, not yet in ``store``: the time it starts and four random hex digits, such as
    ``20261201-143205-3f2a`` (they sort by age, and a person can type them)."""
    while True:
        name = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        if await store.head((None, name)) == 0:
            return name


# ---- answers on the command line ------------------------------------------------------------------------


class _AnswerAction(argparse.Action):
    """Collects ``--approve``, ``--always``, ``--deny``, ``--result`` and ``--args`` into one list of
    answers, in command-line order; ``--args`` changes the arguments of the ``--approve`` (or ``--always``)
    right before it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        answers: list[Answer] = list(getattr(namespace, self.dest, None) or [])
        kind: str = self.const
        if kind == "approve":
            answers.append(ToolDecision(str(values), allow=True))
        elif kind == "always":  # the run records the rule, as for the other doors (rxagent.agent.grants)
            answers.append(ToolDecision(str(values), allow=True, always=True))
        elif kind == "deny":
            answers.append(ToolDecision(str(values), allow=False, reason=DENIED))
        elif kind == "result":
            assert isinstance(values, list)
            call_id, text = (str(v) for v in values)  # pyright: ignore[reportUnknownVariableType]
            answers.append(ExternalResult(call_id, text))
        else:
            last = answers[-1] if answers else None
            if not isinstance(last, ToolDecision) or not last.allow:
                parser.error("--args comes right after the --approve CALL_ID whose arguments it changes")
            if last.arguments is not None:
                parser.error(f"--args given twice for call {last.call_id!r}: give one JSON object")
            answers[-1] = replace(last, arguments=_json_object(parser, str(values)))
        setattr(namespace, self.dest, answers)


def _json_object(parser: argparse.ArgumentParser, text: str) -> dict[str, JsonValue]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        parser.error(f"--args must be a JSON object, and it is not JSON: {error}")
    if not isinstance(value, dict):
        kind = {list: "a list", str: "a string", bool: "true or false", type(None): "null"}.get(
            type(value),  # pyright: ignore[reportUnknownArgumentType]
            "a number",
        )
        parser.error(f'--args must be a JSON object such as \'{{"expression": "2 + 2"}}\', not {kind}')
    return value  # pyright: ignore[reportUnknownVariableType]


def add_answer_options(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the answer options of ``rxagent respond``; they collect into ``answers``, a list of
    :class:`~rxagent.agent.ToolDecision` and :class:`~rxagent.agent.ExternalResult` values."""
    parser.set_defaults(answers=[])
    answers = parser.add_argument_group(
        "answers",
        "each names a call the session waits on (`rxagent sessions SESSION` lists them); "
        "one command may answer several",
    )
    answers.add_argument(
        "--approve", dest="answers", action=_AnswerAction, const="approve", metavar="CALL_ID",
        help="run the call (repeatable)",
    )  # fmt: skip
    answers.add_argument(
        "--always", dest="answers", action=_AnswerAction, const="always", metavar="CALL_ID",
        help="run the call, and from now on its tool's calls in this session without asking (a permission "
        "rule the session's log keeps; repeatable)",
    )  # fmt: skip
    answers.add_argument(
        "--args", dest="answers", action=_AnswerAction, const="args", metavar="JSON",
        help="run the --approve'd call before it with these arguments instead (a JSON object, checked "
        "against the tool's schema first)",
    )  # fmt: skip
    answers.add_argument(
        "--deny", dest="answers", action=_AnswerAction, const="deny", metavar="CALL_ID",
        help=f"refuse the call: the model hears '{DENIED}' (repeatable)",
    )  # fmt: skip
    answers.add_argument(
        "--result", dest="answers", action=_AnswerAction, const="result", nargs=2,
        metavar=("CALL_ID", "TEXT"), help="the result of an external tool's call (repeatable)",
    )  # fmt: skip


def waiting_calls(state: AgentState) -> list[PendingCall]:
    """The calls of ``state`` that wait for a person or a program: to be approved, or for an external result
    (a call queued to run again waits for nobody: the next run runs it)."""
    return [p for p in state.pending if p.kind != "retry"]


def _call_summary(call: ToolUseBlock) -> str:
    arguments = call.raw_arguments if call.input is None else json.dumps(call.input, ensure_ascii=False)
    if len(arguments) > 200:
        arguments = arguments[:200] + "…"
    return f"{call.name} {arguments}"


def answer_advice(session: str, waiting: Sequence[PendingCall], options: Sequence[str] = ()) -> str:
    """What to run to answer the calls ``session`` waits on, as the command says it, e.g.::

        session 'x' waits for an answer to call c1 (calculator {"expression": "2 + 2"}): run
        `rxagent respond x --approve c1` or `--deny c1`

    Args:
        session: the session's name.
        waiting: its waiting calls (:func:`waiting_calls`).
        options: the command-line options the answering command needs to run the same agent (its model,
            tools, store), shown after the answer.
    """

    def command(*answer: str) -> str:
        return "`" + shlex.join(["rxagent", "respond", session, *answer, *options]) + "`"

    def how(pending: PendingCall) -> str:
        call_id = pending.call.id
        if pending.kind == "ask":
            return f"run {command('--approve', call_id)} or `--deny {shlex.quote(call_id)}`"
        return f"run {command('--result', call_id, 'TEXT')}"

    if len(waiting) == 1:
        [pending] = waiting
        return (
            f"session {session!r} waits for an answer to call {pending.call.id} "
            f"({_call_summary(pending.call)}): {how(pending)}"
        )
    lines = [
        f"session {session!r} waits for answers to {len(waiting)} calls (one command may answer several):"
    ]
    lines.extend(f"  {p.call.id} ({_call_summary(p.call)}): {how(p)}" for p in waiting)
    return "\n".join(lines)


async def refuse_answers(
    agent: ReActAgent, ctx: RuntimeContext, answers: Sequence[Answer], where: str
) -> str | None:
    """Why ``answers`` cannot answer the session ``ctx`` names, as one sentence for the command line
    (``None``: they fit, and the run may start). Only reads: a refused answer records nothing.

    Refused: an unknown session; a session that waits for nothing; a call that is not waiting (unknown, or
    answered already: then the answer taken is named); the wrong kind of answer (``--result`` for a call
    that asks, ``--approve`` for an external one); an approval of a tool this command was not given; two
    answers for one call; edited arguments the tool's schema rejects.
    """
    session = ctx.session_id or ""
    if await agent.store.head((ctx.user_id, session)) == 0:
        return unknown_session(where, session)
    state = await agent.sessions.state(ctx)
    waiting = {p.call.id: p for p in waiting_calls(state)}
    answered = _answered(state)
    for answer in answers:
        call_id = answer.call_id
        pending = waiting.get(call_id)
        if pending is None:
            taken = await agent.session(ctx).taken_answers([call_id])
            if call_id in taken:  # another answer came first: say which
                return str(AnswerTakenError(taken[call_id]))
            if call_id in answered:
                why = f"call {call_id!r} of session {session!r} is not waiting: it has its result already"
            else:
                why = f"session {session!r} has no call {call_id!r}"
            others = ", ".join(waiting) or "none"
            return f"{why} (the calls it waits on: {others})"
        if isinstance(answer, ExternalResult) and pending.kind == "ask":
            return (
                f"call {call_id!r} asks for approval: answer it with --approve {call_id} or --deny {call_id}"
            )
        if isinstance(answer, ToolDecision) and pending.kind == "external":
            return f"call {call_id!r} is an external tool's: give its result with --result {call_id} TEXT"
        if isinstance(answer, ToolDecision) and answer.allow and agent.toolkit.get(pending.call.name) is None:
            return (
                f"call {call_id!r} is a call of the tool {pending.call.name!r}, which this command was not "
                "given: pass the --tools (and other options) the run had"
            )
    try:
        await agent.session(ctx).check(answers)  # two answers for one call; edited arguments
    except PendingToolCallsError as refused:
        return str(refused)
    return None


def _answered(state: AgentState) -> set[str]:
    ids = {r.tool_use_id for m in state.messages for r in m.tool_results}
    return ids | {r.tool_use_id for r in state.partial_results}


# ---- rxagent sessions -------------------------------------------------------------------------------------

SessionCondition = Literal["idle", "running", "waiting_for_approval", "waiting_for_results", "uncertain"]
"""Where a stored session stands: as :data:`~rxagent.agent.SessionActivity` says it for a session no run of
this command holds, plus ``uncertain`` (calls whose outcome a stopped process lost)."""


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One stored session, as ``rxagent sessions`` shows it.

    Attributes:
        name: the session's id.
        info: what the store says of it (head, last update, lease holder).
        state: its conversation and waiting calls, replayed from its log.
        condition: where it stands (see :data:`SessionCondition`).
    """

    name: str
    info: SessionInfo
    state: AgentState
    condition: SessionCondition

    @classmethod
    async def read(cls, store: SessionStore, info: SessionInfo) -> SessionSummary:
        """The summary of the session ``info`` lists, read from ``store``."""
        projection = Projection.replay(*await store.load(info.key))
        state = projection.state
        waiting = waiting_calls(state)
        condition: SessionCondition
        if info.owner is not None:
            condition = "running"
        elif any(p.kind == "ask" for p in waiting):
            condition = "waiting_for_approval"
        elif waiting:
            condition = "waiting_for_results"
        elif projection.uncertain:
            condition = "uncertain"
        else:
            condition = "idle"
        return cls(info.key[1], info, state, condition)

    @property
    def first_input(self) -> str:
        """The first line of the session's first user message (``""``: none)."""
        first = next((m for m in self.state.messages if m.role == "user"), None)
        return first.text.strip().split("\n", 1)[0] if first is not None else ""

    def json(self, *, full: bool) -> dict[str, JsonValue]:
        """The summary as JSON: counts of its messages and waiting calls, or with ``full`` the waiting calls
        (each a :class:`~rxagent.state.PendingCall`'s JSON) and the messages themselves."""
        value: dict[str, JsonValue] = {
            "session_id": self.name,
            "state": self.condition,
            "updated_at": self.info.updated_at,
            "facts": self.info.facts,
            "messages": len(self.state.messages),
            "waiting": len(waiting_calls(self.state)),
            "first_input": self.first_input,
        }
        if full:
            value["waiting"] = [p.model_dump(mode="json") for p in waiting_calls(self.state)]
            value["messages"] = [m.model_dump(mode="json") for m in self.state.messages]
        return value


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def _clipped(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


async def _infos(store: SessionStore) -> list[SessionInfo]:
    """The store's sessions the command can name (those without a user id), newest first."""
    infos = [i for i in await store.sessions() if i.key[0] is None]
    return sorted(infos, key=lambda i: i.updated_at, reverse=True)


async def list_sessions(where: str, *, json_lines: bool) -> None:
    """Print the sessions of the store ``where`` names, newest first: a table, or one JSON object a line
    (a SQLite file that does not exist has none, and is not created)."""
    if missing_file(where):
        if not json_lines:
            print(f"no sessions yet in {store_name(where)}")
        return
    store = open_store(where)
    try:
        summaries = [await SessionSummary.read(store, info) for info in await _infos(store)]
    finally:
        await store.aclose()
    from rxagent.cli import terminal_safe  # the command imports this module: not at the top

    if json_lines:
        for summary in summaries:
            print(json.dumps(summary.json(full=False), ensure_ascii=False))
        return
    if not summaries:
        print(f"no sessions yet in {store_name(where)}")
        return
    rows = [("SESSION", "UPDATED", "STATE", "MESSAGES", "FIRST INPUT")]
    rows.extend(
        (
            terminal_safe(s.name),
            _when(s.info.updated_at),
            s.condition.replace("_", " "),
            str(len(s.state.messages)),
            _clipped(terminal_safe(s.first_input), 60),
        )
        for s in summaries
    )
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    for row in rows:
        print(
            "  ".join(
                [*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[4]]
            ).rstrip()
        )


async def show_session(where: str, name: str, *, json_lines: bool) -> bool:
    """Print the session ``name`` of the store ``where`` names: where it stands, its messages, and the calls
    it waits on with the command that answers them; ``False`` (nothing printed) when there is no such
    session."""
    if missing_file(where):
        return False
    store = open_store(where)
    try:
        info = next((i for i in await _infos(store) if i.key[1] == name), None)
        summary = await SessionSummary.read(store, info) if info is not None else None
    finally:
        await store.aclose()
    if summary is None:
        return False
    if json_lines:
        print(json.dumps(summary.json(full=True), ensure_ascii=False))
        return True
    from rxagent.cli import terminal_safe  # the command imports this module: not at the top
    from rxagent.notebook import text_of  # the project's plain-text display of a message

    state = summary.state
    print(
        f"session {terminal_safe(name)!r}: {summary.condition.replace('_', ' ')} · {len(state.messages)} "
        f"message(s) · updated {_when(summary.info.updated_at)}"
    )
    for message in state.messages:
        print(terminal_safe(text_of(message)))
    waiting = waiting_calls(state)
    if waiting:
        print("waiting:")
        for pending in waiting:
            what = "asks for approval" if pending.kind == "ask" else "waits for its external result"
            reason = f" ({pending.reason})" if pending.reason else ""
            print(terminal_safe(f"  {pending.call.id}  {_call_summary(pending.call)}  {what}{reason}"))
        print(terminal_safe(answer_advice(name, waiting)), "(with the model and tool options of the run)")
    elif summary.condition == "uncertain":
        print("calls were dispatched whose outcome was lost when their process stopped: reconcile them "
              "from Python (agent.sessions.reconcile) before the session runs again")  # fmt: skip
    return True


def unknown_session(where: str, name: str) -> str:
    """The sentence for a session ``where`` does not hold."""
    return f"no session {name!r} in {store_name(where)} (`rxagent sessions` lists them)"
