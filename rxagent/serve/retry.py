"""Whether a request retries a failed turn: the one rule AG-UI (:mod:`rxagent.serve.agui`) and the AI SDK's
chat route (:mod:`rxagent.serve.vercel_ai`) both follow.

A front end retries a turn by sending its user message again, with the same id: ``@ag-ui/client`` after
``RUN_ERROR`` sends the same messages, ``useChat``'s ``regenerate()`` the same last message. The session's
log keeps every turn, so the message's id says which turn is meant, and a retry is idempotent by it:

- a message id the session does not have is **new input** (unless a run queued or going here carries it
  already: the same message sent twice at once runs once, the other is refused with 409);
- the id of the session's **last user message**, while the session holds no answer to it (its run failed,
  or was stopped before it answered), no run of it is going or queued, and no call waits for an answer,
  **retries** that turn: it runs again from where it stopped (what the failed run recorded, a tool round,
  stays);
- anything else is refused with 409: an older message (a later turn follows it), a turn answered already
  ("nothing to run"), a run going or queued (it may be the retry), calls waiting for answers or to be
  reconciled (the answer names them, as :meth:`~rxagent.serve.hub.SessionHub.refuse_while_waiting` does).

The caller reads the session (its messages, its status) first and submits its run after, with nothing
awaited in between, so two retries sent at once cannot both pass: the second sees the first's run.
"""

from __future__ import annotations

from collections.abc import Sequence

from rxagent.agent import AgentInput, SessionHandle, SessionStatus
from rxagent.messages import Msg
from rxagent.serve.http import ApiError
from rxagent.serve.hub import SessionHub

__all__ = ["retries_turn"]


def retries_turn(
    handle: SessionHandle,
    message_id: str | None,
    history: Sequence[Msg],
    status: SessionStatus,
    *,
    noun: str,
    hint: str,
) -> bool:
    """Whether a request whose user message has id ``message_id`` (``None``: it has none) retries that
    message's turn (``True``) or brings it as new input (``False``), by the rule of the module.

    Args:
        handle: the session's handle (its runs queued or going here are read now, not awaited).
        message_id: the id of the request's last user message, as the session's log keeps it.
        history: the session's messages, as the run would start from them.
        status: where the session stands, read with ``history`` (the calls that wait, the uncertain ones).
        noun: what the protocol calls a session in its answers (``"thread"``, ``"session"``).
        hint: what the client could send instead, said after each "nothing to run" (starts with ``" ("``).

    Raises:
        ApiError: 409, it is neither (see the module); the answer says why.
    """
    if message_id is not None and all(m.id != message_id for m in history):
        if any(_carries(run.input, message_id) for run in handle.runs):
            raise ApiError(
                409, f"a run of this {noun} is going or queued with message {message_id!r} already"
            )
        return False
    asked = next((i for i in range(len(history) - 1, -1, -1) if history[i].role == "user"), None)
    if message_id is None or asked is None:
        raise ApiError(409, f"nothing to run: the request has no user message{hint}")
    if history[asked].id != message_id:
        raise ApiError(
            409,
            f"nothing to run: the {noun} has user message {message_id!r} already, and turns after it{hint}",
        )
    if any(m.role == "assistant" and m.has_answer_text and not m.tool_calls for m in history[asked + 1 :]):
        raise ApiError(
            409, f"nothing to run: the {noun} has answered user message {message_id!r} already{hint}"
        )
    if handle.status().state in ("running", "queued"):
        raise ApiError(
            409, f"a run of this {noun} is going or queued: it may be answering {message_id!r} already"
        )
    SessionHub.refuse_while_waiting(status, f"running the turn of {message_id!r} again")
    return True


def _carries(given: AgentInput, message_id: str) -> bool:
    """Whether a run's input holds the message ``message_id``."""
    items: Sequence[object] = given if isinstance(given, list | tuple) else (given,)
    return any(isinstance(item, Msg) and item.id == message_id for item in items)
