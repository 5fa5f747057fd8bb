from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Outcome"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """Why a stream ended: ``completed``, ``failed`` (with the error) or ``cancelled`` (disposed)."""

    kind: Literal["completed", "failed", "cancelled"]
    error: BaseException | None = None

    @staticmethod
    def completed() -> Outcome:
        """The stream completed."""
        return _COMPLETED

    @staticmethod
    def failed(error: BaseException) -> Outcome:
        """The stream failed with ``error``."""
        return Outcome("failed", error)

    @staticmethod
    def cancelled() -> Outcome:
        """The subscription was disposed before the stream ended."""
        return _CANCELLED


_COMPLETED = Outcome("completed")
_CANCELLED = Outcome("cancelled")
