"""Tools: the ``@tool`` decorator, the :class:`Tool` types, and what a running tool can see."""

from __future__ import annotations

import asyncio
import functools
import inspect
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, Never, TypeAlias, cast, overload

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from rxagent.context import DepsT, RuntimeContext, run_context_of
from rxagent.events import AgentEvent
from rxagent.requests import ToolSchema
from rxagent.tools.arguments import (
    PlainArguments,
    ToolArgumentError,
    coerce_arguments,
    path_arguments,
    problems_from_validation_error,
    validate_arguments,
)
from rxagent.tools.schema import Parameter, arguments_model, strip_titles

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

__all__ = [
    "FunctionTool",
    "PermissionCheck",
    "ProgressUpdate",
    "SchemaTool",
    "Tool",
    "ToolContext",
    "ToolSystemError",
    "tool",
]


_NO_PRESETS: Mapping[str, Any] = {}
_NOTHING_HIDDEN: frozenset[str] = frozenset()
_PLAIN_ANNOTATIONS: tuple[object, ...] = (str, int, float, bool, type(None))
"""Parameter types pydantic returns a JSON scalar of the matching type for unchanged (see
:class:`~rxagent.tools.arguments.PlainArguments`)."""


class ToolSystemError(Exception):
    """A tool's infrastructure failed (database down, credentials revoked): not something the model can fix.

    Raised from a tool, it stops the run in an ERROR phase instead of being fed back to the model as an
    ordinary error result, which would only make the model try again.
    """


PermissionAnswer: TypeAlias = Literal["allow", "deny", "ask"] | None
PermissionCheck: TypeAlias = Callable[[Mapping[str, Any], RuntimeContext], PermissionAnswer]
"""A tool's own permission check: given the final arguments and the run's context, ``allow``, ``deny``,
``ask`` a human, or ``None`` to leave the decision to the rules after it."""


class ProgressUpdate(BaseModel):
    """Progress a running tool reports (never a final result)."""

    model_config = ConfigDict(defer_build=True)  # validators built on first use, not at import

    message: str = ""
    fraction: float | None = None
    data: JsonValue = None


class ToolContext(Generic[DepsT]):
    """What a running tool can see and do: its call id, the run's context and dependencies, progress,
    nested events and cancellation.

    Declare a parameter annotated ``ToolContext`` (any name) to receive it; it is never part of the schema.
    ``ToolContext[Deps]`` types :attr:`deps`, the dependencies the caller gave the run: a tool of an
    ``Agent[Db, ...]`` declares ``context: ToolContext[Db]`` and reads ``context.deps`` as a ``Db``.

    Example:
        >>> @tool
        ... async def balance(account: str, context: ToolContext[Bank]) -> int:  # doctest: +SKIP
        ...     return await context.deps.balance(account)
    """

    __slots__ = ("_cancelled", "_emit", "_loop", "_publish", "call_id", "runtime", "tool_name")

    def __init__(
        self,
        call_id: str,
        tool_name: str,
        runtime: RuntimeContext,
        emit: Callable[[ProgressUpdate], None] | None = None,
        publish: Callable[[AgentEvent], None] | None = None,
    ) -> None:
        self.call_id = call_id
        """Id of the tool call being executed."""
        self.tool_name = tool_name
        """Name of the tool being executed."""
        self.runtime = runtime
        """The run's :class:`~rxagent.context.RuntimeContext` (a :class:`~rxagent.context.RunContext` in an
        agent's run)."""
        self._emit = emit
        self._publish = publish
        # A plain flag: one writer (the loop), readers in a worker thread; nobody waits on it.
        self._cancelled = False
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    @property
    def deps(self) -> DepsT:
        """The dependencies the caller gave the run (``agent.call(..., deps=...)``, the run's
        ``RunContext.deps``): a database pool, an HTTP client, the user's account, instead of globals.

        ``None`` when the caller gave none, and for a tool run outside an agent's run. Nothing checks the
        type at run time: the agent's ``Deps`` type parameter is what guarantees it (``Agent[Db, ...]``
        takes only ``deps: Db``), so give a tool that declares ``ToolContext[Db]`` to agents of that
        ``Deps`` only.
        """
        run = run_context_of(self.runtime)
        return cast("DepsT", run.deps if run is not None else None)

    def progress(self, message: str = "", *, fraction: float | None = None, data: JsonValue = None) -> None:
        """Publish a progress update; safe to call from a sync tool's worker thread."""
        if self._emit is None or self._cancelled:
            return
        self._deliver(self._emit, ProgressUpdate(message=message, fraction=fraction, data=data))

    def publish(self, event: AgentEvent) -> None:
        """Publish an event of a run nested in this call (an agent the tool runs); safe from a worker thread.

        The executor emits it as :class:`~rxagent.tools.ToolCallNested`; the calling agent forwards it in
        its own event stream as it is (so give it the nested run's header, ``parent_run_id`` naming the
        calling run), and adds the usage of a nested :class:`~rxagent.events.AgentResult` whose
        ``parent_run_id`` is the calling run to its own. Nothing is published after the call was cancelled.
        """
        if self._publish is None or self._cancelled:
            return
        self._deliver(self._publish, event)

    def _deliver(self, callback: Callable[[Any], None], item: object) -> None:
        loop = self._loop
        if loop is not None and not _on_loop_thread(loop):
            loop.call_soon_threadsafe(callback, item)
        else:
            callback(item)

    @property
    def cancelled(self) -> bool:
        """True once the call was cancelled or timed out: a sync tool should check it and return early."""
        return self._cancelled

    def cancel(self) -> None:
        """Mark the call cancelled (the executor does this on dispose and timeout)."""
        self._cancelled = True


def _on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


@dataclass(frozen=True, slots=True)
class ToolTraits:
    """How a tool behaves when called: the settings every tool has, in one frozen object.

    Attributes:
        concurrency_safe: may run at the same time as other concurrency-safe calls of a batch.
        return_direct: its result ends the run (when every call of the batch is return-direct and ok).
        timeout: seconds before the call is abandoned with an error result (``None``: no limit).
        groups: tool groups it belongs to; a tool in groups is visible only while one of them is active.
        external: no local body; the run suspends so that the caller executes it.
        idempotent: running it twice with the same arguments does no more than running it once, so a
            call whose outcome a crash lost is run again on resume instead of waiting for reconciliation.
        read_only: it changes nothing (a lost call is run again, as for ``idempotent``).
        permission: the tool's own permission check, consulted after deny/ask rules.
    """

    concurrency_safe: bool = False
    return_direct: bool = False
    timeout: float | None = None
    groups: frozenset[str] = frozenset()
    external: bool = False
    idempotent: bool = False
    read_only: bool = False
    permission: PermissionCheck | None = None

    def __post_init__(self) -> None:
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError("timeout must be positive")
        if not isinstance(self.groups, frozenset):  # pyright: ignore[reportUnnecessaryIsInstance] - callers pass any iterable
            object.__setattr__(self, "groups", frozenset(self.groups))

    @property
    def repeatable(self) -> bool:
        """Safe to run again when a crash lost the outcome of a call (idempotent or read-only)."""
        return self.idempotent or self.read_only


class Tool(ABC):
    """A capability the model can call: a name, a description, an argument schema and a body.

    Build one with :func:`tool` (from a function or method) or :class:`SchemaTool` (from a JSON schema, as
    MCP tools are).

    Attributes:
        name: what the model calls it.
        description: what the model reads about it.
        traits: how it behaves when called (:class:`ToolTraits`).
    """

    def __init__(self, *, name: str, description: str, traits: ToolTraits | None = None) -> None:
        if not name or not name.replace("_", "a").replace("-", "a").isalnum():
            raise ValueError(f"tool name {name!r} must be non-empty letters, digits, '_' or '-'")
        self.name = name
        self.description = description
        self.traits = traits or ToolTraits()
        self._validators: dict[frozenset[str], Draft202012Validator] = {}
        self._plain: dict[frozenset[str], PlainArguments | None] = {}
        self._path_arguments: frozenset[str] | None = None

    def validator(self, hidden: frozenset[str] = frozenset()) -> Draft202012Validator:
        """The JSON Schema validator of :meth:`schema` (built once per hidden set)."""
        validator = self._validators.get(hidden)
        if validator is None:
            # Imported here: jsonschema (and attrs, referencing, rpds under it) costs about as much to import
            # as the rest of the package, and a run whose model calls no tool never needs it.
            from jsonschema import Draft202012Validator

            validator = Draft202012Validator(dict(self.schema(hidden).parameters))
            self._validators[hidden] = validator
        return validator

    @property
    def path_arguments(self) -> frozenset[str]:
        """Names of the arguments that name files, as the tool's schema says (``pathlib.Path``,
        ``Path | None``, ``list[Path]``, or ``format: path`` in a hand-written or MCP schema).

        The permission gate matches every rule on these arguments as a
        :class:`~rxagent.tools.PathPattern`, on the path the value names rather than its text.
        """
        if self._path_arguments is None:
            self._path_arguments = path_arguments(self.schema().parameters)
        return self._path_arguments

    def prepare(
        self, arguments: Mapping[str, Any], presets: Mapping[str, Any] = _NO_PRESETS
    ) -> dict[str, Any]:
        """Coerce, validate and convert the model's arguments, then add the presets.

        Presets always win: a value the model sent for a preset parameter is discarded, never used.

        Arguments that are plain JSON scalars of their schema's exact types, for a tool whose conversion
        leaves such values as they are (:meth:`_plain_arguments`), are taken as sent: each step would
        have passed them unchanged, and running the steps cost more than the rest of a tool round.

        Raises:
            ToolArgumentError: what is wrong, written for the model to fix.
        """
        hidden = frozenset(presets) if presets else _NOTHING_HIDDEN
        sent = {k: v for k, v in arguments.items() if k not in hidden} if hidden else arguments
        if hidden in self._plain:
            plain = self._plain[hidden]
        else:
            plain = self._plain[hidden] = self._plain_arguments(hidden)
        if plain is not None and plain.accepts(sent):
            values = dict(sent)
            values.update(presets)
            return values
        coerced = coerce_arguments(sent, self.schema(hidden).parameters)
        validate_arguments(self.name, coerced, self.validator(hidden))
        try:
            values = self.convert(coerced, hidden)
        except ValidationError as error:
            raise ToolArgumentError(self.name, problems_from_validation_error(error)) from None
        values.update(presets)
        return values

    def _plain_arguments(self, hidden: frozenset[str]) -> PlainArguments | None:
        """The plain check of the schema with ``hidden`` left out, when :meth:`convert` returns plain
        arguments unchanged; ``None`` (the default, as a subclass's conversion is unknown): every call
        takes the full path. Asked once per hidden set."""
        return None

    @property
    @abstractmethod
    def parameter_names(self) -> frozenset[str]:
        """Names of every parameter that may be preset (hidden from the model)."""

    @abstractmethod
    def schema(self, hidden: frozenset[str] = frozenset()) -> ToolSchema:
        """The schema the model sees, without the ``hidden`` (preset) parameters."""

    @abstractmethod
    def convert(self, arguments: Mapping[str, Any], hidden: frozenset[str] = frozenset()) -> dict[str, Any]:
        """Turn validated JSON arguments into the values the body receives (may raise ValidationError)."""

    @abstractmethod
    def invoke(self, arguments: Mapping[str, Any], context: ToolContext) -> Any:
        """Run the body with converted arguments plus presets; returns a value or an awaitable."""

    @property
    @abstractmethod
    def is_async(self) -> bool:
        """True when :meth:`invoke` returns an awaitable (run on the loop; else in a worker thread)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class FunctionTool(Tool):
    """A tool whose schema and argument conversion come from a Python function's signature."""

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        traits: ToolTraits | None = None,
        _spec: _FunctionSpec | None = None,
        _bound_to: object = None,
    ) -> None:
        spec = _spec or _FunctionSpec(function)
        super().__init__(
            name=name if name is not None else function.__name__,
            description=description if description is not None else spec.description,
            traits=traits,
        )
        self.function = function
        self._spec = spec
        self._bound_to = _bound_to
        functools.update_wrapper(self, function)

    # A decorated method is a descriptor: `instance.method` is the tool bound to that instance.
    def __get__(self, instance: object, owner: type | None = None) -> FunctionTool:
        if instance is None or not self._spec.is_method:
            return self
        return self.derive(bound_to=instance)

    def derive(self, *, name: str | None = None, bound_to: object = None) -> FunctionTool:
        """The same tool under another name and/or bound to an instance (the signature is parsed once)."""
        return FunctionTool(
            self.function,
            name=name if name is not None else self.name,
            description=self.description,
            traits=self.traits,
            _spec=self._spec,
            _bound_to=bound_to if bound_to is not None else self._bound_to,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly, as if it were not a tool."""
        if self._bound_to is not None:
            return self.function(self._bound_to, *args, **kwargs)
        return self.function(*args, **kwargs)

    @property
    def is_bound(self) -> bool:
        """False for a method tool taken from the class rather than an instance."""
        return not self._spec.is_method or self._bound_to is not None

    @property
    def parameter_names(self) -> frozenset[str]:
        return frozenset(p.name for p in self._spec.parameters)

    @property
    def is_async(self) -> bool:
        return self._spec.is_async

    def schema(self, hidden: frozenset[str] = frozenset()) -> ToolSchema:
        cached = self._spec.schemas.get(hidden)
        if cached is None:
            model = self._spec.model(hidden)
            parameters = strip_titles(model.model_json_schema(by_alias=True))
            cached = ToolSchema(name=self.name, description=self.description, parameters=parameters)
            self._spec.schemas[hidden] = cached
        if cached.name != self.name or cached.description != self.description:
            return ToolSchema(name=self.name, description=self.description, parameters=cached.parameters)
        return cached

    def convert(self, arguments: Mapping[str, Any], hidden: frozenset[str] = frozenset()) -> dict[str, Any]:
        model = self._spec.model(hidden)
        validated = model.model_validate(arguments)
        aliases = self._spec.aliases(hidden)
        # Only what was given: the function's own defaults apply to the rest.
        return {aliases[field]: getattr(validated, field) for field in validated.model_fields_set}

    def _plain_arguments(self, hidden: frozenset[str]) -> PlainArguments | None:
        # Only for bare scalar annotations: a type with its own validation (Annotated constraints or
        # validators, Path, datetime, a custom type) may write the same schema and still convert.
        if not _steps_of(self, FunctionTool) or not all(
            _is_plain(p.annotation) for p in self._spec.parameters if p.name not in hidden
        ):
            return None
        return PlainArguments.of(self.schema(hidden).parameters)

    def invoke(self, arguments: Mapping[str, Any], context: ToolContext) -> Any:
        if not self.is_bound:
            raise TypeError(f"tool {self.name!r} is a method: register it from an instance")
        kwargs = dict(arguments)
        if self._spec.context_parameter is not None:
            kwargs[self._spec.context_parameter] = context
        if self._bound_to is not None:
            return self.function(self._bound_to, **kwargs)
        return self.function(**kwargs)


class _FunctionSpec:
    """What a function's signature says, computed once and shared by every binding of a method tool."""

    def __init__(self, function: Callable[..., Any]) -> None:
        if inspect.isclass(function):
            raise TypeError("@tool decorates functions and methods, not classes")
        signature = inspect.signature(function)
        hints = _parameter_hints(function, signature)
        import docstring_parser  # only when a tool is made from a function, not with the package

        doc = docstring_parser.parse(inspect.getdoc(function) or "")
        described = {p.arg_name: p.description for p in doc.params if p.description}
        parameters: list[Parameter] = []
        self.context_parameter: str | None = None
        self.is_method = False
        for index, (name, parameter) in enumerate(signature.parameters.items()):
            if index == 0 and name in {"self", "cls"}:
                self.is_method = True
                continue
            if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                raise TypeError(
                    f"tool {function.__name__!r}: *{name} / **{name} cannot be described to a model; "
                    "name every parameter"
                )
            if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
                raise TypeError(f"tool {function.__name__!r}: parameter {name!r} must not be positional-only")
            annotation = hints.get(name, inspect.Parameter.empty)
            if annotation is ToolContext or typing.get_origin(annotation) is ToolContext:  # or ToolContext[D]
                self.context_parameter = name
                continue
            parameters.append(Parameter(name, annotation, parameter.default, described.get(name)))
        self.parameters = tuple(parameters)
        self.is_async = inspect.iscoroutinefunction(function)
        summary = [part for part in (doc.short_description, doc.long_description) if part]
        self.description = "\n\n".join(summary)
        self.model_name = f"{function.__name__}_arguments"
        self.schemas: dict[frozenset[str], ToolSchema] = {}
        self._models: dict[frozenset[str], type[BaseModel]] = {}
        self._aliases: dict[frozenset[str], dict[str, str]] = {}

    def model(self, hidden: frozenset[str]) -> type[BaseModel]:
        model = self._models.get(hidden)
        if model is None:
            visible = [p for p in self.parameters if p.name not in hidden]
            model = arguments_model(self.model_name, visible)
            self._models[hidden] = model
            self._aliases[hidden] = {f"p{i}": p.name for i, p in enumerate(visible)}
        return model

    def aliases(self, hidden: frozenset[str]) -> dict[str, str]:
        self.model(hidden)
        return self._aliases[hidden]


def _steps_of(tool: Tool, kind: type[Tool]) -> bool:
    """Whether ``tool`` validates and converts as ``kind`` does (a subclass may do more in either)."""
    cls = type(tool)
    return cls.convert is kind.convert and cls.validator is Tool.validator


def _is_plain(annotation: object) -> bool:
    """Whether a parameter is ``str``, ``int``, ``float`` or ``bool``, maybe ``| None``."""
    if annotation in _PLAIN_ANNOTATIONS:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return all(member in _PLAIN_ANNOTATIONS for member in typing.get_args(annotation))
    return False


def _parameter_hints(function: Callable[..., Any], signature: inspect.Signature) -> dict[str, Any]:
    try:
        return typing.get_type_hints(function, include_extras=True)
    except NameError:
        pass
    # Only the parameters matter (a return annotation that cannot be resolved is no reason to fail), and
    # names the function closes over may resolve what its module cannot.
    namespace = {**function.__globals__, **inspect.getclosurevars(function).nonlocals}
    hints: dict[str, Any] = {}
    for name, parameter in signature.parameters.items():
        annotation: Any = parameter.annotation
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, namespace)
            except NameError as error:
                raise TypeError(
                    f"tool {function.__name__!r}: cannot resolve its annotations ({error}); with "
                    "`from __future__ import annotations`, types used in a tool's signature must be "
                    "importable from the function's module, not defined inside another function"
                ) from None
        if annotation is not inspect.Parameter.empty:
            hints[name] = annotation
    return hints


class SchemaTool(Tool):
    """A tool described by a JSON schema, whose body receives the validated JSON arguments as a dict.

    Args:
        name: tool name.
        description: what the model reads.
        parameters: a JSON Schema object for the arguments.
        call: ``(arguments, context) -> result`` (sync or async); the context may be declared
            ``ToolContext[Deps]`` (see :attr:`ToolContext.deps`).
        traits: how it behaves when called.
    """

    def __init__(
        self,
        name: str,
        description: str,
        parameters: Mapping[str, JsonValue],
        call: Callable[[dict[str, JsonValue], ToolContext[Never]], object],
        *,
        traits: ToolTraits | None = None,
    ) -> None:
        super().__init__(name=name, description=description, traits=traits)
        self.parameters = dict(parameters)
        self._call = call
        self._is_async = inspect.iscoroutinefunction(call)
        self._schemas: dict[frozenset[str], ToolSchema] = {}

    @property
    def parameter_names(self) -> frozenset[str]:
        properties = self.parameters.get("properties")
        return (
            frozenset(cast("Mapping[str, Any]", properties))
            if isinstance(properties, Mapping)
            else frozenset()
        )

    @property
    def is_async(self) -> bool:
        return self._is_async

    def schema(self, hidden: frozenset[str] = frozenset()) -> ToolSchema:
        cached = self._schemas.get(hidden)
        if cached is None:
            parameters: dict[str, Any] = dict(self.parameters)
            if hidden:
                properties = cast("Mapping[str, Any]", parameters.get("properties") or {})
                parameters["properties"] = {k: v for k, v in properties.items() if k not in hidden}
                required = cast("list[str]", parameters.get("required") or [])
                parameters["required"] = [k for k in required if k not in hidden]
            cached = ToolSchema(name=self.name, description=self.description, parameters=parameters)
            self._schemas[hidden] = cached
        return cached

    def convert(self, arguments: Mapping[str, Any], hidden: frozenset[str] = frozenset()) -> dict[str, Any]:
        return dict(arguments)

    def _plain_arguments(self, hidden: frozenset[str]) -> PlainArguments | None:
        if not _steps_of(self, SchemaTool):
            return None
        return PlainArguments.of(self.schema(hidden).parameters)  # its conversion is the identity

    def invoke(self, arguments: Mapping[str, Any], context: ToolContext) -> Any:
        # ToolContext[Never] above takes a call declaring any deps type: the agent's Deps guarantees it.
        return self._call(dict(arguments), cast("ToolContext[Never]", context))


_AnyFunction: TypeAlias = Callable[..., Any]


@overload
def tool(function: _AnyFunction, /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    concurrency_safe: bool = False,
    return_direct: bool = False,
    timeout: float | None = None,
    groups: Iterable[str] = (),
    external: bool = False,
    idempotent: bool = False,
    read_only: bool = False,
    permission: PermissionCheck | None = None,
) -> Callable[[_AnyFunction], FunctionTool]: ...


def tool(
    function: _AnyFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    concurrency_safe: bool = False,
    return_direct: bool = False,
    timeout: float | None = None,
    groups: Iterable[str] = (),
    external: bool = False,
    idempotent: bool = False,
    read_only: bool = False,
    permission: PermissionCheck | None = None,
) -> FunctionTool | Callable[[_AnyFunction], FunctionTool]:
    """Make a function or method a tool, with or without arguments.

    The name defaults to the function's, the description to its docstring's summary and body, and each
    parameter's description to ``Annotated[..., Field(description=...)]`` or the docstring's Args entry.
    A parameter annotated :class:`ToolContext` (or ``ToolContext[Deps]``) receives the call's context and is
    not shown to the model.
    The decorated object still calls like the function; on a method it binds to the instance it is taken
    from (``toolkit.register(account.refund)``). The keyword flags are the fields of :class:`ToolTraits`.

    Example:
        >>> @tool
        ... def add(a: int, b: int) -> int:
        ...     '''Add two integers.
        ...
        ...     Args:
        ...         a: the first.
        ...         b: the second.
        ...     '''
        ...     return a + b
        >>> add(2, 3), add.schema().parameters["required"]
        (5, ['a', 'b'])
    """

    traits = ToolTraits(
        concurrency_safe=concurrency_safe,
        return_direct=return_direct,
        timeout=timeout,
        groups=frozenset(groups),
        external=external,
        idempotent=idempotent,
        read_only=read_only,
        permission=permission,
    )

    def decorate(target: _AnyFunction) -> FunctionTool:
        return FunctionTool(target, name=name, description=description, traits=traits)

    return decorate(function) if function is not None else decorate
