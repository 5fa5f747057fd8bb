"""Embedders: an OpenAI-compatible endpoint on loopback, and the embedded llama.cpp model (``*_llama``).

Bad inputs tried: a base URL that is not absolute, one with a bad port and a password in it, zero batch
size and dimensions, malformed answers, error bodies quoting the key, the URL's password and its query key.
"""

from __future__ import annotations

import asyncio
import base64
import doctest
import json
import math
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from yarl import URL

import rxagent.memory
from rxagent.clock import VirtualClock
from rxagent.events import MemoriesRecalled
from rxagent.memory import ContextWindow, LongTermMemory, MemoryRecord
from rxagent.messages import Msg
from rxagent.model import embedders as embedders_module
from rxagent.model.embedders import EmbeddingResponseError, LlamaCppEmbedder, OpenAIEmbedder
from rxagent.model.errors import ModelConnectionError, ModelHTTPError, ModelTimeoutError
from rxagent.model.openai import Timeouts
from rxagent.state import AgentState
from tests.memory.conversations import bag_of_words, context, filler, request_for

API_KEY = "sk-test-secret-123"

Handler = Callable[[dict[str, Any]], web.Response]


def vectors_for(body: dict[str, Any]) -> web.Response:
    """The deterministic answer: a bag-of-words vector per input, listed in reverse order (with indexes)."""
    data = [
        {"object": "embedding", "index": i, "embedding": bag_of_words(t)} for i, t in enumerate(body["input"])
    ]
    return web.json_response({"object": "list", "data": data[::-1], "model": body["model"]})


@dataclass
class EmbeddingServer:
    """An OpenAI-compatible ``/v1/embeddings`` endpoint on 127.0.0.1 that records every request."""

    handler: Handler = vectors_for
    stall: bool = False
    """Never answer (until the client goes away)."""
    requests: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=lambda: [])
    queries: list[str] = field(default_factory=lambda: [])
    """Each request's query string, as sent."""

    def __post_init__(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self._handle)
        self._server = TestServer(app, host="127.0.0.1", port=0)

    @property
    def base_url(self) -> str:
        return str(self._server.make_url("/v1"))

    async def __aenter__(self) -> Self:
        await self._server.start_server()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._server.close()

    async def _handle(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        self.requests.append((dict(request.headers), body))
        self.queries.append(request.raw_path.partition("?")[2])
        if self.stall:
            await asyncio.Event().wait()  # cancelled when the client disconnects
        return self.handler(body)


async def test_vectors_come_back_in_input_order_in_batches() -> None:
    async with (
        EmbeddingServer() as server,
        OpenAIEmbedder(
            "embed-small", base_url=server.base_url, api_key=API_KEY, batch_size=2, dimensions=64
        ) as embedder,
    ):
        texts = ["red apple", "green pear", "red cherry", "blue sky", "red apple"]
        vectors = await embedder.embed(texts)
    assert vectors == [bag_of_words(t) for t in texts]
    assert [body["input"] for _, body in server.requests] == [texts[0:2], texts[2:4], texts[4:5]]
    headers, body = server.requests[0]
    assert headers["Authorization"] == f"Bearer {API_KEY}"
    assert body == {"model": "embed-small", "input": texts[0:2], "encoding_format": "float", "dimensions": 64}
    assert embedder.name == "openai:embed-small:64"
    assert API_KEY not in repr(embedder)


async def test_an_error_status_is_a_model_http_error_with_the_key_masked() -> None:
    def refuse(body: dict[str, Any]) -> web.Response:
        return web.json_response({"error": f"invalid key {API_KEY}"}, status=401)

    async with (
        EmbeddingServer(refuse) as server,
        OpenAIEmbedder("m", base_url=server.base_url, api_key=API_KEY) as embedder,
    ):
        with pytest.raises(ModelHTTPError) as caught:
            await embedder.embed(["x"])
    assert caught.value.status == 401
    assert not caught.value.retryable
    assert API_KEY not in str(caught.value)
    assert "**********" in str(caught.value)


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"not json", "not a JSON object"),
        (json.dumps({"data": []}).encode(), "expected 2 embeddings"),
        (
            json.dumps({"data": [{"index": 0, "embedding": [1]}, {"index": 0, "embedding": [1]}]}).encode(),
            "bad index",
        ),
        (
            json.dumps({"data": [{"index": 0, "embedding": "x"}, {"index": 1, "embedding": [1]}]}).encode(),
            "numbers",
        ),
        (
            json.dumps(
                {"data": [{"index": 0, "embedding": [1, 2]}, {"index": 1, "embedding": [1]}]}
            ).encode(),
            "dimens",
        ),
        (
            json.dumps(
                {"data": [{"index": 0, "embedding": [True]}, {"index": 1, "embedding": [1]}]}
            ).encode(),
            "numbers",
        ),
    ],
)
async def test_a_malformed_answer_is_an_embedding_response_error(payload: bytes, why: str) -> None:
    async with (
        EmbeddingServer(lambda body: web.Response(body=payload)) as server,
        OpenAIEmbedder("m", base_url=server.base_url, api_key=None, api_key_env=None) as embedder,
    ):
        with pytest.raises(EmbeddingResponseError, match=why):
            await embedder.embed(["a", "b"])
    headers, _ = server.requests[0]
    assert "Authorization" not in headers  # no key, no header


async def test_a_closed_port_is_a_connection_error() -> None:
    async with EmbeddingServer() as server:
        url = server.base_url
    embedder = OpenAIEmbedder("m", base_url=url, api_key_env=None)
    with pytest.raises(ModelConnectionError):
        await embedder.embed(["a"])
    await embedder.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await embedder.embed(["a"])


@pytest.mark.parametrize(
    ("timeouts", "kind", "at"),
    [(Timeouts(idle_read=30, total=300), "idle", 30.0), (Timeouts(idle_read=60, total=20), "total", 20.0)],
)
async def test_a_silent_server_times_out_by_the_first_limit(
    clock: VirtualClock, timeouts: Timeouts, kind: str, at: float
) -> None:
    async with (
        EmbeddingServer(stall=True) as server,
        OpenAIEmbedder(
            "m", base_url=server.base_url, api_key_env=None, timeouts=timeouts, clock=clock
        ) as embedder,
    ):
        with pytest.raises(ModelTimeoutError) as caught:
            await clock.run(embedder.embed(["a"]))
    assert caught.value.kind == kind
    assert clock.now() == at


PASSWORD = "pw-embed-DO-NOT-LEAK"
QUERY_KEY = "qk-embed-DO-NOT-LEAK"


def with_credentials(base_url: str) -> str:
    """``base_url`` with a proxy's user and password, and a key in its query."""
    url = URL(base_url).with_user("proxy").with_password(PASSWORD)
    return str(url.with_query({"api-version": "1", "api-key": QUERY_KEY}))


def assert_no_secret(text: str) -> None:
    for secret in (API_KEY, PASSWORD, QUERY_KEY):
        assert secret not in text


async def test_url_credentials_are_sent_beside_the_key_and_never_shown() -> None:
    def refuse(body: dict[str, Any]) -> web.Response:
        return web.json_response({"error": f"bad password {PASSWORD} for api-key={QUERY_KEY}"}, status=401)

    async with EmbeddingServer() as good, EmbeddingServer(refuse) as bad:
        async with OpenAIEmbedder("m", base_url=with_credentials(good.base_url), api_key=API_KEY) as embedder:
            assert await embedder.embed(["red apple"]) == [bag_of_words("red apple")]
            assert_no_secret(repr(embedder))
            assert_no_secret(repr(vars(embedder)))
            assert repr(embedder).startswith(
                "OpenAIEmbedder(model='m', url='http://proxy:**********@127.0.0.1:"
            )
        headers, _ = good.requests[0]
        assert headers["Authorization"] == f"Bearer {API_KEY}"
        assert (
            headers["Proxy-Authorization"]
            == "Basic " + base64.b64encode(f"proxy:{PASSWORD}".encode()).decode()
        )
        assert good.queries == [f"api-version=1&api-key={QUERY_KEY}"]

        async with OpenAIEmbedder("m", base_url=with_credentials(bad.base_url), api_key=API_KEY) as embedder:
            with pytest.raises(ModelHTTPError) as refused:
                await embedder.embed(["x"])
        closed = with_credentials(bad.base_url)
    assert_no_secret(str(refused.value))
    assert "HTTP 401 from http://proxy:**********@127.0.0.1:" in str(refused.value)
    assert "/v1/embeddings?api-version=1&api-key=**********" in str(refused.value)

    async with OpenAIEmbedder("m", base_url=closed, api_key=API_KEY) as embedder:  # nothing listens now
        with pytest.raises(ModelConnectionError) as unreachable:
            await embedder.embed(["x"])
    assert_no_secret("".join(traceback.format_exception(unreachable.value)))


def test_the_module_examples_run() -> None:
    results = doctest.testmod(embedders_module)
    assert results.attempted > 0
    assert results.failed == 0


def test_the_memory_package_still_exports_the_embedders() -> None:
    # They moved into the model layer; `from rxagent.memory import OpenAIEmbedder` keeps working.
    assert rxagent.memory.OpenAIEmbedder is OpenAIEmbedder
    assert rxagent.memory.LlamaCppEmbedder is LlamaCppEmbedder
    assert rxagent.memory.EmbeddingResponseError is EmbeddingResponseError
    assert {"OpenAIEmbedder", "LlamaCppEmbedder", "EmbeddingResponseError"} <= set(rxagent.memory.__all__)


def test_bad_embedder_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="absolute"):
        OpenAIEmbedder("m", base_url="localhost:8000")
    with pytest.raises(ValueError, match="absolute") as caught:
        OpenAIEmbedder("m", base_url=f"http://proxy:{PASSWORD}@127.0.0.1:99999/v1")
    assert PASSWORD not in str(caught.value)
    with pytest.raises(ValueError, match="batch_size"):
        OpenAIEmbedder("m", base_url="http://127.0.0.1:1/v1", batch_size=0)
    with pytest.raises(ValueError, match="dimensions"):
        OpenAIEmbedder("m", base_url="http://127.0.0.1:1/v1", dimensions=0)


async def test_the_window_recalls_the_relevant_memory_through_the_openai_embedder() -> None:
    async with (
        EmbeddingServer() as server,
        OpenAIEmbedder("embed-small", base_url=server.base_url, api_key=API_KEY) as embedder,
    ):
        window = ContextWindow(
            max_context_tokens=1_500, reply_reserve=100, recent_turns=1, memory=LongTermMemory(embedder)
        )
        state = AgentState(
            messages=[
                Msg.user("Remember: the deployment key for production is stored in vault path prod/deploy."),
                Msg.assistant("Understood: production deployment key at vault path prod/deploy."),
                *[
                    m
                    for i in range(5)
                    for m in (Msg.user(f"Chat {i}: " + filler(300, "music")), Msg.assistant("Ok."))
                ],
            ]
        )
        await window.assemble(request_for(state), context(state))
        state.messages.append(Msg.user("Which vault path holds the production deployment key?"))
        assembly = await window.assemble(request_for(state), context(state))
    [recalled] = [e for e in assembly.events if isinstance(e, MemoriesRecalled)]
    assert recalled.memory_ids[0] in {state.messages[0].id, state.messages[1].id}  # either mentions the path
    memories = next(m for m in assembly.request.messages if m.metadata.get("rxagent") == "recalled_memories")
    assert "prod/deploy" in memories.text
    assert all(body["model"] == "embed-small" for _, body in server.requests)


# ---- the embedded llama.cpp model (SmolLM2, loaded once per process) -----------------------------------


@pytest.mark.llm
async def test_embeddings_are_unit_vectors_of_the_model_dimension_llama() -> None:
    embedder = LlamaCppEmbedder()
    vectors = await embedder.embed(["The cat sat on the mat.", ""])
    assert len(vectors) == 2
    assert {len(v) for v in vectors} == {576}
    for vector in vectors:
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-4)
    assert embedder.name == "llama.cpp:SmolLM2-135M-Instruct.Q4_1.gguf"
    assert await embedder.embed([]) == []


@pytest.mark.llm
async def test_the_model_is_loaded_once_per_process_llama() -> None:
    first, second = LlamaCppEmbedder(), LlamaCppEmbedder()
    await first.embed(["one"])
    await second.embed(["two"])
    assert len([key for key in embedders_module._LLAMAS if key[0] == str(first.path)]) == 1


@pytest.mark.llm
async def test_recall_ranks_by_the_embedders_similarity_llama() -> None:
    # Which texts a 135M model finds similar is its own affair (and differs between builds); what recall
    # guarantees is the ranking by cosine similarity of the embedder's vectors, and that a stored text
    # asked for again comes first with a similarity of 1.
    embedder = LlamaCppEmbedder()
    memory = LongTermMemory(embedder)
    texts = {
        "password": "The staging database password is kept in the vault under the key db-staging.",
        "lunch": "We ordered mushroom pizza for the team lunch on Friday.",
        "cat": "The cat sleeps on the sofa all afternoon.",
    }
    await memory.remember_records([MemoryRecord(key, text) for key, text in texts.items()])
    query = "Where is the staging database password kept?"

    hits = await memory.recall(query, k=3)

    [query_vector, *vectors] = await embedder.embed([query, *texts.values()])
    similarity = {
        key: sum(q * v for q, v in zip(query_vector, vector, strict=True))
        for key, vector in zip(texts, vectors, strict=True)
    }
    # Scores are the vectors' cosine (stored as float32, and a batch embeds a hair differently), best first.
    assert {hit.record.id for hit in hits} == set(texts)
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    for hit in hits:
        assert math.isclose(hit.score, similarity[hit.record.id], abs_tol=1e-3)
    for key, text in texts.items():
        [best, *_] = await memory.recall(text, k=3)
        assert best.record.id == key
        assert math.isclose(best.score, 1.0, abs_tol=1e-3)
