"""What the harness adds to the session API: a session's background tasks, read.

The contract is in :mod:`rxagent.serve`'s docstring (``GET /api/sessions/{sid}/tasks``). A session's todo
list needs no endpoint of its own: it is in the session's extras, whose every change is an ``extras`` fact
of the feed (``data.extras.todos``), and the run's ``todos_updated`` event says it too.
"""

from __future__ import annotations

import dataclasses

from aiohttp import web

from rxagent.harness import HarnessAgent, TaskInfo
from rxagent.serve.http import JsonObject, json_response
from rxagent.serve.hub import HUB

__all__ = ["routes", "task_json"]


def routes() -> list[web.RouteDef]:
    """The harness's routes."""
    return [web.get("/api/sessions/{sid}/tasks", get_tasks)]


async def get_tasks(request: web.Request) -> web.Response:
    """``GET /api/sessions/{sid}/tasks``: the session's background tasks, in the order they started."""
    hub = request.app[HUB]
    handle = await hub.readable(request.match_info["sid"])
    agent = hub.agent
    tasks = agent.tasks if isinstance(agent, HarnessAgent) else None
    listed = await tasks.list(handle.ctx) if tasks is not None else []
    return json_response({"session_id": handle.key[1], "tasks": [task_json(info) for info in listed]})


def task_json(info: TaskInfo) -> JsonObject:
    """A :class:`~rxagent.harness.TaskInfo` as the API writes it: its fields, ``usage`` an object or
    ``null``."""
    return dataclasses.asdict(info)
