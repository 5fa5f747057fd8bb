"""The run core stays small: what issue 22 measured and a later change could silently undo.

A run's state is a handful of fields (dependencies live apart, in the frozen ``RunDeps``), the host that
runs the loop fits on a few screens, and the facade a user reads lists only what a user needs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import rxagent.agent
import rxagent.agent.loop
from rxagent.agent.loop import RunDeps, RunState

AGENT = Path(rxagent.agent.__file__).parent


def test_the_run_state_has_at_most_ten_fields() -> None:
    fields = [f.name for f in dataclasses.fields(RunState)]
    assert len(fields) <= 10, fields


def test_the_run_dependencies_are_frozen() -> None:
    deps = RunDeps.__dataclass_params__  # type: ignore[attr-defined]
    assert deps.frozen


def test_the_host_is_at_most_300_lines() -> None:
    lines = (AGENT / "react.py").read_text().splitlines()
    assert len(lines) <= 300, len(lines)


def test_the_user_facade_lists_at_most_25_names_and_the_loop_has_its_own() -> None:
    assert len(rxagent.agent.__all__) <= 25, rxagent.agent.__all__
    assert not set(rxagent.agent.__all__) & {"RunState", "Act", "reason_step", "run_loop", "apply_input"}
    for name in rxagent.agent.loop.__all__:
        assert getattr(rxagent.agent.loop, name) is not None


def test_an_old_facade_name_warns_and_names_its_new_home() -> None:
    with pytest.warns(DeprecationWarning, match=r"rxagent\.agent\.loop"):
        moved = rxagent.agent.RunState  # type: ignore[attr-defined]
    assert moved is RunState
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        _ = rxagent.agent.NoSuchName  # type: ignore[attr-defined]
