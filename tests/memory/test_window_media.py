"""The context window counts images and PDFs as the run's provider documents them.

Given no counter, the window counts a run's requests with the shared counter of the run's provider's media
rule (``RunContext.provider_name``, from the agent's model): Anthropic's for an ``AnthropicModel``,
OpenAI's for every other model. A counter given to it is used as it is. A session whose requests move to
another provider is counted again. Over loopback servers, the same two pictures fit a budget under
OpenAI's rule and do not under Anthropic's, where the run fails before any request is sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rxagent import Agent, DocumentBlock, ImageBlock, Msg
from rxagent.context import RunContext
from rxagent.memory import ContextBudgetExceeded, ContextWindow, TiktokenCounter
from rxagent.memory.tokens import REPLY_PRIMING, default_counter
from rxagent.requests import ChatRequest
from rxagent.state import AgentState
from tests.model.anthropic_server import AnthropicServer, reply, text_block
from tests.model.anthropic_server import make_model as make_anthropic
from tests.model.openai_server import DONE, OpenAIServer, Reply, finish_chunk, make_model, text_chunk
from tests.test_media import pdf, png


@pytest.fixture
async def anthropic() -> AsyncIterator[AnthropicServer]:
    async with AnthropicServer() as running:
        yield running


def run_of(provider: str, state: AgentState | None = None) -> RunContext:
    return RunContext(run_id="r", session_id="s", provider_name=provider, state=state)


def media_request() -> ChatRequest:
    return ChatRequest(
        (
            Msg.system("Describe what you are shown."),
            Msg.user(
                ["What are these?", ImageBlock.from_bytes(png(1092, 1092)), DocumentBlock.from_bytes(pdf(2))]
            ),
        )
    )


async def test_the_window_counts_media_by_the_runs_provider() -> None:
    request = media_request()
    window = ContextWindow(max_context_tokens=100_000)
    by_anthropic = await window.assemble(request, run_of("anthropic"))
    by_openai = await window.assemble(request, run_of("openai"))
    text = default_counter().count_message(Msg.user("What are these?"))
    system = default_counter().count_message(request.messages[0])
    assert by_openai.tokens == REPLY_PRIMING + system + text + 765 + 2 * 3000  # 1092² → 768²: four tiles
    assert by_anthropic.tokens == REPLY_PRIMING + system + text + 1590 + 2 * 4640  # 1092² / 750
    assert window.counter_for(run_of("anthropic")) is default_counter("anthropic")
    assert window.counter_for(run_of("rxagent.scripted")) is default_counter()


async def test_a_counter_given_to_the_window_is_used_as_it_is() -> None:
    counter = TiktokenCounter(media="anthropic")
    window = ContextWindow(counter=counter, max_context_tokens=100_000)
    assert window.counter_for(run_of("openai")) is counter
    request = media_request()
    assert (await window.assemble(request, run_of("openai"))).tokens == (
        await ContextWindow(max_context_tokens=100_000).assemble(request, run_of("anthropic"))
    ).tokens


async def test_a_session_whose_requests_move_to_another_provider_is_counted_again() -> None:
    state = AgentState()
    request = media_request()
    window = ContextWindow(max_context_tokens=100_000)
    first = await window.assemble(request, run_of("openai", state))
    moved = await window.assemble(request, run_of("anthropic", state))
    back = await window.assemble(request, run_of("openai", state))
    fresh = await ContextWindow(max_context_tokens=100_000).assemble(
        request, run_of("anthropic", AgentState())
    )
    assert moved.tokens == fresh.tokens != first.tokens
    assert back.tokens == first.tokens
    assert moved.breakdown["history"] - first.breakdown["history"] == (1590 - 765) + 2 * (4640 - 3000)


TWO_PICTURES = [
    "Compare these.",
    ImageBlock.from_bytes(png(1092, 1092)),
    ImageBlock.from_bytes(png(1092, 1092)),
]
"""Two pictures: 2 × 765 tokens by OpenAI's rule, 2 × 1590 by Anthropic's."""


def budget() -> ContextWindow:
    return ContextWindow(max_context_tokens=2_600, reply_reserve=500)


async def test_two_pictures_fit_an_openai_models_budget(server: OpenAIServer) -> None:
    server.script(Reply.sse(text_chunk("Two grey squares."), finish_chunk(), DONE))
    async with make_model(server) as model:
        result = await Agent(model, middleware=[budget()]).call(TWO_PICTURES)
    assert result.text == "Two grey squares."
    assert len(server.requests) == 1


async def test_two_pictures_overflow_an_anthropic_models_budget_before_a_request(
    anthropic: AnthropicServer,
) -> None:
    anthropic.script(reply(text_block(0, "never sent")))
    async with make_anthropic(anthropic) as model:
        with pytest.raises(ContextBudgetExceeded) as exceeded:
            await Agent(model, middleware=[budget()]).call(TWO_PICTURES)
    assert exceeded.value.allowed == 2_100
    assert exceeded.value.breakdown["history"] > 2 * 1590
    assert anthropic.requests == []
