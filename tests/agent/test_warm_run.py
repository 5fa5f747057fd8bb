"""A warm agent's one-delta run builds again nothing the agent built once: counted by identity, not timed.

The criterion, deterministic on any machine: before the measured run, every object the garbage collector
tracks is kept alive in a list, so no object can die and give its id to a new one; while the model is
being called (the run's set-up is done, and held), the tracked objects whose ids were not there before are
exactly those the run allocated and still holds. Among them there must be none of the structures an agent
builds once and every run can share: tool schemas, tools and toolkits, permissions, options, output
specs, step tables, middleware, stores and keepers, classes (a tool's argument model, say), and the system
message. The input is the only message the run has made by then, and the request carries the very
system message and tool schemas of the previous run's request (the wire encoders cache by identity, so
shared objects are encoded once).

The census is not vacuous: the same list holds the run's own state (``RunState``) and its input.

The system message is shared by prompt text, so it still follows the agent's prompt: a changed prompt
takes effect on the next run, no prompt sends none, and the message never enters a session's history.

Bad inputs: none here (the input paths are tested in ``test_bad_input.py``).
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable

from reactivex import Observable

from rxagent import Agent, FunctionModel, Msg, Toolkit, tool
from rxagent.agent import AgentOptions, Middleware
from rxagent.agent.loop import RunState
from rxagent.agent.nodes import Steps
from rxagent.agent.structured import OutputSpec
from rxagent.chunks import ChatChunk
from rxagent.context import RunContext, RuntimeContext
from rxagent.requests import ChatRequest, ToolSchema
from rxagent.session import SessionKeeper, SessionStore
from rxagent.tools import Permissions, Tool

BUILT_ONCE: tuple[type, ...] = (
    ToolSchema,
    Tool,
    Toolkit,
    Permissions,
    AgentOptions,
    OutputSpec,
    Steps,
    Middleware,
    SessionStore,
    SessionKeeper,
    FunctionModel,
    type,
)
"""What an agent builds once and a run must not build again."""


@tool
def double(n: int) -> int:
    """Double a number.

    Args:
        n: the number to double.
    """
    return 2 * n


class Census:
    """The objects a run allocated and still holds when its model is called (see the module)."""

    def __init__(self) -> None:
        self.before: list[object] | None = None
        self.known: set[int] = set()
        self.new: list[object] = []
        self.requests: list[ChatRequest] = []

    def start(self) -> None:
        """Keep every tracked object alive, and note its id."""
        gc.collect()
        self.before = gc.get_objects()
        self.known = {id(obj) for obj in self.before}

    def respond(self, request: ChatRequest) -> str:
        """The model: takes the census (once started), then answers with one text delta."""
        self.requests.append(request)
        if self.before is not None and not self.new:
            self.new = [obj for obj in gc.get_objects() if id(obj) not in self.known]
        return "Hello!"


class Passing(Middleware):
    """A middleware with a hook, so the run has a middleware chain at the model call."""

    watches_events = False

    def model_call(
        self, request: ChatRequest, ctx: RunContext, next: Callable[[ChatRequest], Observable[ChatChunk]]
    ) -> Observable[ChatChunk]:
        return next(request)


async def test_a_warm_agents_run_rebuilds_nothing_the_agent_built_once() -> None:
    census = Census()
    agent = Agent(
        FunctionModel(census.respond),
        Toolkit([double]),
        system_prompt="Answer briefly.",
        middleware=[Passing()],
    )
    for number in range(2):  # warm: caches filled, lazy imports done
        result = await agent.call("Hi", RuntimeContext(session_id=f"warm-{number}"))
        assert result.text == "Hello!"

    census.start()
    result = await agent.call("Hi", RuntimeContext(session_id="measured"))

    assert result.text == "Hello!"
    assert census.new, "the model was never called"
    kinds = Counter(type(obj).__qualname__ for obj in census.new)
    rebuilt = [obj for obj in census.new if isinstance(obj, BUILT_ONCE)]
    assert rebuilt == [], (rebuilt, kinds.most_common(20))
    messages = [obj for obj in census.new if isinstance(obj, Msg)]
    assert [(m.role, m.text) for m in messages] == [("user", "Hi")], messages
    assert sum(isinstance(obj, RunState) for obj in census.new) == 1, kinds.most_common(20)

    previous, measured = census.requests[-2], census.requests[-1]
    assert measured.messages[0].role == "system"
    assert measured.messages[0] is previous.messages[0]
    assert measured.messages[-1] is messages[0]
    assert measured.tools is previous.tools
    assert [t.name for t in measured.tools] == ["double"]


async def test_the_shared_system_message_follows_the_agents_prompt() -> None:
    census = Census()
    agent = Agent(FunctionModel(census.respond), system_prompt="Answer briefly.")
    other = Agent(FunctionModel(census.respond), system_prompt="Answer at length.")
    await agent.call("Hi", RuntimeContext(session_id="one"))
    await other.call("Hi", RuntimeContext(session_id="two"))
    agent.system_prompt = "Answer in French."
    await agent.call("Hi", RuntimeContext(session_id="three"))
    agent.system_prompt = None
    await agent.call("Hi", RuntimeContext(session_id="four"))
    await other.call("Hi", RuntimeContext(session_id="five"))

    heads = [[(m.role, m.text) for m in request.messages[:-1]] for request in census.requests]
    assert heads == [
        [("system", "Answer briefly.")],
        [("system", "Answer at length.")],
        [("system", "Answer in French.")],
        [],
        [("system", "Answer at length.")],
    ]
    # Agents with the same prompt share its message; the system message is never in the session's history.
    assert census.requests[4].messages[0] is census.requests[1].messages[0]
    assert all(
        m.role != "system" for m in (await agent.sessions.state(RuntimeContext(session_id="one"))).messages
    )
