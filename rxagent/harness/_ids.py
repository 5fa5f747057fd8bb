"""How a background task's session is named after its parent's: the one place that knows the form."""

from __future__ import annotations

__all__ = ["parent_session_of", "task_session_id"]

_TASKS = "/tasks/"


def task_session_id(parent_session: str, task_id: str) -> str:
    """The session of task ``task_id`` started from ``parent_session``."""
    return f"{parent_session}{_TASKS}{task_id}"


def parent_session_of(session_id: str) -> str:
    """The session whose tasks started ``session_id`` (through every level), or ``session_id`` itself."""
    head, found, _ = session_id.partition(_TASKS)
    return head if found else session_id
