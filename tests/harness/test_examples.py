"""The examples in the docstrings of the harness's todo, skill and budget parts run."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

from rxagent.harness import budget, skills, todos


@pytest.mark.parametrize("module", [todos, skills, budget])
def test_module_examples(module: ModuleType) -> None:
    results = doctest.testmod(module)
    assert results.attempted > 0
    assert results.failed == 0
