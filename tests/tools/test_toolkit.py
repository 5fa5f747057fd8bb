"""Toolkit registration at run time, per-run views, groups and presets."""

from __future__ import annotations

import pytest

from rxagent.tools import Toolkit, Unavailable, tool


@tool
def search(query: str, tenant: str, limit: int = 5) -> str:
    """Search the tenant's documents."""
    return f"{tenant}:{query}:{limit}"


@tool(groups=["geo"])
def distance(a: str, b: str) -> str:
    """Distance between two places."""
    return f"{a}-{b}"


@tool(groups=["geo", "travel"])
def route(a: str, b: str) -> str:
    """Route between two places."""
    return f"{a}>{b}"


def kit() -> Toolkit:
    toolkit = Toolkit()
    toolkit.create_group("geo", "maps and places")
    toolkit.create_group("travel", "bookings")
    toolkit.register(search, preset={"tenant": "acme"})
    toolkit.register(distance)
    toolkit.register(route)
    return toolkit


def names(view_schemas: tuple[object, ...]) -> list[str]:
    return [getattr(s, "name") for s in view_schemas]  # noqa: B009


def test_registration_presets_are_hidden_from_the_schema() -> None:
    (schema,) = kit().view().schemas()
    assert schema.name == "search"
    assert set(schema.parameters["properties"]) == {"query", "limit"}  # type: ignore[arg-type]
    assert schema.parameters["required"] == ["query"]


def test_presets_must_name_parameters() -> None:
    with pytest.raises(ValueError, match="names no parameter"):
        Toolkit().register(search, preset={"tennant": "typo"})


def test_duplicate_names_are_refused_and_rename_works() -> None:
    toolkit = kit()
    with pytest.raises(ValueError, match="already registered"):
        toolkit.register(distance)
    toolkit.register(distance, name="distance_km")
    toolkit.view(active_groups=["geo"]).resolve("distance_km")
    assert "distance_km" in toolkit.names


def test_groups_are_activated_per_view_never_on_the_shared_toolkit() -> None:
    toolkit = kit()
    alice, bob = toolkit.view(), toolkit.view()
    alice.activate_group("geo")
    assert names(alice.schemas()) == ["search", "distance", "route"]
    assert names(bob.schemas()) == ["search"]
    assert names(toolkit.view().schemas()) == ["search"]
    alice.deactivate_group("geo")
    assert names(alice.schemas()) == ["search"]
    travel = toolkit.view(active_groups=["travel"])
    assert names(travel.schemas()) == ["search", "route"]  # route is in travel too
    with pytest.raises(KeyError):
        bob.activate_group("nope")


def test_views_that_see_the_same_share_one_schemas_tuple_and_others_get_their_own() -> None:
    # Every run has its own view: the usual ones share the toolkit's tuple (nothing kept per run, and a
    # model client caching the wire form by identity hits it across runs).
    toolkit = kit()
    first, second = toolkit.view(), toolkit.view()
    assert first.schemas() is second.schemas() is first.schemas()
    narrowed = toolkit.view(allow=["distance"], active_groups=["geo"])
    assert names(narrowed.schemas()) == ["distance"]
    assert narrowed.schemas() is narrowed.schemas()
    preset = toolkit.view(presets={"search": {"limit": 3}})
    assert set(preset.schemas()[0].parameters["properties"]) == {"query"}  # type: ignore[arg-type]
    assert names(first.schemas()) == ["search"]  # the narrowed views did not take the shared tuple
    alice = toolkit.view()
    alice.activate_group("geo")
    assert names(alice.schemas()) == ["search", "distance", "route"]
    assert names(second.schemas()) == ["search"]
    toolkit.register(tool(name="extra")(lambda: "x"))  # a new snapshot: computed afresh, then shared
    assert names(first.schemas()) == names(second.schemas()) == ["search", "extra"]
    assert first.schemas() is second.schemas()


def test_groups_active_by_default() -> None:
    toolkit = Toolkit()
    toolkit.create_group("geo", active_by_default=True)
    toolkit.register(distance)
    assert names(toolkit.view().schemas()) == ["distance"]
    assert names(toolkit.view(active_groups=[]).schemas()) == []


def test_allow_list_hides_tools_and_resolving_one_looks_unknown() -> None:
    view = kit().view(allow=["distance"], active_groups=["geo"])
    assert names(view.schemas()) == ["distance"]
    hidden = view.resolve("search")
    assert isinstance(hidden, Unavailable)
    assert hidden.why == "unknown"
    assert hidden.available == ("distance",)
    assert "there is no such tool" in hidden.message


def test_run_presets_win_over_registration_presets_and_shared_presets_apply_by_name() -> None:
    toolkit = kit()
    view = toolkit.view(presets={"search": {"tenant": "globex"}}, shared_presets={"limit": 2, "unrelated": 1})
    resolved = view.resolve("search")
    assert not isinstance(resolved, Unavailable)
    assert dict(resolved.presets) == {"tenant": "globex", "limit": 2}
    (schema,) = view.schemas()
    assert set(schema.parameters["properties"]) == {"query"}  # type: ignore[arg-type]


def test_enable_disable_unregister_at_run_time() -> None:
    toolkit = kit()
    view = toolkit.view()
    toolkit.disable("search")
    assert view.schemas() == ()
    gone = view.resolve("search")
    assert isinstance(gone, Unavailable)
    assert gone.why == "disabled"
    toolkit.enable("search")
    assert names(view.schemas()) == ["search"]
    toolkit.unregister("search")
    assert isinstance(view.resolve("search"), Unavailable)
    with pytest.raises(KeyError):
        toolkit.unregister("search")


def test_registering_while_a_view_is_in_use_is_seen_by_the_view() -> None:
    toolkit = Toolkit()
    view = toolkit.view()
    assert view.schemas() == ()

    @tool
    def late() -> str:
        """Added later."""
        return "ok"

    toolkit.register(late)
    assert names(view.schemas()) == ["late"]


class Database:
    """Something no JSON schema describes."""


def test_a_type_without_json_schema_fails_at_registration_unless_preset() -> None:
    def query(sql: str, db: Database) -> str:
        """Run SQL."""
        return sql

    from pydantic.errors import PydanticSchemaGenerationError

    with pytest.raises(PydanticSchemaGenerationError):
        Toolkit().register(query)
    toolkit = Toolkit()
    toolkit.register(query, preset={"db": Database()})
    (schema,) = toolkit.view().schemas()
    assert set(schema.parameters["properties"]) == {"sql"}  # type: ignore[arg-type]


def test_unresolvable_annotations_give_a_clear_error() -> None:
    class Local:
        pass

    def use(thing: Local) -> str:
        """Use it."""
        return str(thing)

    with pytest.raises(TypeError, match="cannot resolve its annotations"):
        tool(use)


def test_schemas_are_the_same_tuple_until_something_they_depend_on_changes() -> None:
    toolkit = kit()
    view = toolkit.view()
    first = view.schemas()
    assert view.schemas() is first  # a client can cache the wire form by identity
    view.activate_group("geo")
    grown = view.schemas()
    assert grown is not first
    assert len(grown) == 3
    view.presets["distance"] = {"a": "Oslo"}
    preset = view.schemas()
    assert preset is not grown
    assert "a" not in preset[1].parameters["properties"]  # type: ignore[operator]
    toolkit.disable("route")
    assert [s.name for s in view.schemas()] == ["search", "distance"]


def test_select_keeps_the_chosen_tools_presets_state_and_groups_as_a_snapshot() -> None:
    toolkit = kit()
    toolkit.disable("distance")
    chosen = toolkit.select(["search", "distance"])
    assert chosen.names == ("search", "distance")
    assert sorted(chosen.groups) == ["geo"]  # route's "travel" is not a group of the chosen tools
    resolved = chosen.view().resolve("search")
    assert not isinstance(resolved, Unavailable)
    assert dict(resolved.presets) == {"tenant": "acme"}  # the preset stays hidden
    assert isinstance(chosen.view(active_groups=["geo"]).resolve("distance"), Unavailable)  # still disabled
    toolkit.enable("distance")
    toolkit.unregister("search")
    assert chosen.names == ("search", "distance")  # a snapshot: later changes leave it alone
    with pytest.raises(KeyError, match="no tool named 'nope'"):
        toolkit.select(["route", "nope"])
