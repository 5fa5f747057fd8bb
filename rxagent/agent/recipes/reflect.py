"""Reflect, then revise: a critic judges each answer in a side turn; the model revises until the critic is
content, at most ``max_rounds`` times.

::

    Start ─▶ Reason ⇄ Act … answer ─▶ Critique(answer) ─"OK"────────────────────▶ Finish(MODEL_STOP, answer)
                      ▲                       └─ problems ─▶ Revise(critique) ─┐
                      └─────────────────────────────────────────────────────────┘

The critique is a side turn (:func:`~rxagent.agent.loop.model_turn`): the critic (the agent's model, or
``critic``) reads the conversation and the answer, and replies ``OK`` alone (case, spaces and a closing
``.``/``!`` aside) when the answer stands, or else the answer's problems. Its reply is not in the history
and is not an iteration; its usage counts in the run's, and its call is traced (``ModelCallStarted`` /
``ModelCallFinished``). Problems go back to the model as a user message (``Revise your answer: …``,
tagged ``metadata["rxagent"] == "revise"``) and are told as a ``StepNote`` (source ``"critic"``); the
model then reasons again, an iteration like any other. The run finishes ``MODEL_STOP`` with the last
answer when the critic says ``OK``; when the critic still objects after ``max_rounds`` revisions (the
detail says so and quotes the critique); and when the critic's reply holds no text (the detail says the
answer stands). An interrupt during the critique ends the run ``INTERRUPTED`` with the answer; a critic
whose call fails fails the run, as any model call does. Only plain-text answers are criticised (a
structured answer is checked as usual), and revisions count from the user's last own message, so each
new request may be revised ``max_rounds`` times::

    agent = Agent(model, toolkit, steps=reflect_then_revise(max_rounds=2, critic=critic_model))
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from itertools import takewhile
from typing import TypeAlias

from reactivex import Observable

from rxagent.agent.loop import (
    Finish,
    Node,
    ReActNode,
    Reason,
    RunState,
    StepOutput,
    Steps,
    after_reasoning,
    continue_reasoning,
    emit,
    model_turn,
    react_steps,
    reason_step,
)
from rxagent.events import StepNote
from rxagent.messages import Msg
from rxagent.model import ChatModel, ChatRequest

__all__ = ["CRITIQUE", "REVISE", "Critique", "ReflectNode", "Revise", "reflect_then_revise", "revisions"]

REVISE = "revise"
"""The ``metadata["rxagent"]`` tag of the user messages that ask the model for a revision."""
CRITIQUE = "Check the last answer. If it is right and complete, reply with only OK; else list what is wrong."
"""What the critic is asked, after the conversation."""


@dataclass(frozen=True, slots=True)
class Critique(Node):
    """Have the critic judge the model's ``answer`` in a side turn."""

    answer: Msg


@dataclass(frozen=True, slots=True)
class Revise(Node):
    """Tell the model the critic's ``critique`` and have it answer again."""

    critique: str


ReflectNode: TypeAlias = ReActNode | Critique | Revise
"""The nodes of the reflect-then-revise assembly."""


def reflect_then_revise(max_rounds: int = 2, critic: ChatModel | None = None) -> Steps[ReflectNode]:
    """The ReAct assembly with every plain-text answer criticised, and revised at most ``max_rounds``
    times; ``critic``: the model of the critique (default: the agent's).

    Raises:
        ValueError: ``max_rounds`` is negative.
    """
    if max_rounds < 0:
        raise ValueError(f"max_rounds (revisions the critic may ask for) must be 0 or more, not {max_rounds}")

    def answered(node: Node, message: Msg | None, run: RunState) -> ReActNode | Critique:
        decided = after_reasoning(node, message, run)
        if isinstance(decided, Finish) and decided.reason == "MODEL_STOP" and decided.message is not None:
            return Critique(decided.message)
        return decided

    def critique(node: Critique, run: RunState) -> Observable[StepOutput[Finish | Revise]]:
        request = ChatRequest((*run.deps.system, *run.history(), Msg.user(CRITIQUE)))
        return model_turn(run, request, model=critic, then=partial(judge, node, run))

    def judge(node: Critique, run: RunState, said: Msg) -> Finish | Revise:
        critique = said.text.strip()
        if not critique:
            return Finish("MODEL_STOP", node.answer, detail="the critic said nothing: the answer stands")
        if critique.rstrip(".!").upper() == "OK":
            return Finish("MODEL_STOP", node.answer)
        if revisions(run) >= max_rounds:
            done = f"revised {max_rounds} time(s), the most allowed; the critic still objects: {critique}"
            return Finish("MODEL_STOP", node.answer, detail=done)
        return Revise(critique)

    def revise(node: Revise, run: RunState) -> Observable[StepOutput[Reason]]:
        run.add_messages([Msg.user(f"Revise your answer: {node.critique}", metadata={"rxagent": REVISE})])
        return emit(StepNote(**run.head, source="critic", text=node.critique), then=continue_reasoning(run))

    return react_steps().on(Revise, revise).on(Critique, critique).on(Reason, reason_step(answered))


def revisions(run: RunState) -> int:
    """The revisions asked for since the user's last own message (one without an ``rxagent`` tag)."""
    tags = [m.metadata.get("rxagent") for m in run.messages if m.role == "user"]
    return list(takewhile(lambda tag: tag is not None, reversed(tags))).count(REVISE)
