"""A session's shared state: a JSON object the caller and the run both read and change.

A front end keeps state beside the conversation (a form being filled, a list the user edits, what the page
shows); AG-UI calls it the thread's ``state``. rxagent keeps it **in the session**, in
``AgentState.extras`` under :data:`SHARED_STATE_KEY`, so it is saved with the session, written to its log
as any change of the extras is (an ``extras`` fact), replayed by the log's projection, and seen by every
later run, in this process or another.

=================  ======================================================================================
who                how
=================  ======================================================================================
the caller         gives it with a run's input: ``agent.call([SharedState({...}), "question"])`` (an AG-UI
                   client's ``RunAgentInput.state``); the run starts from it, replacing the session's
a tool             ``shared_state(context)`` (its :class:`~rxagent.tools.ToolContext`): the live object, to
                   read and change in place; or :func:`patch_shared_state` with a JSON Patch
a step, a hook     ``shared_state(run.state)`` / ``shared_state(ctx)`` (a ``RunContext``)
a watcher          the session's ``extras`` facts in its feed (``rxagent serve`` sends them to AG-UI
                   clients as ``STATE_DELTA`` events: JSON Patches, RFC 6902)
=================  ======================================================================================

A change is recorded when the run next writes its log (with a tool call's result, at the latest when the
run ends). Changes a run makes are kept as the run's other changes are: a run that fails keeps what it
recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from pydantic import JsonValue

from rxagent.agent.inputs import SharedState
from rxagent.context import RuntimeContext, run_context_of
from rxagent.state import AgentState
from rxagent.tools import ToolContext

__all__ = ["SHARED_STATE_KEY", "SharedState", "SharedStateError", "patch_shared_state", "shared_state"]

SHARED_STATE_KEY = "shared_state"
"""Where the shared state is kept in ``AgentState.extras`` (a JSON object)."""


class SharedStateError(ValueError):
    """The shared state cannot be read (the extras hold something else under :data:`SHARED_STATE_KEY`), or a
    JSON Patch does not apply to it (nothing was changed then)."""


def shared_state(where: AgentState | RuntimeContext | ToolContext[object]) -> dict[str, JsonValue]:
    """The session's shared state: the live object, which a tool or a step may change in place (an empty
    object, made now, when the session has none).

    Args:
        where: the session's state (``run.state``), a run's context (``RunContext``), or a tool's context.

    Raises:
        RuntimeError: a context outside an agent's run (a tool called on its own): there is no session.
        SharedStateError: the extras hold something other than a JSON object under the key.
    """
    state = _state_of(where)
    value = state.extras.setdefault(SHARED_STATE_KEY, {})
    if not isinstance(value, dict):
        raise SharedStateError(
            f"the session's shared state (extras[{SHARED_STATE_KEY!r}]) is a {type(value).__name__}, "
            "not a JSON object"
        )
    return value


def patch_shared_state(
    where: AgentState | RuntimeContext | ToolContext[object], patch: Sequence[Mapping[str, JsonValue]]
) -> dict[str, JsonValue]:
    """Apply a JSON Patch (RFC 6902: ``add``, ``remove``, ``replace``, ``move``, ``copy``, ``test``) to the
    shared state, whole or not at all; returns the state as it is now.

    Raises:
        SharedStateError: the patch is not a list of operations, an operation is malformed, a path names
            nothing, a ``test`` fails, or the result is not a JSON object; the state is left as it was.
        RuntimeError: as for :func:`shared_state`.
    """
    # Imported here: the library is needed only by runs that patch (the server diffs with it too).
    import jsonpatch
    import jsonpointer

    current = shared_state(where)
    if isinstance(patch, str | bytes) or not isinstance(patch, Sequence):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise SharedStateError(f"a JSON Patch is a list of operations, not {type(patch).__name__}")
    try:
        patched: object = jsonpatch.apply_patch(current, list(patch), in_place=False)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError, KeyError) as error:
        raise SharedStateError(f"the JSON Patch does not apply to the shared state: {error}") from None
    if not isinstance(patched, dict):
        raise SharedStateError(f"the JSON Patch would make the shared state a {type(patched).__name__}")
    current.clear()
    current.update(cast("dict[str, JsonValue]", patched))
    return current


def _state_of(where: AgentState | RuntimeContext | ToolContext[object]) -> AgentState:
    if isinstance(where, AgentState):
        return where
    context = where.runtime if isinstance(where, ToolContext) else where
    run = run_context_of(context)
    if run is None or run.state is None:
        raise RuntimeError("the shared state lives in a session: this works only inside an agent's run")
    return run.state
