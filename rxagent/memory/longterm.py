"""Long-term memory: older parts of a conversation, embedded, indexed and recalled by relevance.

Three pieces, each behind a protocol so that any backend fits:

- an :class:`Embedder` turns texts into vectors (:mod:`rxagent.model.embedders` has one on the embedded
  llama.cpp model and one on any OpenAI-compatible ``/v1/embeddings`` endpoint); :class:`CachedEmbedder`
  keeps the vectors of texts already seen;
- a :class:`VectorIndex` stores :class:`MemoryRecord` values with their vectors and finds the nearest
  ones; :class:`NumpyVectorIndex` is the in-process default (cosine similarity, persisted to a file);
- :class:`LongTermMemory` ties them together: ``remember`` messages (grouped so a tool call and its result
  stay in one record, long ones split into chunks), ``recall`` the top-k records for a query.

numpy is imported on first use, so ``import rxagent`` stays light.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

from pydantic import JsonValue

from rxagent.memory.summary import render_message
from rxagent.messages import Msg

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "CachedEmbedder",
    "Embedder",
    "LongTermMemory",
    "MemoryHit",
    "MemoryRecord",
    "NumpyVectorIndex",
    "VectorIndex",
    "records_from_messages",
]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into embedding vectors (all of the same dimension)."""

    @property
    def name(self) -> str:
        """Which model makes the vectors: vectors of different embedders must not be mixed in one index."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One remembered text.

    Attributes:
        id: unique id (adding a record with an existing id replaces it).
        text: what is recalled, as it will be shown to the model.
        scope: who may recall it: the context window uses ``"<user>/<session>"``, ``"<user>"`` or ``""``.
        metadata: free-form JSON data (the window stores the ids of the messages the text came from).
    """

    id: str
    text: str
    scope: str = ""
    metadata: Mapping[str, JsonValue] = field(default_factory=lambda: {})


@dataclass(frozen=True, slots=True)
class MemoryHit:
    """A recalled record and its cosine similarity to the query (-1 … 1, higher is closer)."""

    record: MemoryRecord
    score: float


@runtime_checkable
class VectorIndex(Protocol):
    """Stores records with their vectors and finds the ones nearest to a query vector."""

    async def add(self, records: Sequence[MemoryRecord], vectors: Sequence[Sequence[float]]) -> None:
        """Store ``records`` with their ``vectors`` (same order); an existing id is replaced."""
        ...

    async def search(self, vector: Sequence[float], *, k: int, scope: str | None = None) -> list[MemoryHit]:
        """The ``k`` records most similar to ``vector`` (in ``scope``, if given), best first."""
        ...

    async def count(self, scope: str | None = None) -> int:
        """How many records are stored (in ``scope``, if given)."""
        ...


class CachedEmbedder:
    """An :class:`Embedder` that remembers the vectors of the last ``max_entries`` distinct texts.

    The context window embeds the latest user text before every request of a turn; with the cache that is
    one embedding per distinct text. Texts asked for twice in one call are embedded once.

    Args:
        embedder: the embedder to call for texts not in the cache.
        max_entries: texts kept (least recently used go first).
    """

    def __init__(self, embedder: Embedder, max_entries: int = 4_096) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.embedder = embedder
        self.max_entries = max_entries
        self._vectors: OrderedDict[str, tuple[float, ...]] = OrderedDict()
        self.hits = 0
        """Texts answered from the cache."""
        self.misses = 0
        """Texts sent to the wrapped embedder."""

    @property
    def name(self) -> str:
        """The wrapped embedder's name."""
        return self.embedder.name

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for ``texts``: cached ones at once, the others from the wrapped embedder in one call."""
        missing = list(dict.fromkeys(text for text in texts if text not in self._vectors))
        if missing:
            vectors = await self.embedder.embed(missing)
            if len(vectors) != len(missing):
                name = self.embedder.name
                raise ValueError(f"embedder {name!r} gave {len(vectors)} vectors for {len(missing)} texts")
            for text, vector in zip(missing, vectors, strict=True):
                self._vectors[text] = tuple(vector)
        self.misses += len(missing)
        self.hits += len(texts) - len(missing)
        found: list[list[float]] = []
        for text in texts:
            vector = self._vectors[text]
            self._vectors.move_to_end(text)
            found.append(list(vector))
        while len(self._vectors) > self.max_entries:
            self._vectors.popitem(last=False)
        return found


class NumpyVectorIndex:
    """The in-process :class:`VectorIndex`: a numpy matrix of unit vectors, searched by cosine similarity.

    Search is exact (one matrix-vector product over the records in scope), fine up to hundreds of
    thousands of records. With a ``path``, the index loads from that file when it exists and rewrites it
    (atomically, in a worker thread) after every ``add``; the file is an ``.npz`` holding the vectors and
    the records as JSON (no pickle).

    Args:
        path: where to persist the index (``None``: in memory only).

    Raises:
        ValueError: on ``add``, vectors of another dimension than those already stored, or a count that
            does not match the records.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._records: list[MemoryRecord] = []
        self._rows: dict[str, int] = {}
        self._scopes: dict[str, int] = {}  # scope -> code, for vectorised filtering
        self._matrix: npt.NDArray[np.float32] | None = None  # capacity rows; the first len(records) used
        self._scope_codes: npt.NDArray[np.int32] | None = None
        self._loaded = False
        self._save_lock = asyncio.Lock()

    def __len__(self) -> int:
        self._load_once()
        return len(self._records)

    @property
    def dimension(self) -> int | None:
        """The vectors' dimension (``None`` while empty)."""
        self._load_once()
        return None if self._matrix is None else int(self._matrix.shape[1])

    # ---- the VectorIndex protocol ---------------------------------------------------------------------

    async def add(self, records: Sequence[MemoryRecord], vectors: Sequence[Sequence[float]]) -> None:
        """Store ``records`` with ``vectors``; then rewrite the file, if the index has one."""
        self.add_now(records, vectors)
        if self.path is not None:
            snapshot = self._snapshot()
            async with self._save_lock:  # two saves must not race on the same temporary name
                await asyncio.to_thread(self._write, self.path, *snapshot)

    async def search(self, vector: Sequence[float], *, k: int, scope: str | None = None) -> list[MemoryHit]:
        """The ``k`` records nearest to ``vector`` by cosine similarity, best first."""
        return self.search_now(vector, k=k, scope=scope)

    async def count(self, scope: str | None = None) -> int:
        """Records stored (in ``scope``, if given)."""
        return self.count_now(scope)

    # ---- synchronous forms ----------------------------------------------------------------------------

    def count_now(self, scope: str | None = None) -> int:
        """:meth:`count`, synchronously."""
        self._load_once()
        if scope is None:
            return len(self._records)
        code = self._scopes.get(scope)
        if code is None or self._scope_codes is None:
            return 0
        import numpy as np

        return int(np.count_nonzero(self._scope_codes[: len(self._records)] == code))

    def add_now(self, records: Sequence[MemoryRecord], vectors: Sequence[Sequence[float]]) -> None:
        """:meth:`add` without the file write."""
        import numpy as np

        self._load_once()
        if len(records) != len(vectors):
            raise ValueError(f"{len(records)} records but {len(vectors)} vectors")
        if not records:
            return
        rows = np.asarray(vectors, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[1] == 0:
            raise ValueError(f"vectors must be a non-empty 2-D array, got shape {rows.shape}")
        if self._matrix is not None and rows.shape[1] != self._matrix.shape[1]:
            raise ValueError(
                f"vectors have dimension {rows.shape[1]}, the index holds dimension {self._matrix.shape[1]} "
                "(vectors of different embedders cannot share an index)"
            )
        if not np.isfinite(rows).all():
            raise ValueError("vectors must be finite (no NaN or infinity)")
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        rows = rows / np.where(norms == 0, 1, norms)  # a zero vector stays zero: similarity 0 to anything
        for record, row in zip(records, rows, strict=True):
            position = self._rows.get(record.id)
            if position is None:
                position = len(self._records)
                self._ensure_capacity(position + 1, rows.shape[1])
                self._records.append(record)
                self._rows[record.id] = position
            else:
                self._records[position] = record
            matrix, codes = self._matrix, self._scope_codes
            assert matrix is not None
            assert codes is not None
            matrix[position] = row
            codes[position] = self._scopes.setdefault(record.scope, len(self._scopes))

    def search_now(self, vector: Sequence[float], *, k: int, scope: str | None = None) -> list[MemoryHit]:
        """:meth:`search`, synchronously."""
        import numpy as np

        self._load_once()
        size = len(self._records)
        if k <= 0 or size == 0 or self._matrix is None or self._scope_codes is None:
            return []
        query = np.asarray(vector, dtype=np.float32)
        if query.shape != (self._matrix.shape[1],):
            dimension = self._matrix.shape[1]
            raise ValueError(f"query has shape {query.shape}, the index holds dimension {dimension}")
        norm = float(np.linalg.norm(query))
        if norm == 0 or not np.isfinite(norm):
            return []
        scores = self._matrix[:size] @ (query / norm)
        if scope is not None:
            code = self._scopes.get(scope)
            if code is None:
                return []
            scores = np.where(self._scope_codes[:size] == code, scores, -np.inf)
        k = min(k, size)
        best = np.argpartition(-scores, k - 1)[:k]
        ordered = best[np.argsort(-scores[best], kind="stable")]
        return [MemoryHit(self._records[int(i)], float(scores[i])) for i in ordered if np.isfinite(scores[i])]

    # ---- storage --------------------------------------------------------------------------------------

    def _ensure_capacity(self, rows: int, dimension: int) -> None:
        import numpy as np

        matrix = self._matrix
        if matrix is not None and matrix.shape[0] >= rows:
            return
        capacity = max(16, rows, 2 * (matrix.shape[0] if matrix is not None else 0))  # amortised growth
        grown = np.zeros((capacity, dimension), dtype=np.float32)
        codes = np.zeros(capacity, dtype=np.int32)
        if matrix is not None and self._scope_codes is not None:
            used = len(self._records)
            grown[:used] = matrix[:used]
            codes[:used] = self._scope_codes[:used]
        self._matrix, self._scope_codes = grown, codes

    def _snapshot(self) -> tuple[npt.NDArray[np.float32], str]:
        assert self._matrix is not None
        records = [
            {"id": record.id, "text": record.text, "scope": record.scope, "metadata": dict(record.metadata)}
            for record in self._records
        ]
        return self._matrix[: len(self._records)].copy(), json.dumps(records, ensure_ascii=False)

    @staticmethod
    def _write(path: Path, vectors: npt.NDArray[np.float32], records: str) -> None:
        import numpy as np

        path.parent.mkdir(parents=True, exist_ok=True)
        # Write a temporary file next to the target, then rename: a crash never leaves half an index.
        handle, temporary = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(handle, "wb") as file:
                np.savez(file, vectors=vectors, records=np.array(records))
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def save(self, path: str | os.PathLike[str] | None = None) -> None:
        """Write the index to ``path`` (default: its own path) now."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ValueError("this index has no path: pass one")
        self._load_once()
        if self._matrix is None:
            import numpy as np

            self._write(target, np.zeros((0, 0), dtype=np.float32), "[]")
            return
        self._write(target, *self._snapshot())

    def _load_once(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        if self.path is None or not self.path.exists():
            return
        import numpy as np

        with np.load(self.path, allow_pickle=False) as data:
            vectors = cast("npt.NDArray[np.float32]", data["vectors"])
            raw = json.loads(str(data["records"]))
        if not isinstance(raw, list) or len(cast("list[object]", raw)) != len(vectors):
            raise ValueError(f"{self.path}: the records do not match the vectors; the file is damaged")
        records = [_record_from_json(item) for item in cast("list[object]", raw)]
        if records:
            self.add_now(records, vectors.tolist())


def _record_from_json(item: object) -> MemoryRecord:
    if not isinstance(item, dict):
        raise ValueError(f"a stored memory record is not an object: {item!r}")
    data = cast("dict[str, JsonValue]", item)
    metadata = data.get("metadata") or {}
    identifier, text, scope = data.get("id"), data.get("text"), data.get("scope", "")
    if not isinstance(identifier, str) or not isinstance(text, str) or not isinstance(scope, str):
        raise ValueError(f"a stored memory record lacks id/text/scope strings: {item!r}")
    if not isinstance(metadata, dict):
        raise ValueError(f"a stored memory record's metadata is not an object: {item!r}")
    return MemoryRecord(id=identifier, text=text, scope=scope, metadata=metadata)


def records_from_messages(
    messages: Sequence[Msg], *, scope: str = "", chunk_chars: int = 1_500
) -> list[MemoryRecord]:
    """Memory records for ``messages``: one per exchange, split into chunks of at most ``chunk_chars``.

    An exchange is a message with the tool messages that follow it, so a call and its result are
    remembered (and recalled) together. Record ids are the first message's id (``#2``, ``#3``, … for
    later chunks); ``metadata["message_ids"]`` lists the messages a record came from.

    Example:
        >>> [r.text for r in records_from_messages([Msg.user("The launch code is 4242.")])]
        ['User: The launch code is 4242.']
    """
    if chunk_chars < 1:
        raise ValueError("chunk_chars must be at least 1")
    groups: list[list[Msg]] = []
    for message in messages:
        if message.role == "tool" and groups:
            groups[-1].append(message)
        else:
            groups.append([message])
    records: list[MemoryRecord] = []
    for group in groups:
        lines = [line for message in group for line in render_message(message, max_chars=None)]
        if not lines:
            continue
        ids: list[JsonValue] = [message.id for message in group]
        for part, text in enumerate(_chunks("\n".join(lines), chunk_chars), start=1):
            suffix = "" if part == 1 else f"#{part}"
            records.append(
                MemoryRecord(
                    id=f"{group[0].id}{suffix}", text=text, scope=scope, metadata={"message_ids": ids}
                )
            )
    return records


def _chunks(text: str, size: int) -> list[str]:
    """``text`` in pieces of at most ``size`` characters, cut at a line break or space where possible."""
    pieces: list[str] = []
    while len(text) > size:
        cut = max(text.rfind("\n", 0, size + 1), text.rfind(" ", 0, size + 1))
        if cut <= size // 2:  # no good break point: cut mid-word rather than make tiny pieces
            cut = size
        pieces.append(text[:cut].strip())
        text = text[cut:].strip()
    if text:
        pieces.append(text)
    return [piece for piece in pieces if piece]


class LongTermMemory:
    """Remembers texts with their embeddings and recalls the most relevant ones.

    Args:
        embedder: makes the vectors; wrapped in a :class:`CachedEmbedder` unless ``cache_size`` is 0.
        index: stores them (default: an in-memory :class:`NumpyVectorIndex`).
        cache_size: distinct texts whose vectors are cached (0: no cache).
        chunk_chars: the longest text one record holds; longer exchanges become several records.
        min_score: recalled records must be at least this similar to the query.

    Example:
        >>> # memory = LongTermMemory(LlamaCppEmbedder(), NumpyVectorIndex("memory.npz"))
        >>> # await memory.remember(old_messages, scope="ada/s1")
        >>> # hits = await memory.recall("what was the launch code?", k=3, scope="ada/s1")
    """

    def __init__(
        self,
        embedder: Embedder,
        index: VectorIndex | None = None,
        *,
        cache_size: int = 4_096,
        chunk_chars: int = 1_500,
        min_score: float = 0.0,
    ) -> None:
        if cache_size < 0:
            raise ValueError("cache_size must be >= 0")
        self.embedder: Embedder = CachedEmbedder(embedder, cache_size) if cache_size else embedder
        self.index: VectorIndex = index if index is not None else NumpyVectorIndex()
        self.chunk_chars = chunk_chars
        self.min_score = min_score

    async def remember(self, messages: Sequence[Msg], *, scope: str = "") -> list[MemoryRecord]:
        """Embed and store ``messages`` (see :func:`records_from_messages`); returns the records written."""
        records = records_from_messages(messages, scope=scope, chunk_chars=self.chunk_chars)
        return await self.remember_records(records)

    async def remember_records(self, records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
        """Embed and store ``records`` as they are."""
        if not records:
            return []
        vectors = await self.embedder.embed([record.text for record in records])
        await self.index.add(records, vectors)
        return list(records)

    async def recall(self, query: str, *, k: int = 3, scope: str | None = None) -> list[MemoryHit]:
        """The ``k`` records most relevant to ``query`` (in ``scope``, if given), best first.

        Nothing is embedded when the query is blank or the scope holds no record.
        """
        if k <= 0 or not query.strip() or await self.index.count(scope) == 0:
            return []
        [vector] = await self.embedder.embed([query])
        hits = await self.index.search(vector, k=k, scope=scope)
        return [hit for hit in hits if hit.score >= self.min_score]
