"""Long-term memory: the numpy index, the embedding cache, records from messages, recall into the window."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from rxagent.events import ContextCompressed, MemoriesRecalled
from rxagent.memory import (
    CachedEmbedder,
    ContextWindow,
    Embedder,
    LongTermMemory,
    MemoryRecord,
    NumpyVectorIndex,
    TiktokenCounter,
    VectorIndex,
    records_from_messages,
)
from rxagent.memory.window import MEMORY_HEADER
from rxagent.messages import Msg
from rxagent.state import AgentState

from .conversations import assert_pairs_intact, bag_of_words, context, exchange, filler, request_for


class BagOfWords:
    """A deterministic embedder (hashed word counts) that records what it embeds."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    @property
    def name(self) -> str:
        return "bag-of-words"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [bag_of_words(text) for text in texts]


def test_import_rxagent_and_the_memory_package_does_not_import_numpy() -> None:
    code = "import sys, rxagent, rxagent.memory; print('numpy' in sys.modules, 'llama_cpp' in sys.modules)"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.split() == ["False", "False"]


def test_the_embedders_and_the_index_implement_their_protocols() -> None:
    assert isinstance(BagOfWords(), Embedder)
    assert isinstance(CachedEmbedder(BagOfWords()), Embedder)
    assert isinstance(NumpyVectorIndex(), VectorIndex)


# ---- the index -----------------------------------------------------------------------------------------


async def test_search_returns_the_nearest_records_best_first() -> None:
    index = NumpyVectorIndex()
    records = [MemoryRecord("x", "x"), MemoryRecord("y", "y"), MemoryRecord("xy", "xy")]
    await index.add(records, [[1, 0, 0], [0, 1, 0], [1, 1, 0]])
    hits = await index.search([1, 0.1, 0], k=2)
    assert [h.record.id for h in hits] == ["x", "xy"]
    assert hits[0].score == pytest.approx(1 / math.sqrt(1.01), rel=1e-5)
    assert hits[1].score == pytest.approx(1.1 / (math.sqrt(2) * math.sqrt(1.01)), rel=1e-5)
    assert [h.record.id for h in await index.search([0, 0, 1], k=5)] == ["x", "y", "xy"]  # all score 0
    assert await index.search([0, 0, 0], k=3) == []
    assert await index.search([1, 0, 0], k=0) == []


async def test_scopes_keep_sessions_apart() -> None:
    index = NumpyVectorIndex()
    await index.add(
        [MemoryRecord("a", "a", scope="ada/1"), MemoryRecord("b", "b", scope="bob/1")], [[1, 0], [1, 0]]
    )
    assert [h.record.id for h in await index.search([1, 0], k=5, scope="bob/1")] == ["b"]
    assert await index.search([1, 0], k=5, scope="eve/1") == []
    assert (await index.count("ada/1"), await index.count("eve/1"), await index.count()) == (1, 0, 2)


async def test_adding_an_existing_id_replaces_the_record() -> None:
    index = NumpyVectorIndex()
    await index.add([MemoryRecord("a", "old")], [[1, 0]])
    await index.add([MemoryRecord("a", "new")], [[0, 1]])
    assert len(index) == 1
    [hit] = await index.search([0, 1], k=1)
    assert (hit.record.text, hit.score) == ("new", pytest.approx(1.0))


async def test_the_index_grows_past_its_initial_capacity() -> None:
    index = NumpyVectorIndex()
    for i in range(100):
        await index.add([MemoryRecord(f"r{i}", str(i))], [[math.cos(i / 10), math.sin(i / 10)]])
    assert len(index) == 100
    [hit] = await index.search([math.cos(4.2), math.sin(4.2)], k=1)
    assert hit.record.id == "r42"


async def test_bad_vectors_are_refused() -> None:
    index = NumpyVectorIndex()
    with pytest.raises(ValueError, match="2 records but 1 vectors"):
        await index.add([MemoryRecord("a", "a"), MemoryRecord("b", "b")], [[1.0]])
    with pytest.raises(ValueError, match="finite"):
        await index.add([MemoryRecord("a", "a")], [[float("nan"), 1.0]])
    await index.add([MemoryRecord("a", "a")], [[1.0, 0.0]])
    with pytest.raises(ValueError, match="dimension 3, the index holds dimension 2"):
        await index.add([MemoryRecord("b", "b")], [[1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="query has shape"):
        await index.search([1.0, 0.0, 0.0], k=1)
    assert len(index) == 1  # nothing half-added


async def test_the_index_persists_to_a_file_and_loads_it_back(tmp_path: Path) -> None:
    path = tmp_path / "memory" / "index.npz"
    index = NumpyVectorIndex(path)
    records = [
        MemoryRecord("a", "alpha", scope="s", metadata={"message_ids": ["m1"]}),
        MemoryRecord("b", "beta ünïcode", scope="s"),
    ]
    await index.add(records, [[1, 0], [0, 1]])
    assert path.exists()
    assert [p.name for p in path.parent.iterdir()] == ["index.npz"]  # no temporary file left
    loaded = NumpyVectorIndex(path)
    assert len(loaded) == 2
    assert loaded.dimension == 2
    [hit] = await loaded.search([0, 1], k=1, scope="s")
    assert hit.record == records[1]
    [first] = await loaded.search([1, 0], k=1)
    assert first.record.metadata == {"message_ids": ["m1"]}
    await loaded.add([MemoryRecord("c", "gamma", scope="s")], [[1, 1]])
    assert len(NumpyVectorIndex(path)) == 3


def test_a_damaged_index_file_is_reported(tmp_path: Path) -> None:
    import numpy as np

    path = tmp_path / "bad.npz"
    np.savez(path, vectors=np.zeros((2, 3), dtype=np.float32), records=np.array('[{"id": "a", "text": "a"}]'))
    with pytest.raises(ValueError, match="damaged"):
        len(NumpyVectorIndex(path))


# ---- the cache and the records ---------------------------------------------------------------------


async def test_the_cache_embeds_each_distinct_text_once() -> None:
    inner = BagOfWords()
    cached = CachedEmbedder(inner, max_entries=2)
    first = await cached.embed(["a cat", "a dog", "a cat"])
    assert inner.calls == [["a cat", "a dog"]]
    assert first[0] == first[2] == bag_of_words("a cat")
    await cached.embed(["a dog"])
    assert len(inner.calls) == 1
    assert (cached.hits, cached.misses) == (2, 2)
    await cached.embed(["a bird"])  # evicts the least recently used: "a cat"
    await cached.embed(["a cat"])
    assert inner.calls[-1] == ["a cat"]


def test_records_keep_a_call_with_its_result_and_split_long_texts() -> None:
    messages = [
        Msg.user("Find the launch code."),
        *exchange("c1", 5, tool="vault"),
        Msg.assistant("The code is " + "long " * 400),
    ]
    records = records_from_messages(messages, scope="ada/s", chunk_chars=500)
    assert records[0].text == "User: Find the launch code."
    assert records[1].text.startswith('Assistant called vault({"page":0})\nvault returned: data data')
    assert records[1].metadata == {"message_ids": [messages[1].id, messages[2].id]}
    tail = records[2:]
    first_id = messages[3].id
    assert [r.id for r in tail] == [first_id] + [f"{first_id}#{n}" for n in range(2, len(tail) + 1)]
    assert len(tail) == 5  # 2 022 characters in pieces of at most 500, cut between words
    assert all(len(r.text) <= 500 for r in tail)
    assert "".join(r.text for r in tail).replace(" ", "") == (
        "Assistant: The code is " + "long " * 400
    ).replace(" ", "")
    assert all(r.scope == "ada/s" for r in records)
    assert records_from_messages([Msg.assistant("")]) == []


async def test_recall_returns_the_relevant_memory_and_embeds_nothing_without_records() -> None:
    embedder = BagOfWords()
    memory = LongTermMemory(embedder)
    assert await memory.recall("anything at all", scope="s") == []
    assert embedder.calls == []  # empty scope: no embedding
    await memory.remember(
        [
            Msg.user("The staging database password lives in the vault under db-staging."),
            Msg.user("Lunch on Friday was mushroom pizza."),
            Msg.user("The cat sleeps on the sofa."),
        ],
        scope="s",
    )
    hits = await memory.recall("where is the staging database password?", k=2, scope="s")
    assert "db-staging" in hits[0].record.text
    assert hits[0].score > hits[1].score
    assert await memory.recall("   ", scope="s") == []


# ---- memory in the window ---------------------------------------------------------------------------


async def test_compressed_turns_are_remembered_and_recalled_when_relevant() -> None:
    embedder = BagOfWords()
    window = ContextWindow(
        max_context_tokens=1_500,
        reply_reserve=100,
        recent_turns=1,
        memory=LongTermMemory(embedder),
        memory_k=2,
        memory_tokens=200,
    )
    state = AgentState(
        messages=[
            Msg.user("Please note: the staging database password lives in the vault under db-staging."),
            Msg.assistant("Noted, the password is in the vault under db-staging."),
            *[
                m
                for i in range(6)
                for m in (Msg.user(f"Topic {i}: " + filler(300, "weather")), Msg.assistant("Sure."))
            ],
        ]
    )
    first = await window.assemble(request_for(state), context(state))
    compressed = [e for e in first.events if isinstance(e, ContextCompressed)]
    assert compressed
    assert compressed[0].memories_indexed >= 2
    state.messages.append(Msg.user("Where does the staging database password live?"))
    assembly = await window.assemble(request_for(state), context(state))
    [recalled] = [e for e in assembly.events if isinstance(e, MemoriesRecalled)]
    memory_message = next(
        m for m in assembly.request.messages if m.metadata.get("rxagent") == "recalled_memories"
    )
    assert memory_message.text.startswith(MEMORY_HEADER)
    assert "db-staging" in memory_message.text
    assert recalled.memory_ids[0] == state.messages[0].id
    assert recalled.scores == sorted(recalled.scores, reverse=True)
    assert recalled.query == "Where does the staging database password live?"
    assert recalled.tokens == TiktokenCounter().count_message(memory_message) <= 200
    assert assembly.tokens == TiktokenCounter().count_request(assembly.request) <= 1_400
    assert_pairs_intact(assembly.request.messages)
    # The memories sit after the system part and the summary, before the history.
    roles = [m.role for m in assembly.request.messages]
    assert roles[:3] == ["system", "system", "system"]
    # The query was embedded once, however often it is asked for.
    await window.assemble(request_for(state), context(state))
    queries = [t for call in embedder.calls for t in call if t.startswith("Where does")]
    assert len(queries) == 1


async def test_memories_of_another_session_are_not_recalled() -> None:
    memory = LongTermMemory(BagOfWords())
    window = ContextWindow(max_context_tokens=1_200, reply_reserve=100, recent_turns=1, memory=memory)
    state = AgentState(
        messages=[
            Msg.user("The secret word is pineapple."),
            Msg.assistant("Pineapple noted."),
            *[
                m
                for i in range(6)
                for m in (Msg.user(f"Topic {i}: " + filler(300, "rain")), Msg.assistant("Ok."))
            ],
        ]
    )
    await window.assemble(request_for(state), context(state, session="first"))
    other = AgentState(messages=[Msg.user("What is the secret word? pineapple?")])
    assembly = await window.assemble(request_for(other), context(other, session="second"))
    assert not any(isinstance(e, MemoriesRecalled) for e in assembly.events)
    assert await memory.index.count("ada/first") > 0
    assert await memory.index.count("ada/second") == 0
