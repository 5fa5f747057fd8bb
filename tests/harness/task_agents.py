"""The agents of the background-task tests (test_tasks.py, and the process tasks_process.py kills).

A parent agent with a ``lookup`` tool and the task tools, and a ``researcher`` subagent that may use
``lookup``. Models are the scripted ones: :class:`Gated` holds each of a subagent's model calls until the
test answers it, so what runs when is decided by the test, never by timing; :func:`steps` scripts the
parent with answers that may read the request (a task id from the tool result before).
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence

from pydantic import JsonValue

from rxagent.agent import Agent, AgentOptions
from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.harness import BackgroundTasks, Subagent, compose_parts
from rxagent.model.scripted import FunctionModel, ScriptedResponse, ScriptedToolCall, ScriptStep
from rxagent.model.types import ChatModel, ChatRequest
from rxagent.session import SessionStore
from rxagent.tools import Tool, Toolkit, tool

__all__ = [
    "Gated",
    "build",
    "call",
    "last_tool_text",
    "lookup",
    "steps",
    "task_id_in",
]


@tool(read_only=True)
def lookup(name: str) -> str:
    """Look a landmark up.

    Args:
        name: the landmark.
    """
    return f"{name}: 330 m tall, built 1887-1889 by Gustave Eiffel's company"


def build(
    parent_model: ChatModel,
    researcher: ChatModel,
    *,
    store: SessionStore | str | None = None,
    max_tasks: int = 2,
    clock: Clock = SYSTEM_CLOCK,
    parent_tools: Sequence[Tool] = (lookup,),
    subagent_tools: Sequence[str] | None = ("lookup",),
    grant: Sequence[Tool] = (),
) -> tuple[Agent, BackgroundTasks]:
    """The parent agent (named ``lead``) and its tasks, attached."""
    tasks = BackgroundTasks(
        [
            Subagent(
                "researcher",
                "Finds facts about landmarks.",
                system_prompt="Research the question.",
                tools=subagent_tools,
                grant=grant,
                model=researcher,
            )
        ],
        max_tasks=max_tasks,
    )
    merged = compose_parts([tasks.part], "You lead a team.")
    agent = Agent(
        parent_model,
        Toolkit([*parent_tools, *merged.tools]),
        system_prompt=merged.instructions,
        middleware=merged.middleware,
        name="lead",
        store=store,
        clock=clock,
        options=AgentOptions(lease_ttl=30.0),
    )
    tasks.attach(agent)
    return agent, tasks


def call(tool_name: str, /, **arguments: JsonValue) -> ScriptedResponse:
    """A response of a model that calls one tool."""
    return ScriptedResponse(tool_calls=[ScriptedToolCall(tool_name, arguments)])


def last_tool_text(request: ChatRequest) -> str:
    """The text of the newest tool result the request carries."""
    for message in reversed(request.messages):
        for result in reversed(message.tool_results):
            return result.text
    raise AssertionError("the request carries no tool result")


def task_id_in(request: ChatRequest) -> str:
    """The newest task id the request's tool results mention (``start_task``'s answer)."""
    for message in reversed(request.messages):
        for result in reversed(message.tool_results):
            found = re.search(r"task_[0-9a-f]+", result.text)
            if found is not None:
                return found.group(0)
    raise AssertionError("no task id in the request's tool results")


def steps(
    *script: ScriptStep | Callable[[ChatRequest], ScriptStep | Awaitable[ScriptStep]],
) -> FunctionModel:
    """A model answering with ``script`` in order; a callable step answers from the request (and may be
    async: a step that waits for something the test controls)."""
    queue = list(script)

    async def respond(request: ChatRequest) -> ScriptStep:
        assert queue, f"no answer left for {[m.text for m in request.messages][-1:]}"
        step = queue.pop(0)
        if not callable(step):
            return step
        answer = step(request)
        return await answer if inspect.isawaitable(answer) else answer

    return FunctionModel(respond)


class Gated:
    """A subagent's model whose every call waits until the test answers it.

    Calls are told apart by the task's instructions (the first user message): :attr:`calls` lists them in
    the order they came, :meth:`entered` is set by each call, :meth:`answer` gives the next call of that
    task its answer, and :attr:`cancelled` lists the calls that were cancelled while they waited.
    """

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.requests: list[ChatRequest] = []
        self.cancelled: list[str] = []
        self._entered: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._answers: defaultdict[str, asyncio.Queue[ScriptStep]] = defaultdict(asyncio.Queue)
        self.model = FunctionModel(self._respond)

    async def _respond(self, request: ChatRequest) -> ScriptStep:
        task = next(m.text for m in request.messages if m.role == "user")
        self.calls.append(task)
        self.requests.append(request)
        self._entered[task].set()
        try:
            return await self._answers[task].get()
        except asyncio.CancelledError:
            self.cancelled.append(task)
            raise

    def entered(self, task: str) -> asyncio.Event:
        """Set once a call of ``task`` came (clear it to wait for the next)."""
        return self._entered[task]

    def answer(self, task: str, step: ScriptStep) -> None:
        """The answer of the next call of ``task`` (given now or when it comes)."""
        self._answers[task].put_nowait(step)
