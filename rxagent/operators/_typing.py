from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias, TypeVar

from reactivex import Observable

__all__ = ["Operator"]

_T = TypeVar("_T")
_R = TypeVar("_R")

Operator: TypeAlias = Callable[[Observable[_T]], Observable[_R]]
"""A stream operator: takes an observable of ``T``, returns an observable of ``R``."""
