"""The examples in the memory package's docstrings run."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

import rxagent.memory
from rxagent.memory import longterm, summary, tokens, window


@pytest.mark.parametrize("module", [rxagent.memory, tokens, window, summary, longterm])
def test_module_examples(module: ModuleType) -> None:
    results = doctest.testmod(module)
    assert results.attempted > 0
    assert results.failed == 0
