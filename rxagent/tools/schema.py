"""From a Python signature to the JSON Schema a model sees, through pydantic.

Each visible parameter becomes a field of a generated pydantic model, so every type pydantic knows works
(str/int/float/bool, Optional, Literal, Enum, list/tuple/set, dict[str, T], nested models, dataclasses,
TypedDict) and the same model later converts the model's JSON into the annotated Python values.
Descriptions come from ``Annotated[..., Field(description=...)]`` first, then the docstring's Args section.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, JsonValue, create_model
from pydantic.fields import FieldInfo

__all__ = ["Parameter", "arguments_model", "strip_titles"]


@dataclass(frozen=True, slots=True)
class Parameter:
    """One model-visible parameter of a tool function."""

    name: str
    annotation: Any
    default: Any
    description: str | None

    @property
    def required(self) -> bool:
        """True when the parameter has no default."""
        return self.default is inspect.Parameter.empty


def _has_description(annotation: Any) -> bool:
    metadata: Sequence[Any] = getattr(annotation, "__metadata__", ())
    return any(isinstance(item, FieldInfo) and item.description for item in metadata)


def arguments_model(model_name: str, parameters: Sequence[Parameter]) -> type[BaseModel]:
    """A pydantic model with one field per parameter, aliased to the parameter's name.

    Fields get internal names (``p0``, ``p1``, …) and the parameter name as alias, so a parameter may be
    called ``json``, ``copy`` or ``model_id`` without clashing with pydantic's own attributes. Unknown
    argument names are rejected (``extra="forbid"``, which the schema shows as
    ``additionalProperties: false``).
    """
    fields: dict[str, Any] = {}
    for position, parameter in enumerate(parameters):
        annotation = Any if parameter.annotation is inspect.Parameter.empty else parameter.annotation
        default = ... if parameter.required else parameter.default
        extra: dict[str, Any] = {}
        if parameter.description and not _has_description(annotation):
            extra["description"] = parameter.description  # an Annotated Field's own description wins
        fields[f"p{position}"] = (annotation, Field(default, alias=parameter.name, **extra))
    config = ConfigDict(extra="forbid", validate_by_alias=True, validate_by_name=False)
    return create_model(model_name, __config__=config, **fields)


_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SUBSCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SUBSCHEMA_SINGLE = (
    "items",
    "additionalProperties",
    "not",
    "contains",
    "propertyNames",
    "if",
    "then",
    "else",
)


def strip_titles(schema: Mapping[str, Any]) -> dict[str, JsonValue]:
    """A copy of ``schema`` without pydantic's generated ``title`` keywords (tokens the model never needs).

    Walks the schema's structure, so a *property* named ``title`` is kept.
    """
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SUBSCHEMA_MAPS and isinstance(value, Mapping):
            subschemas = cast("Mapping[str, Any]", value)
            result[key] = {name: _strip_any(sub) for name, sub in subschemas.items()}
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            result[key] = [_strip_any(sub) for sub in cast("list[Any]", value)]
        elif key in _SUBSCHEMA_SINGLE:
            result[key] = _strip_any(value)
        else:
            result[key] = value
    return result


def _strip_any(value: Any) -> Any:
    return strip_titles(cast("Mapping[str, Any]", value)) if isinstance(value, Mapping) else value
