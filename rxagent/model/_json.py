"""JSON as the HTTP model clients read and write it: compact bytes out, a fast parser in, lazy raw chunks.

Shared by every wire format here (:mod:`rxagent.model._openai_wire`, :mod:`rxagent.model._anthropic_wire`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic_core import from_json

__all__ = ["LazyJsonObject", "dumps", "loads", "make"]


def loads(data: str) -> Any:
    """``json.loads`` at a third of the cost: pydantic-core's parser, with the standard library
    as the fallback for the little it rejects that ``json`` accepts (a lone surrogate escape, ``\\ud800``).

    Raises:
        ValueError: ``data`` is not JSON (the standard library's error, naming the position).
    """
    try:
        return from_json(data)
    except ValueError:
        return json.loads(data)


def dumps(value: object) -> bytes:
    """Compact UTF-8 JSON, as sent on the wire."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


class LazyJsonObject(Mapping[str, Any]):
    """A streamed chunk's JSON object, decoded on first use (what ``ChatChunk.raw`` holds).

    rxagent reads chunks through typed shapes; few consumers ever look at ``raw``, and decoding every
    chunk twice would double the hot path's cost. ``source`` holds the chunk's text (which msgspec read as
    an object, so the general decoder does too) until then, the object after. A parser makes one per
    streamed token, so it sets the slot directly on an object made by :data:`make` rather than paying for an
    ``__init__`` call.
    """

    __slots__ = ("source",)

    source: str | dict[str, Any]

    def _decoded(self) -> dict[str, Any]:
        source = self.source
        if isinstance(source, str):
            source = self.source = loads(source)
        return source

    def __getitem__(self, key: str) -> Any:
        return self._decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._decoded())

    def __repr__(self) -> str:
        return repr(self._decoded())


make = object.__new__
"""Makes a :class:`LazyJsonObject` without calling ``__init__``, in C (``make(LazyJsonObject)``; the parser
then sets its one slot)."""
