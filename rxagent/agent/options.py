"""How an agent's loop behaves: one frozen settings object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from rxagent.agent.inputs import MAX_INLINE_MEDIA_BYTES
from rxagent.model.types import ToolChoice

__all__ = ["AgentOptions", "StructuredMode"]

StructuredMode: TypeAlias = Literal["auto", "native", "tool", "prompted"]
"""How structured output is asked for (see :class:`AgentOptions`)."""


@dataclass(frozen=True, slots=True)
class AgentOptions:
    """How the loop behaves.

    Attributes:
        max_iters: reasoning steps before the tool-less summarising turn (reason ``MAX_ITERATIONS``).
        parallel_tools: run consecutive concurrency-safe calls together.
        max_tool_concurrency: most calls running at once.
        tool_timeout: seconds for tools without their own timeout.
        repeat_guard: same call, same arguments, same result this many times in a row injects a hint to
            change strategy (0 disables).
        recover_pending: new user input while calls are pending gives those calls ``interrupted``
            results instead of failing (an asking call is never run by recovery).
        structured_mode: how structured output is asked for: ``native`` (the model's JSON-schema output),
            ``tool`` (a tool whose arguments are the answer), ``prompted`` (the schema in the instructions
            and the JSON read from the answer text, for models with neither), or ``auto`` (the first of
            native, tool, prompted that the model's capabilities allow).
        structured_retries: attempts the model gets to fix invalid structured output.
        retry_budget: model-call retries allowed per run, shared by all its calls.
        temperature, max_tokens: request options.
        first_tool_choice: tool choice for the run's first reasoning step (``"required"`` makes the model
            use a tool before it answers); later steps use ``auto``.
        session_wait: seconds a run waits for its session while other runs hold it before failing with
            :class:`SessionBusyError` (``None``: as long as it takes). ``RunControl.position`` shows the
            queue moving meanwhile.
        lease_ttl: seconds a run's lease on its session lasts without renewal (a live run renews it every
            third of that); after a crash, other processes take the session over this long after.
        record_events: runs write every event they emit (deltas included) to the session's log, so the
            session's feed replays them to watchers that join late or follow from another process (runs
            submitted through a session handle always do).
        max_inline_media_bytes: the most bytes one image or document of the input may hold inline (they
            are stored in the session's log with their message); more is refused with
            ``InvalidInputError`` before anything is saved. Media given by URL is stored as its URL.
    """

    max_iters: int = 10
    parallel_tools: bool = True
    max_tool_concurrency: int = 8
    tool_timeout: float | None = None
    repeat_guard: int = 3
    recover_pending: bool = False
    structured_mode: StructuredMode = "auto"
    structured_retries: int = 2
    retry_budget: int = 8
    temperature: float | None = None
    max_tokens: int | None = None
    first_tool_choice: ToolChoice | None = None
    session_wait: float | None = None
    lease_ttl: float = 30.0
    record_events: bool = False
    max_inline_media_bytes: int = MAX_INLINE_MEDIA_BYTES

    def __post_init__(self) -> None:
        if self.max_iters < 1:
            raise ValueError("max_iters must be at least 1")
        if self.repeat_guard < 0 or self.structured_retries < 0 or self.retry_budget < 0:
            raise ValueError("repeat_guard, structured_retries and retry_budget must be >= 0")
        if self.session_wait is not None and not self.session_wait >= 0:
            raise ValueError("session_wait must be None or a number of seconds >= 0")
        if not self.lease_ttl > 0:
            raise ValueError("lease_ttl must be positive")
        if self.max_inline_media_bytes < 0:
            raise ValueError("max_inline_media_bytes must be >= 0")
