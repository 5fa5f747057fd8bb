"""The toolkit (every registered tool) and the per-run view of it (what one run may see and call).

The registry is copy-on-write: every change replaces an immutable snapshot, so registering, removing,
enabling or disabling tools while runs are in flight never breaks them; a run resolves a tool against the
current snapshot each time it prepares a request or executes a call, so a tool disabled mid-run is
refused from the next call on.

Group activation and per-run presets live on the :class:`ToolView`, never on the shared toolkit: one
session activating a group changes no other session's view. So do a run's *caller tools*: tools the caller
runs itself (a front end's own, which AG-UI sends with each run), given to :meth:`Toolkit.view` as schemas.
The run sees them beside the toolkit's; a call to one suspends the run for the caller's result, as an
``external`` tool's call does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

from rxagent.display import Displayable
from rxagent.requests import ToolSchema
from rxagent.tools._tool import FunctionTool, SchemaTool, Tool, ToolContext, ToolTraits, tool

__all__ = ["ResolvedTool", "ToolGroup", "ToolView", "Toolkit", "Unavailable"]


@dataclass(frozen=True, slots=True)
class ToolGroup:
    """A named set of tools that is switched on or off per run (tools join it with ``@tool(groups=...)``)."""

    name: str
    description: str = ""
    active_by_default: bool = False


_NONE: frozenset[Any] = frozenset()


@dataclass(frozen=True, slots=True)
class ResolvedTool:
    """A tool as one run sees it: the tool and the presets (registration's and the run's) it gets."""

    tool: Tool
    presets: Mapping[str, Any]

    @property
    def hidden(self) -> frozenset[str]:
        """The preset parameter names (absent from the model-visible schema)."""
        return frozenset(self.presets)


@dataclass(frozen=True, slots=True)
class _Entry:
    tool: Tool
    preset: Mapping[str, Any]
    enabled: bool = True
    plain: ResolvedTool = field(init=False, repr=False, compare=False)
    """The tool with its registration's presets only: what a view without presets of its own resolves it
    to, made once (every call of a run resolves its tool)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "plain", ResolvedTool(self.tool, self.preset))


@dataclass(frozen=True, slots=True)
class Unavailable:
    """Why a tool name cannot be called in this run."""

    name: str
    why: Literal["unknown", "disabled", "group_inactive"]
    available: tuple[str, ...]

    @property
    def message(self) -> str:
        """Text for the model: what was wrong and which tools it can call instead."""
        reasons = {
            "unknown": "there is no such tool",
            "disabled": "it is currently disabled",
            "group_inactive": "its tool group is not active",
        }
        options = ", ".join(self.available) or "none"
        return f"Tool '{self.name}' cannot be called: {reasons[self.why]}. Available tools: {options}."


class Toolkit(Displayable):
    """Every tool an application offers, with their registration-time presets, and the tool groups.

    Example:
        >>> kit = Toolkit()
        >>> @tool
        ... def now() -> str:
        ...     '''The current time.'''
        ...     return "12:00"
        >>> _ = kit.register(now)
        >>> [s.name for s in kit.view().schemas()]
        ['now']
    """

    def __init__(
        self, tools: Iterable[Tool | Callable[..., Any]] = (), *, max_argument_chars: int = 1_000_000
    ) -> None:
        self._entries: Mapping[str, _Entry] = MappingProxyType({})
        self._groups: Mapping[str, ToolGroup] = MappingProxyType({})
        self.max_argument_chars = max_argument_chars
        """Argument text longer than this is refused before parsing (a model stuck in a loop can write
        megabytes); the call gets an error result."""
        self._closers: list[Callable[[], Any]] = []
        self._shared_schemas: tuple[tuple[Any, ...], tuple[ToolSchema, ...]] | None = None
        """The schemas the views of the current snapshot share (see :meth:`ToolView.schemas`)."""
        for item in tools:
            self.register(item)

    # ---- registration --------------------------------------------------------------------------------

    def register(
        self,
        item: Tool | Callable[..., Any] | object,
        *,
        preset: Mapping[str, Any] | None = None,
        name: str | None = None,
        enabled: bool = True,
    ) -> Tool:
        """Register a tool, a plain function (made a tool), or every ``@tool`` method of an object.

        Args:
            item: a :class:`Tool`, a function, or an object whose class has ``@tool`` methods.
            preset: parameter values bound now, hidden from the model, injected at execution.
            name: register under another name.
            enabled: whether it starts enabled.

        Returns:
            The registered tool (for an object, the last of its tools).

        Raises:
            ValueError: the name is taken, a preset names no parameter, or an object has no tools.
            TypeError: a method tool taken from the class instead of an instance.
        """
        if not isinstance(item, Tool):
            if not (inspect.isfunction(item) or inspect.ismethod(item)):
                return self._register_object(item, preset=preset, enabled=enabled)
            item = tool(item)
        if isinstance(item, FunctionTool) and not item.is_bound:
            raise TypeError(f"tool {item.name!r} is a method: register it from an instance (obj.{item.name})")
        if name is not None and name != item.name:
            item = _renamed(item, name)
        preset = dict(preset or {})
        unknown = set(preset) - item.parameter_names
        if unknown:
            raise ValueError(f"preset for tool {item.name!r} names no parameter of it: {sorted(unknown)}")
        item.schema(
            frozenset(preset)
        )  # build the schema now: a type with no JSON schema fails here, not mid-run
        if item.name in self._entries:
            raise ValueError(f"a tool named {item.name!r} is already registered")
        self._entries = MappingProxyType(
            {**self._entries, item.name: _Entry(item, MappingProxyType(preset), enabled)}
        )
        return item

    def _register_object(self, obj: object, *, preset: Mapping[str, Any] | None, enabled: bool) -> Tool:
        methods = _tool_methods(obj)
        if not methods:
            raise ValueError(f"{obj!r} is not a tool, a function, or an object with @tool methods")
        registered: Tool | None = None
        for method in methods:
            own = {k: v for k, v in (preset or {}).items() if k in method.parameter_names}
            registered = self.register(method, preset=own, enabled=enabled)
        assert registered is not None
        return registered

    def unregister(self, name: str) -> None:
        """Remove a tool; runs in flight get an error result if they call it afterwards."""
        if name not in self._entries:
            raise KeyError(f"no tool named {name!r}")
        self._entries = MappingProxyType({k: v for k, v in self._entries.items() if k != name})

    def enable(self, name: str) -> None:
        """Make a disabled tool callable again."""
        self._set_enabled(name, True)

    def disable(self, name: str) -> None:
        """Hide a tool from every run and refuse calls of it, until enabled again."""
        self._set_enabled(name, False)

    def _set_enabled(self, name: str, enabled: bool) -> None:
        entry = self._entries.get(name)
        if entry is None:
            raise KeyError(f"no tool named {name!r}")
        self._entries = MappingProxyType({**self._entries, name: replace(entry, enabled=enabled)})

    def create_group(self, name: str, description: str = "", *, active_by_default: bool = False) -> ToolGroup:
        """Declare a tool group (tools join it with ``@tool(groups=[name])``)."""
        group = ToolGroup(name, description, active_by_default)
        self._groups = MappingProxyType({**self._groups, name: group})
        return group

    def add_closer(self, close: Callable[[], Any]) -> None:
        """Run ``close()`` (sync or async) when the toolkit closes (MCP sessions use this)."""
        self._closers.append(close)

    async def aclose(self) -> None:
        """Close what registered sources hold (MCP sessions), newest first; every closer runs.

        Raises:
            ExceptionGroup: the closers that failed (after all of them ran).
        """
        failures: list[Exception] = []
        while self._closers:
            try:
                result = self._closers.pop()()
                if inspect.isawaitable(result):
                    await result
            except Exception as error:  # one failing closer must not leave the others open
                failures.append(error)
        if failures:
            raise ExceptionGroup("closing the toolkit's sources failed", failures)

    async def __aenter__(self) -> Toolkit:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    # ---- reading ---------------------------------------------------------------------------------------

    @property
    def names(self) -> tuple[str, ...]:
        """Names of all registered tools, enabled or not."""
        return tuple(self._entries)

    @property
    def groups(self) -> Mapping[str, ToolGroup]:
        """The declared tool groups."""
        return self._groups

    def get(self, name: str) -> Tool | None:
        """The registered tool of that name, if any."""
        entry = self._entries.get(name)
        return entry.tool if entry is not None else None

    def select(self, names: Iterable[str]) -> Toolkit:
        """A new toolkit of the tools named, as this one registers them now (the same tool objects, their
        registration presets and whether they are enabled) and the groups they belong to: a snapshot,
        which later changes to either toolkit leave alone. Closers stay with this toolkit.

        A preset hides a value from the model (a tenant id, say): a toolkit made of some of these tools
        keeps it hidden, which registering the bare tool objects again would not.

        Raises:
            KeyError: a name this toolkit has no tool of (named in the message).
        """
        entries: dict[str, _Entry] = {}
        for name in names:
            entry = self._entries.get(name)
            if entry is None:
                raise KeyError(f"no tool named {name!r} in this toolkit")
            entries[name] = entry
        chosen = Toolkit(max_argument_chars=self.max_argument_chars)
        chosen._entries = MappingProxyType(entries)
        used = {group for entry in entries.values() for group in entry.tool.traits.groups}
        chosen._groups = MappingProxyType({k: v for k, v in self._groups.items() if k in used})
        return chosen

    def view(
        self,
        *,
        allow: Iterable[str] | None = None,
        active_groups: Iterable[str] | None = None,
        presets: Mapping[str, Mapping[str, Any]] | None = None,
        shared_presets: Mapping[str, Any] | None = None,
        caller_tools: Iterable[ToolSchema] = (),
    ) -> ToolView:
        """A per-run view of this toolkit.

        Args:
            allow: the only tool names this run may see and call (``None``: all).
            active_groups: groups active at the start (``None``: those active by default).
            presets: per-tool preset values for this run (``{"search": {"tenant": "acme"}}``); they win
                over registration presets and over anything the model sends.
            shared_presets: values preset for every tool that has a parameter of that name
                (``{"user_id": ctx.user_id}``).
            caller_tools: tools the caller runs itself (see the module): visible to this run whatever
                ``allow`` and the groups say, each an ``external`` tool whose arguments are checked against
                its schema.

        Raises:
            ValueError: a caller tool has the name of one of the toolkit's tools or of another caller tool
                (or a name a tool may not have).
        """
        if active_groups is None:
            active_groups = [g.name for g in self._groups.values() if g.active_by_default]
        return ToolView(
            self,
            allow=frozenset(allow) if allow is not None else None,
            active_groups=set(active_groups),
            presets={k: dict(v) for k, v in (presets or {}).items()},
            shared_presets=dict(shared_presets or {}),
            caller=self._caller_entries(caller_tools),
        )

    def _caller_entries(self, schemas: Iterable[ToolSchema]) -> Mapping[str, _Entry]:
        entries: dict[str, _Entry] = {}
        for schema in schemas:
            if schema.name in self._entries:
                raise ValueError(
                    f"a caller tool is named {schema.name!r}, as one of the agent's own tools is"
                )
            if schema.name in entries:
                raise ValueError(f"two caller tools are named {schema.name!r}")
            entries[schema.name] = _Entry(_caller_tool(schema), MappingProxyType({}))
        return MappingProxyType(entries)

    def _snapshot(self) -> Mapping[str, _Entry]:
        return self._entries


def _tool_methods(obj: object) -> list[Tool]:
    found: list[Tool] = []
    for attribute in dir(type(obj)):
        if isinstance(inspect.getattr_static(type(obj), attribute, None), Tool):
            bound = getattr(obj, attribute)
            if isinstance(bound, Tool):
                found.append(bound)
    return found


_CALLER_TRAITS = ToolTraits(external=True)


def _caller_tool(schema: ToolSchema) -> Tool:
    """A tool the caller runs itself: external (the run suspends for its result), never run here."""

    def outside(arguments: dict[str, Any], context: ToolContext[Any]) -> None:
        del arguments, context
        raise RuntimeError(f"{schema.name} is run by the caller, not here")  # external: never reached

    return SchemaTool(schema.name, schema.description, schema.parameters, outside, traits=_CALLER_TRAITS)


def _renamed(item: Tool, name: str) -> Tool:
    if isinstance(item, FunctionTool):
        return item.derive(name=name)
    raise TypeError(f"cannot rename a {type(item).__name__}; give it the name when creating it")


@dataclass(eq=False)
class ToolView:
    """What one run sees of a toolkit: an allow-list, its own active groups, and its presets.

    Create with :meth:`Toolkit.view`. Group activation here changes this view only.
    """

    toolkit: Toolkit
    allow: frozenset[str] | None
    active_groups: set[str]
    presets: dict[str, dict[str, Any]] = field(default_factory=lambda: {})
    shared_presets: dict[str, Any] = field(default_factory=lambda: {})
    caller: Mapping[str, _Entry] = field(default_factory=lambda: MappingProxyType({}))
    """The caller's own tools (see the module), by name."""
    _schemas_cache: tuple[tuple[Any, ...], tuple[ToolSchema, ...]] | None = field(default=None, repr=False)
    _merged: tuple[Mapping[str, _Entry], Mapping[str, _Entry]] | None = field(default=None, repr=False)

    def activate_group(self, name: str) -> None:
        """Make the group's tools visible in this view."""
        if name not in self.toolkit.groups:
            raise KeyError(f"no tool group named {name!r}")
        self.active_groups.add(name)

    def deactivate_group(self, name: str) -> None:
        """Hide the group's tools in this view (tools also in another active group stay visible)."""
        self.active_groups.discard(name)

    def _why_unavailable(
        self, entry: _Entry | None, name: str
    ) -> Literal["unknown", "disabled", "group_inactive"] | None:
        if entry is not None and self.caller.get(name) is entry:  # the caller's: its own to offer
            return None
        # A tool outside the allow-list is "unknown": a run must not learn what it cannot see.
        if entry is None or (self.allow is not None and name not in self.allow):
            return "unknown"
        if not entry.enabled:
            return "disabled"
        if entry.tool.traits.groups and not entry.tool.traits.groups & self.active_groups:
            return "group_inactive"
        return None

    def _resolved(self, entry: _Entry) -> ResolvedTool:
        if not self.shared_presets and not self.presets:
            return entry.plain
        tool_ = entry.tool
        presets: dict[str, Any] = dict(entry.preset)
        if self.shared_presets:
            presets.update((k, v) for k, v in self.shared_presets.items() if k in tool_.parameter_names)
        run_presets = self.presets.get(tool_.name)
        if run_presets:
            unknown = set(run_presets) - tool_.parameter_names
            if unknown:
                raise ValueError(
                    f"run preset for tool {tool_.name!r} names no parameter of it: {sorted(unknown)}"
                )
            presets.update(run_presets)
        return ResolvedTool(tool_, MappingProxyType(presets))

    def _entries(self) -> Mapping[str, _Entry]:
        # The view is the toolkit's own companion: it reads the copy-on-write registry directly.
        snapshot = self.toolkit._snapshot()  # pyright: ignore[reportPrivateUsage]
        if not self.caller:
            return snapshot
        merged = self._merged
        if merged is None or merged[0] is not snapshot:  # one merge per snapshot: its identity keys caches
            merged = self._merged = (snapshot, MappingProxyType({**snapshot, **self.caller}))
        return merged[1]

    def tools(self) -> tuple[ResolvedTool, ...]:
        """The tools this run may call now, with their presets."""
        return tuple(
            self._resolved(entry)
            for name, entry in self._entries().items()
            if self._why_unavailable(entry, name) is None
        )

    def schemas(self) -> tuple[ToolSchema, ...]:
        """The schemas to send to the model now (presets removed).

        The same tuple object comes back while nothing it depends on changed (the toolkit's snapshot,
        this view's allow-list, groups and presets), so a model client can cache its wire form by
        identity. Views that see the same (every run of an agent without a tool scope, usually) share one
        tuple, kept by the toolkit: a run's view keeps none of its own.
        """
        presets, shared_presets = self.presets, self.shared_presets
        key = (  # schemas depend on which parameters are preset, never on the preset values
            self._entries(),
            self.allow,
            frozenset(self.active_groups),
            frozenset((name, frozenset(values)) for name, values in presets.items()) if presets else _NONE,
            frozenset(shared_presets) if shared_presets else _NONE,
        )
        shared = self.toolkit._shared_schemas  # pyright: ignore[reportPrivateUsage]
        for cached in (shared, self._schemas_cache):
            if cached is not None and cached[0][0] is key[0] and cached[0][1:] == key[1:]:
                return cached[1]
        schemas = tuple(resolved.tool.schema(resolved.hidden) for resolved in self.tools())
        # A view with caller tools sees more than its toolkit's other views: it keeps its schemas to itself.
        if not self.caller and (shared is None or shared[0][0] is not key[0]):  # none yet, or older: share
            self.toolkit._shared_schemas = (key, schemas)  # pyright: ignore[reportPrivateUsage]
        else:
            self._schemas_cache = (key, schemas)
        return schemas

    def resolve(self, name: str) -> ResolvedTool | Unavailable:
        """The tool a call names, or why this run cannot call it."""
        snapshot = self._entries()
        entry = snapshot.get(name)
        why = self._why_unavailable(entry, name)
        if why is None and entry is not None:
            return self._resolved(entry)
        available = tuple(r.tool.name for r in self.tools())
        return Unavailable(name, why or "unknown", available)
