"""The examples in the notebook package's docstrings run."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

import rxagent.notebook
from rxagent.notebook import _live


@pytest.mark.parametrize("module", [rxagent.notebook, _live])
def test_module_examples(module: ModuleType) -> None:
    results = doctest.testmod(module)
    assert results.attempted > 0
    assert results.failed == 0
