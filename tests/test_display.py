"""The display registry: lookups by class along the MRO, replacing a display, loaders run on the first
lookup, and the IPython hooks of :class:`~rxagent.display.Displayable` answered from it.

Bad inputs tried: registering something that is not a class, or a display that is not callable; a loader
that raises; an object whose class has no display.
"""

from __future__ import annotations

import doctest
from dataclasses import dataclass

import pytest
from IPython.core.interactiveshell import InteractiveShell

import rxagent.display
from rxagent.display import Displayable, load_on_first_lookup, lookup, register
from rxagent.events import AgentResult, EventHeader, RunStarted
from rxagent.messages import Msg


@dataclass(slots=True)
class Reading(Displayable):
    value: float


@dataclass(slots=True)
class Temperature(Reading):
    unit: str = "°C"


@dataclass(slots=True)
class Pressure(Reading):
    pass


def shown(obj: object) -> dict[str, str]:
    """What IPython shows for ``obj``: its MIME bundle, as a notebook gets it."""
    bundle, _ = InteractiveShell.instance().display_formatter.format(obj)
    return {kind: str(text) for kind, text in bundle.items()}


def test_a_subclass_without_a_display_takes_its_nearest_base_class_one() -> None:
    register(Reading, html=lambda r: f"<b>{r.value}</b>", text=lambda r: f"reading {r.value}")
    register(Temperature, html=lambda t: f"<b>{t.value}{t.unit}</b>", text=lambda t: f"{t.value}{t.unit}")

    assert shown(Pressure(3.0)) == {"text/html": "<b>3.0</b>", "text/plain": "reading 3.0"}
    assert shown(Temperature(21.5)) == {"text/html": "<b>21.5°C</b>", "text/plain": "21.5°C"}


def test_registering_a_class_again_replaces_its_display() -> None:
    register(Reading, html=lambda r: "first", text=lambda r: "first")
    register(Reading, html=lambda r: "second", text=lambda r: "second")

    assert shown(Reading(1.0)) == {"text/html": "second", "text/plain": "second"}


def test_an_object_without_a_display_shows_as_its_repr_and_has_no_html() -> None:
    @dataclass(slots=True)
    class Unregistered(Displayable):
        name: str

    assert lookup(Unregistered) is None
    assert shown(Unregistered("x")) == {"text/plain": repr(Unregistered("x"))}


def test_a_loader_runs_once_on_the_first_lookup_and_its_displays_are_found() -> None:
    class Gauge(Displayable):
        pass

    runs: list[str] = []

    def loader() -> None:
        runs.append("ran")
        register(Gauge, html=lambda g: "<i>gauge</i>", text=lambda g: "gauge")

    load_on_first_lookup(loader)
    assert runs == []  # nothing runs until something is displayed

    assert shown(Gauge()) == {"text/html": "<i>gauge</i>", "text/plain": "gauge"}
    assert shown(Gauge())["text/plain"] == "gauge"
    assert runs == ["ran"]


def test_a_loader_that_fails_says_why_at_each_lookup_until_it_succeeds() -> None:
    class Dial(Displayable):
        pass

    attempts: list[int] = []

    def loader() -> None:
        attempts.append(len(attempts))
        if len(attempts) < 3:
            raise ImportError("the display module is missing")
        register(Dial, html=lambda d: "dial", text=lambda d: "dial")

    load_on_first_lookup(loader)
    for _ in range(2):
        with pytest.raises(ImportError, match="the display module is missing"):
            lookup(Dial)
    found = lookup(Dial)
    assert found is not None
    assert found.text(Dial()) == "dial"
    assert lookup(Dial) is found
    assert len(attempts) == 3


def test_bad_registrations_are_refused() -> None:
    register(Reading, html=lambda r: "kept", text=lambda r: "kept")
    with pytest.raises(TypeError, match="needs a class"):
        register(Reading(1.0), html=str, text=str)  # pyright: ignore[reportArgumentType]
    with pytest.raises(TypeError, match="needs callable html and text"):
        register(Reading, html="<b>", text=str)  # pyright: ignore[reportArgumentType]
    assert shown(Reading(1.0)) == {
        "text/html": "kept",
        "text/plain": "kept",
    }  # the refused ones changed nothing


def test_rxagent_data_is_displayed_by_what_the_notebook_package_registered() -> None:
    import rxagent.notebook

    message = Msg.user("<b>not markup</b>")
    event = RunStarted(run_id="r", session_id=None, trace_id="t", seq=0, agent="agent", input=[message])
    assert shown(message) == {
        "text/html": rxagent.notebook.html_of(message),
        "text/plain": rxagent.notebook.text_of(message),
    }
    assert "&lt;b&gt;" in shown(message)["text/html"]
    assert shown(event)["text/plain"] == rxagent.notebook.text_of(event)
    # Events share EventHeader's display; the result has one of its own.
    assert lookup(RunStarted) is lookup(EventHeader)
    assert lookup(AgentResult) is not lookup(EventHeader)


def test_the_module_example_runs() -> None:
    results = doctest.testmod(rxagent.display)
    assert results.attempted > 0
    assert results.failed == 0
