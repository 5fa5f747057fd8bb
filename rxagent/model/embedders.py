"""Embedders: the embedded llama.cpp model, and any OpenAI-compatible ``/v1/embeddings`` endpoint.

Both implement :class:`~rxagent.memory.Embedder`, the protocol long-term memory asks for. They are model
clients, so they live in the model layer: :class:`OpenAIEmbedder` shares the HTTP endpoint of
:class:`~rxagent.model.OpenAIChatModel`, :class:`LlamaCppEmbedder` the llama.cpp loading of
:class:`~rxagent.model.LlamaCppModel`; :mod:`rxagent.memory` re-exports them. :class:`LlamaCppEmbedder`
loads its model once per process and computes in a worker thread, so the event loop never blocks on it.
:class:`OpenAIEmbedder` posts to ``{base_url}/embeddings`` over aiohttp, inside ``async with`` so that
cancelling the awaiting task closes the response.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pydantic import SecretStr

from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.model._endpoint import HttpEndpoint, Timeouts
from rxagent.model.errors import ModelError
from rxagent.model.gguf import default_gguf_path
from rxagent.model.llama_runtime import extra_bufts_wanted, import_llama, load_llama

if TYPE_CHECKING:
    import llama_cpp


__all__ = ["EmbeddingResponseError", "LlamaCppEmbedder", "OpenAIEmbedder"]


class EmbeddingResponseError(ModelError):
    """The embeddings endpoint answered 2xx with something that is not the vectors asked for."""


# ---- llama.cpp ------------------------------------------------------------------------------------------

_LLAMAS: dict[tuple[str, int, bool], tuple[llama_cpp.Llama, threading.Lock]] = {}
_LLAMAS_LOCK = threading.Lock()


def _shared_llama(path: Path, n_ctx: int, use_extra_bufts: bool) -> tuple[llama_cpp.Llama, threading.Lock]:
    # One model per file, context size and load setting per process: loading costs memory and time, and a
    # llama.cpp context is not thread-safe, so each comes with the lock its calls are serialised on.
    key = (str(path), n_ctx, use_extra_bufts)
    with _LLAMAS_LOCK:
        found = _LLAMAS.get(key)
        if found is None:
            bindings = import_llama()
            model = load_llama(
                str(path),
                use_extra_bufts=use_extra_bufts,
                embedding=True,
                # Decoder models (SmolLM2) pool nothing by default: ask for one mean vector per text.
                pooling_type=bindings.LLAMA_POOLING_TYPE_MEAN,
                n_ctx=n_ctx,
                n_batch=n_ctx,
                verbose=False,
            )
            if not _LLAMAS:
                # Free the models while the interpreter is whole: llama.cpp's finaliser fails at shutdown.
                atexit.register(_close_llamas)
            found = _LLAMAS[key] = (model, threading.Lock())
        return found


def _close_llamas() -> None:
    with _LLAMAS_LOCK:
        for model, lock in _LLAMAS.values():
            with lock:
                model.close()
        _LLAMAS.clear()


class LlamaCppEmbedder:
    """Embeddings from a GGUF model run in-process by llama.cpp (default: the packaged SmolLM2).

    Texts are mean-pooled over their tokens and L2-normalised; a text longer than ``n_ctx`` tokens is cut
    to its first ``n_ctx``. The model is loaded on the first ``embed`` (in the worker thread) and shared by
    every embedder on the same file in the process.

    Args:
        model_path: a GGUF file (default: :func:`~rxagent.model.gguf.default_gguf_path`).
        n_ctx: the longest text embedded, in tokens.
        use_extra_bufts: load the weights into llama.cpp's extra buffer types; ``None`` (default):
            ``$RXAGENT_LLAMA_EXTRA_BUFTS``, else off (as :class:`~rxagent.model.llama_cpp.LlamaCppModel`).

    Raises:
        MissingModelError: no model file was found (at construction).
        ValueError: ``n_ctx`` below 8, or ``$RXAGENT_LLAMA_EXTRA_BUFTS`` neither on nor off.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int = 512,
        use_extra_bufts: bool | None = None,
    ) -> None:
        if n_ctx < 8:
            raise ValueError("n_ctx must be at least 8")
        self.path = default_gguf_path(model_path)
        self.n_ctx = n_ctx
        self.use_extra_bufts = extra_bufts_wanted(use_extra_bufts)

    def __repr__(self) -> str:
        return f"LlamaCppEmbedder({str(self.path)!r}, n_ctx={self.n_ctx})"

    @property
    def name(self) -> str:
        """``"llama.cpp:<file name>"``."""
        return f"llama.cpp:{self.path.name}"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text, computed in a worker thread.

        Cancelling the awaiting task stops waiting; the batch being computed finishes in its thread.
        """
        if not texts:
            return []
        return await asyncio.to_thread(self.embed_blocking, list(texts))

    def embed_blocking(self, texts: Sequence[str]) -> list[list[float]]:
        """:meth:`embed` on the calling thread (it blocks)."""
        model, lock = _shared_llama(self.path, self.n_ctx, self.use_extra_bufts)
        # An empty text has no token to pool: embed a space instead.
        inputs = [text if text.strip() else " " for text in texts]
        with lock:
            raw = cast("list[Any]", model.embed(inputs, normalize=True, truncate=True))
        vectors = [[float(value) for value in cast("list[float]", vector)] for vector in raw]
        if len(vectors) != len(inputs) or any(not vector for vector in vectors):
            raise EmbeddingResponseError(f"llama.cpp returned {len(vectors)} vectors for {len(inputs)} texts")
        return vectors


# ---- OpenAI-compatible endpoint -------------------------------------------------------------------------


class OpenAIEmbedder(HttpEndpoint):
    """Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint (OpenAI, vLLM, llama.cpp, Ollama…).

    One ``aiohttp.ClientSession`` per embedder, created on first use on the running loop and closed by
    :meth:`aclose` or by leaving ``async with``. Texts go in batches of ``batch_size`` per request. The
    API key lives in a :class:`pydantic.SecretStr` and only in the ``Authorization`` header; server text
    quoted in errors has it masked. Credentials in ``base_url`` are sent as Basic credentials and never
    shown, as for :class:`~rxagent.model.OpenAIChatModel`. Calls are not retried.

    Args:
        model: the embedding model's name on the server.
        base_url: the API root (requests go to ``{base_url}/embeddings``, with its query kept; credentials
            in it, ``http://user:password@host/v1``, go in ``Authorization``, or in ``Proxy-Authorization``
            when the key fills ``Authorization``).
        api_key: sent as ``Authorization: Bearer …``; ``None`` reads ``api_key_env`` (no key: no header).
        api_key_env: environment variable holding the key (``None``: don't read one).
        dimensions: ask for vectors of this size (models that support it).
        batch_size: the most texts per request.
        timeouts: connect, idle-read and total timeouts of one request.
        headers: extra HTTP headers.
        clock: where the timeouts run: the loop's by default, a :class:`~rxagent.clock.VirtualClock` in
            tests.

    Raises:
        ModelHTTPError: an error status. ModelConnectionError: no connection, or a broken one.
        ModelTimeoutError: a timeout. EmbeddingResponseError: a 2xx answer without the vectors asked for.

    Example:
        >>> OpenAIEmbedder("embed-small", base_url="http://127.0.0.1:8000/v1", api_key="sk-secret")
        OpenAIEmbedder(model='embed-small', url='http://127.0.0.1:8000/v1/embeddings', api_key='**********')
        >>> # async with OpenAIEmbedder(...) as embedder: vectors = await embedder.embed(["hello"])
    """

    _kind = "embedder"
    _server = "the embeddings server"

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | SecretStr | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        dimensions: int | None = None,
        batch_size: int = 256,
        timeouts: Timeouts | None = None,
        headers: Mapping[str, str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if dimensions is not None and dimensions < 1:
            raise ValueError("dimensions must be at least 1")
        super().__init__(
            base_url=base_url,
            path="embeddings",
            api_key=api_key,
            api_key_env=api_key_env,
            timeouts=timeouts,
            headers=headers,
            clock=clock,
        )
        self._model = model
        self._dimensions = dimensions
        self._batch_size = batch_size

    def __repr__(self) -> str:
        shown = self._shown_url
        return f"OpenAIEmbedder(model={self._model!r}, url={shown!r}, api_key={self._masked_key()})"

    @property
    def name(self) -> str:
        """``"openai:<model>"`` (plus ``:<dimensions>`` when a size was asked for)."""
        return f"openai:{self._model}" + (f":{self._dimensions}" if self._dimensions else "")

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order (one request per ``batch_size`` texts)."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            vectors.extend(await self._embed_batch(list(texts[start : start + self._batch_size])))
        return vectors

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, object] = {"model": self._model, "input": texts, "encoding_format": "float"}
        if self._dimensions is not None:
            body["dimensions"] = self._dimensions
        return self._vectors(await self._fetch("POST", json.dumps(body)), len(texts))

    def _vectors(self, payload: bytes, expected: int) -> list[list[float]]:
        def bad(why: str) -> EmbeddingResponseError:
            snippet = self._redact(payload[:200].decode("utf-8", "replace"))
            return EmbeddingResponseError(f"{why} from {self._shown_url}: {snippet!r}")

        try:
            decoded: object = json.loads(payload)
        except ValueError:
            decoded = None
        if not isinstance(decoded, dict):
            raise bad("the response is not a JSON object")
        data = cast("dict[str, object]", decoded).get("data")
        if not isinstance(data, list) or len(cast("list[object]", data)) != expected:
            raise bad(f"expected {expected} embeddings in 'data'")
        found: dict[int, list[float]] = {}
        for position, item in enumerate(cast("list[object]", data)):
            if not isinstance(item, dict):
                raise bad("an embedding entry is not an object")
            entry = cast("dict[str, object]", item)
            index = entry.get("index", position)
            vector = entry.get("embedding")
            if not isinstance(index, int) or not 0 <= index < expected or index in found:
                raise bad(f"embedding entry {position} has a bad index {index!r}")
            if not isinstance(vector, list) or not vector:
                raise bad(f"embedding {index} is not a list of numbers")
            values = cast("list[object]", vector)
            if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                raise bad(f"embedding {index} is not a list of numbers")
            found[index] = [float(cast("float", v)) for v in values]
        dimensions = {len(vector) for vector in found.values()}
        if len(dimensions) != 1:
            raise bad(f"the embeddings have different dimensions {sorted(dimensions)}")
        return [found[i] for i in range(expected)]
