"""From the model's argument text to the values a tool receives, in four steps, each its own function.

1. :func:`parse_arguments` — JSON text → object. Half-written or non-object JSON is an error, never ``{}``.
2. :func:`coerce_arguments` — conservative repairs of what models commonly get wrong, guided by the
   schema: for a parameter that cannot be a string, ``""`` becomes ``null`` (and an optional parameter that
   cannot be ``null`` is then dropped, so its default applies), ``"true"``/``"false"`` become booleans, and
   numeric strings become numbers. Strings are never touched where the schema allows a string.
3. :func:`validate_arguments` — JSON Schema validation (``jsonschema``) against exactly the schema the
   model saw; every problem names the argument and the rule it broke.
4. ``Tool.convert`` — pydantic turns the JSON into the annotated types (``list[Model]`` gives models).

Any failure raises :class:`ToolArgumentError`, whose message is written for the model to correct itself.

:class:`PlainArguments` spares the common call steps 2 to 4: when every argument is a JSON scalar of the
exact type its schema names, none of them would change or reject anything, so a few dictionary probes
say so and the full path runs only for the rest (and for every call that is wrong, which it reports).

:func:`path_arguments` reads the same schema for the permission gate: which arguments name files.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

from pydantic import ValidationError

if TYPE_CHECKING:
    # jsonschema loads with the first tool validator (Tool.validator), not with the package.
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError as ValidationErrorOfSchema

__all__ = [
    "PATH_FORMATS",
    "ArgumentProblem",
    "PlainArguments",
    "ToolArgumentError",
    "coerce_arguments",
    "parse_arguments",
    "path_arguments",
    "problems_from_validation_error",
    "validate_arguments",
]

_INTEGER = re.compile(r"[+-]?\d+")
_MAX_SHOWN = 160


@dataclass(frozen=True, slots=True)
class ArgumentProblem:
    """One thing wrong with a call's arguments: where, which rule, and a readable message."""

    path: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message} (rule: {self.rule})"


class ToolArgumentError(ValueError):
    """The model's arguments for a tool cannot be used. The message tells the model what to fix."""

    def __init__(self, tool_name: str, problems: Sequence[ArgumentProblem]) -> None:
        listed = "\n".join(f"- {problem}" for problem in problems)
        super().__init__(
            f"Invalid arguments for tool '{tool_name}':\n{listed}\nFix the arguments and call the tool again."
        )
        self.tool_name = tool_name
        self.problems = tuple(problems)


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + f"… ({len(text)} characters)"


def parse_arguments(tool_name: str, raw: str) -> dict[str, Any]:
    """Parse argument text into a JSON object; empty text means no arguments."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as error:
        problem = ArgumentProblem(
            "(arguments)", "json", f"not valid JSON, possibly cut off: {error.msg} at character {error.pos}"
        )
        raise ToolArgumentError(tool_name, [problem]) from None
    if not isinstance(value, dict):
        kind = type(value).__name__
        problem = ArgumentProblem("(arguments)", "type", f"must be a JSON object, got {kind}")
        raise ToolArgumentError(tool_name, [problem])
    return cast("dict[str, Any]", value)


# ---- coercion -----------------------------------------------------------------------------------------


class _Schema:
    """Navigation over one JSON schema document with local ``$ref`` resolution."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root

    def resolve(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        seen = 0
        while isinstance(ref := node.get("$ref"), str) and ref.startswith("#/") and seen < 32:
            target: Mapping[str, Any] | None = self.root
            for part in ref[2:].split("/"):
                target = target.get(part) if isinstance(target, Mapping) else None
            if target is None:
                return node
            node = target
            seen += 1
        return node

    def branches(self, node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        node = self.resolve(node)
        for key in ("anyOf", "oneOf"):
            options = node.get(key)
            if isinstance(options, list):
                found: list[Mapping[str, Any]] = []
                for option in cast("list[Any]", options):
                    if isinstance(option, Mapping):
                        found.extend(self.branches(cast("Mapping[str, Any]", option)))
                return found
        return [node]

    def types(self, node: Mapping[str, Any]) -> set[str]:
        allowed: set[str] = set()
        for branch in self.branches(node):
            declared = branch.get("type")
            if isinstance(declared, str):
                allowed.add(declared)
            elif isinstance(declared, list):
                allowed.update(t for t in cast("list[Any]", declared) if isinstance(t, str))
            elif "enum" in branch or "const" in branch:
                values = branch.get("enum", [branch.get("const")])
                allowed.update(_json_type(v) for v in cast("list[Any]", values))
            else:
                allowed.add("any")
        return allowed


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _coerce_string(value: str, allowed: set[str]) -> Any:
    if "string" in allowed or "any" in allowed:
        return value
    text = value.strip()
    if not text:
        return None
    lowered = text.lower()
    if "boolean" in allowed and lowered in ("true", "false"):
        return lowered == "true"
    if "integer" in allowed and _INTEGER.fullmatch(text):
        return int(text)
    if "number" in allowed or "integer" in allowed:
        try:
            number = float(text)
        except ValueError:
            return value
        if not math.isfinite(number):
            return value
        if "number" in allowed:
            return number
        return int(number) if number.is_integer() else value
    return value


def _coerce(value: object, node: Mapping[str, Any], schema: _Schema) -> object:
    if isinstance(value, str):
        return _coerce_string(value, schema.types(node))
    if isinstance(value, Mapping):
        items = cast("Mapping[str, object]", value)
        for branch in schema.branches(node):
            properties = branch.get("properties")
            if isinstance(properties, Mapping):
                known = cast("Mapping[str, Any]", properties)
                return {k: _coerce(v, known[k], schema) if k in known else v for k, v in items.items()}
        return items
    if isinstance(value, list):
        elements = cast("list[object]", value)
        for branch in schema.branches(node):
            item_schema = branch.get("items")
            if isinstance(item_schema, Mapping):
                element = cast("Mapping[str, Any]", item_schema)
                return [_coerce(item, element, schema) for item in elements]
        return elements
    return value


def coerce_arguments(arguments: Mapping[str, Any], parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Apply the documented conservative coercions (see the module docstring) and return new arguments."""
    schema = _Schema(parameters)
    properties = cast("Mapping[str, Any]", parameters.get("properties") or {})
    required = set(cast("list[str]", parameters.get("required") or []))
    result: dict[str, Any] = {}
    for name, value in arguments.items():
        node = properties.get(name)
        if node is None:
            result[name] = value  # unknown: left for validation to report
            continue
        coerced = _coerce(value, node, schema)
        if coerced is None and value is not None and name not in required:
            allowed = schema.types(node)
            if "null" not in allowed and "any" not in allowed:
                continue  # "" for an optional non-nullable parameter: let its default apply
        result[name] = coerced
    return result


# ---- the plain fast path ------------------------------------------------------------------------------

_PLAIN_TYPES: Final[Mapping[str, type]] = {
    "string": str,
    "integer": int,  # not bool (JSON Schema's integer excludes true and false), not 2.0 (rare: full path)
    "number": float,  # not int, which pydantic turns into a float for a float parameter: full path
    "boolean": bool,
    "null": type(None),
}
"""The Python type of a value that a scalar JSON type accepts as it is, in every step of the pipeline."""

_INERT_KEYS: Final = frozenset({"description", "title", "default", "examples"})
"""Keywords of a property that accept every value (a default only applies to an argument not given)."""


class PlainArguments:
    """An argument schema of plain JSON scalars (strings, integers, numbers, booleans, maybe null), read
    once, against which a call's arguments are checked in a few dictionary probes.

    :meth:`accepts` is sound, not complete: ``True`` only when every argument is known and its value's
    exact type is one its schema names, and every required argument is there. Such arguments need no
    coercion (:func:`coerce_arguments` changes only strings where no string is allowed) and have nothing
    for JSON Schema validation to report. ``False`` says only that the full path must decide, and that
    path writes the error. A tool whose conversion is the identity on such values (a function tool with
    ``str``, ``int``, ``float`` or ``bool`` parameters, a :class:`~rxagent.tools.SchemaTool`) then skips
    steps 2 to 4 (see the module docstring).
    """

    __slots__ = ("_required", "_types")

    def __init__(self, types: Mapping[str, frozenset[type]], required: frozenset[str]) -> None:
        self._types = dict(types)
        self._required = required

    @classmethod
    def of(cls, parameters: Mapping[str, Any]) -> PlainArguments | None:
        """The check for ``parameters`` (a tool's argument schema), or ``None`` when the schema holds more
        than plain scalars: a keyword that may reject a value (``minLength``, ``enum``, ``format``,
        ``$ref``, ``pattern``…), a nested object or array."""
        if parameters.get("type") != "object" or not parameters.keys() <= {
            "type",
            "properties",
            "required",
            "additionalProperties",
            "description",
            "title",
        }:
            return None
        properties = parameters.get("properties", {})
        required = parameters.get("required", [])
        if not isinstance(properties, Mapping) or not isinstance(required, list):
            return None
        types: dict[str, frozenset[type]] = {}
        for name, node in cast("Mapping[str, Any]", properties).items():
            allowed = _plain_types(node)
            if allowed is None:
                return None
            types[name] = allowed
        names = frozenset(cast("list[Any]", required))
        if not names <= types.keys():  # requires what it does not describe: let jsonschema say so
            return None
        return cls(types, cast("frozenset[str]", names))

    def accepts(self, arguments: Mapping[str, Any]) -> bool:
        """Whether ``arguments`` pass every step unchanged (see the class); ``False``: ask the full path."""
        types = self._types
        for name, value in arguments.items():
            allowed = types.get(name)
            if allowed is None or type(value) not in allowed:
                return False
        return self._required.issubset(arguments.keys())


def _plain_types(node: object) -> frozenset[type] | None:
    """The exact Python types a property's schema accepts as they are, or ``None`` if it is not plain."""
    if not isinstance(node, Mapping):
        return None
    schema = cast("Mapping[str, Any]", node)
    if "anyOf" in schema:  # `str | None`: pydantic writes a branch per type
        branches = schema["anyOf"]
        if not isinstance(branches, list) or not schema.keys() - {"anyOf"} <= _INERT_KEYS:
            return None
        found: set[type] = set()
        for branch in cast("list[Any]", branches):
            allowed = _plain_types(branch)
            if allowed is None:
                return None
            found |= allowed
        return frozenset(found) if found else None
    declared = schema.get("type")
    if not schema.keys() - {"type"} <= _INERT_KEYS:
        return None
    names = cast("list[object]", declared) if isinstance(declared, list) else [declared]
    kinds: set[type] = set()
    for name in names:
        if not isinstance(name, str) or name not in _PLAIN_TYPES:
            return None
        kinds.add(_PLAIN_TYPES[name])
    return frozenset(kinds) if kinds else None


# ---- what names a file -------------------------------------------------------------------------------

PATH_FORMATS = frozenset({"path", "file-path", "directory-path"})
"""The ``format`` values that say a string names a file or directory (pydantic writes them for ``Path``,
``FilePath``, ``DirectoryPath`` and ``NewPath``)."""

_MAX_ARRAY_DEPTH = 8


def path_arguments(parameters: Mapping[str, Any]) -> frozenset[str]:
    """The names of the arguments that name files, by the tool's own schema.

    An argument names files when every value its schema admits, ``null`` aside, is a string of a path
    ``format`` (:data:`PATH_FORMATS`) or an array of such values: ``Path``, ``Path | None``,
    ``list[Path]``, ``tuple[Path, Path]``, ``list[Path] | None``, ``Path | list[Path]``, or a hand-written
    ``{"type": "string", "format": "path"}``. An argument that may also be something else (``Path | str``,
    ``Path | int``) is not one: its schema does not say the value names a file. Local ``$ref`` are followed.
    """
    properties = parameters.get("properties")
    if not isinstance(properties, Mapping):
        return frozenset()
    schema = _Schema(parameters)
    return frozenset(
        name
        for name, node in cast("Mapping[str, Any]", properties).items()
        if isinstance(node, Mapping) and _names_paths(cast("Mapping[str, Any]", node), schema, 0)
    )


def _names_paths(node: Mapping[str, Any], schema: _Schema, depth: int) -> bool:
    branches = [branch for branch in schema.branches(node) if branch.get("type") != "null"]
    return bool(branches) and all(_path_branch(branch, schema, depth) for branch in branches)


def _path_branch(branch: Mapping[str, Any], schema: _Schema, depth: int) -> bool:
    declared = branch.get("type")
    listed = cast("list[Any]", declared) if isinstance(declared, list) else [declared]
    types = {kind for kind in listed if isinstance(kind, str)}
    form = branch.get("format")
    if isinstance(form, str) and form in PATH_FORMATS:
        return not types or "string" in types
    if "array" not in types or depth >= _MAX_ARRAY_DEPTH:
        return False
    prefix = branch.get("prefixItems")
    elements: list[Any] = list(cast("list[Any]", prefix)) if isinstance(prefix, list) else []
    items = branch.get("items")
    if items is not None and items is not False:  # `false`: nothing after the prefix items
        elements.append(items)
    return bool(elements) and all(
        isinstance(element, Mapping) and _names_paths(cast("Mapping[str, Any]", element), schema, depth + 1)
        for element in elements
    )


# ---- validation ---------------------------------------------------------------------------------------


def _path(parts: Sequence[Any]) -> str:
    if not parts:
        return "(arguments)"
    text = str(parts[0])
    for part in parts[1:]:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def validate_arguments(tool_name: str, arguments: Mapping[str, Any], validator: Draft202012Validator) -> None:
    """Raise :class:`ToolArgumentError` listing every schema violation (argument path, rule, message)."""
    found: list[ValidationErrorOfSchema] = list(validator.iter_errors(arguments))  # pyright: ignore[reportUnknownMemberType]
    errors = sorted(found, key=lambda e: [str(p) for p in e.absolute_path])
    if not errors:
        return
    problems: list[ArgumentProblem] = []
    for error in errors[:10]:
        path = list(error.absolute_path)
        if error.validator == "required" and isinstance(error.instance, Mapping):
            missing = [
                name
                for name in cast("list[str]", error.validator_value)
                if name not in cast("Mapping[str, Any]", error.instance)
            ]
            for name in missing:
                problems.append(ArgumentProblem(_path([*path, name]), "required", "is required but missing"))
            continue
        problems.append(ArgumentProblem(_path(path), str(error.validator), _shorten(error.message)))
    raise ToolArgumentError(tool_name, problems)


def problems_from_validation_error(error: ValidationError) -> list[ArgumentProblem]:
    """Turn a pydantic conversion error into argument problems (locations use the argument names)."""
    problems: list[ArgumentProblem] = []
    for detail in error.errors(include_url=False):
        location = list(detail["loc"])
        problems.append(ArgumentProblem(_path(location), detail["type"], _shorten(detail["msg"])))
    return problems
