"""Structured output: the answer as a validated pydantic model (or JSON matching a schema).

Three paths, picked per run (``structured_mode``, default ``auto``: the first the model's capabilities
allow, in this order):

- **native**: when the model declares ``json_schema_output``, the request asks for JSON matching the
  schema (``response_format``) and the answer text is validated.
- **tool**: otherwise the run offers a per-run tool, ``generate_response``, whose arguments are the output
  (it is never registered on the shared toolkit, and it is not executed: its arguments *are* the
  answer). The tool choice follows a ladder, stepping down when the model rejects forcing (reasoning
  models often do) with a 400 error: force ``generate_response`` (when it is the only tool and the model
  declares ``forced_tool_choice``) → ``required`` → ``auto`` plus an instruction in the request.
- **prompted**: for models with neither, the schema goes into the instructions and the JSON is read from
  the answer text: a fenced block or bare JSON, the first complete object (:func:`extract_json`).

Every way, a validation failure goes back to the model with the error, up to ``structured_retries``
times; after that the run ends with ``structured=None`` and ``structured_error`` saying why.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from pydantic import BaseModel, JsonValue, ValidationError

from rxagent.model.types import JsonSchemaFormat, ToolSchema
from rxagent.tools.schema import strip_titles

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

__all__ = ["OUTPUT_TOOL", "OutputSpec", "extract_json", "prompted_instructions"]

OUTPUT_TOOL = "generate_response"
"""Name of the per-run tool whose arguments are the structured answer."""


class OutputSpec:
    """An output type (pydantic model class or JSON schema) with its schema and validation."""

    @staticmethod
    def of(output_type: type[object] | Mapping[str, JsonValue] | None) -> OutputSpec | None:
        """The spec of an agent's ``output_type`` (``None``: plain text answers).

        Raises:
            TypeError: neither a pydantic model class nor a JSON schema.
        """
        if output_type is None:
            return None
        if isinstance(output_type, Mapping):
            return OutputSpec(output_type)
        if issubclass(output_type, BaseModel):
            return OutputSpec(output_type)
        raise TypeError(f"output_type must be a pydantic model class or a JSON schema, got {output_type!r}")

    def __init__(self, output_type: type[BaseModel] | Mapping[str, JsonValue]) -> None:
        if isinstance(output_type, Mapping):
            from jsonschema import Draft202012Validator  # only an output given as a JSON schema needs it

            self.model: type[BaseModel] | None = None
            self.schema: dict[str, JsonValue] = dict(output_type)
            Draft202012Validator.check_schema(self.schema)
            self._validator: Draft202012Validator | None = Draft202012Validator(self.schema)
            title = self.schema.get("title")
            self.name = title if isinstance(title, str) and title.isidentifier() else "output"
        else:
            self.model = output_type
            self.schema = strip_titles(output_type.model_json_schema())
            self._validator = None
            self.name = output_type.__name__
        description = self.schema.get("description")
        self.description = description if isinstance(description, str) else ""

    def response_format(self) -> JsonSchemaFormat:
        """The native-path request format."""
        return JsonSchemaFormat(name=self.name, schema=self.schema, strict=False)

    def tool_schema(self) -> ToolSchema:
        """The tool-path tool the model calls with its answer."""
        schema = self.schema if self.schema.get("type") == "object" else {"type": "object", **self.schema}
        about = f" {self.description}" if self.description else ""
        return ToolSchema(
            name=OUTPUT_TOOL,
            description=f"Give your final answer by calling this tool; its arguments are the answer.{about}",
            parameters=schema,
        )

    def validate(self, value: JsonValue) -> BaseModel | JsonValue:
        """The validated output (an instance of the model, or the JSON value for a JSON schema); raises
        ``ValueError`` saying why not."""
        if self.model is not None:
            try:
                return self.model.model_validate(value)
            except ValidationError as error:
                raise ValueError(_pydantic_problems(error)) from None
        assert self._validator is not None
        problems = [
            f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
            for e in list(self._validator.iter_errors(value))  # pyright: ignore[reportUnknownMemberType]
        ]
        if problems:
            raise ValueError("; ".join(problems[:10]))
        return value

    def validate_text(self, text: str) -> BaseModel | JsonValue:
        """Validate JSON answer text (native path: the whole answer is the JSON, fenced or not)."""
        stripped = text.strip()
        if stripped.startswith("```"):  # models often fence JSON even when asked not to
            stripped = stripped.strip("`").removeprefix("json").strip()
        try:
            value: JsonValue = json.loads(stripped)
        except json.JSONDecodeError as error:
            raise ValueError(f"the answer is not valid JSON: {error.msg} at character {error.pos}") from None
        return self.validate(value)

    def validate_answer(self, text: str) -> BaseModel | JsonValue:
        """Validate the JSON object found in answer text (prompted path, see :func:`extract_json`)."""
        return self.validate(extract_json(text))


_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_json(text: str) -> dict[str, JsonValue]:
    """The JSON object an answer holds: the first fenced block that parses, else the first complete
    ``{...}`` object in the text (prose around it is ignored).

    Raises:
        ValueError: the text holds no JSON object.

    Example:
        >>> extract_json('Sure! Here it is: {"city": "Oslo", "n": 2} Hope that helps.')
        {'city': 'Oslo', 'n': 2}
    """
    decoder = json.JSONDecoder()
    for match in _FENCE.finditer(text):
        try:
            value: JsonValue = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    start = text.find("{")
    while start >= 0:
        try:
            value, _ = cast("tuple[JsonValue, int]", decoder.raw_decode(text, start))
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    raise ValueError("the answer holds no JSON object; reply with only the JSON object")


def prompted_instructions(output: OutputSpec) -> str:
    """The instruction that carries the schema on the prompted path."""
    schema = json.dumps(output.schema, separators=(",", ":"))
    about = f" ({output.description})" if output.description else ""
    return (
        f"Give your final answer{about} as a single JSON object that matches this JSON schema, and nothing "
        f"else. Schema: {schema}"
    )


def _pydantic_problems(error: ValidationError) -> str:
    parts: list[str] = []
    for detail in error.errors(include_url=False)[:10]:
        where = ".".join(str(p) for p in detail["loc"]) or "(root)"
        parts.append(f"{where}: {detail['msg']}")
    return "; ".join(parts)
