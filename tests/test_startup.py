"""``import rxagent`` is cheap: it loads the plain data and pydantic, and what is heavy loads on first use.

Each check runs in a fresh interpreter (this one has long imported everything) with this checkout first on
``PYTHONPATH``, and reads which modules are in ``sys.modules``: module presence, not timing, so the checks
hold on any machine. ``bench/startup.py`` measures the time and memory this saves.

- After ``import rxagent``: none of the heavy or optional packages (jsonschema, tiktoken, IPython, rich,
  llama_cpp, psycopg, opentelemetry, aiohttp, reactivex and asyncio under it, sqlite3), no rxagent module
  above the bottom layer of ``tests/test_layers.py`` (no notebook, agent, tools or backend), and no pydantic
  validator built (pydantic reads the installed packages' metadata, ``importlib.metadata``, to find its
  plugins the first time it builds one). The model contract (``ChatModel``, the model errors) then loads
  without reactivex.
- After the client's import, ``from rxagent import Agent, OpenAIChatModel``: aiohttp and reactivex (which
  the client needs), and still none of the other heavy or optional packages, no pydantic validator built,
  and none of rxagent's optional parts (:data:`OPTIONAL`: the notebook, the server, the harness, memory,
  telemetry, the command line, the other model clients and the scripted models, the SQLite and PostgreSQL
  stores, MCP).
- Every public name still resolves, and a run works; a run that calls no tool loads neither jsonschema nor
  sqlite3.
- What loads on first use works when first used: the messages' deferred validators still refuse bad input,
  a tool's argument validator (jsonschema) rejects bad arguments and names them, a docstring describes the
  tool's parameters, a JSON-schema output is checked (an invalid schema is refused when the agent is made),
  and ``rxagent.session.SQLiteStore`` loads when named.

Bad inputs tried: a name the facades do not have (``rxagent.Nope``, ``rxagent.session.Nope``), a message
with an unknown role, tool arguments of the wrong type, an output schema that is not a JSON schema.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import rxagent
import rxagent.session
from tests.test_layers import LAYERS

ROOT = Path(rxagent.__file__).resolve().parent.parent

HEAVY = (
    "jsonschema",
    "tiktoken",
    "IPython",
    "rich",
    "llama_cpp",
    "psycopg",
    "opentelemetry",
    "aiohttp",
    "yarl",
    "reactivex",
    "asyncio",
    "sqlite3",
    "docstring_parser",
    "importlib.metadata",
)
"""Packages and modules ``import rxagent`` must not load."""

CLIENT_NEEDS = ("aiohttp", "yarl", "reactivex", "asyncio")
"""What the OpenAI-compatible client and the agent need of :data:`HEAVY`."""

OPTIONAL = (
    "rxagent.notebook",
    "rxagent.serve",
    "rxagent.harness",
    "rxagent.memory",
    "rxagent.telemetry",
    "rxagent.cli",
    "rxagent.cli_sessions",
    "rxagent.model.anthropic",
    "rxagent.model.openai_responses",
    "rxagent.model.llama_cpp",
    "rxagent.model.llama_runtime",
    "rxagent.model.gguf",
    "rxagent.model.embedders",
    "rxagent.model.fallback",
    "rxagent.model.scripted",
    "rxagent.session.sqlite",
    "rxagent.session.postgres",
    "rxagent.tools.mcp",
    "rxagent.tools.demo",
)
"""rxagent's parts a program with an agent and the OpenAI-compatible client does not use."""

BOTTOM = {f"rxagent.{part}" for part in LAYERS[0]} | {"rxagent"}
"""The modules ``import rxagent`` may load: the facade and the plain data of the bottom layer."""

LOADED = """
def loaded(*names):
    # A submodule never loads without its package, so the package's presence says whether any of it did.
    return sorted(name for name in names if name in sys.modules)
"""


def fresh(code: str) -> Any:
    """Run ``code`` in a fresh interpreter that imports this checkout's rxagent; what it printed, as JSON."""
    inherited = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *([inherited] if inherited else [])])}
    done = subprocess.run(
        [sys.executable, "-c", "import sys\n" + LOADED + textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_import_rxagent_loads_only_the_data_and_no_heavy_package() -> None:
    found = fresh(
        f"""
        import json
        import rxagent
        heavy = loaded(*{HEAVY!r})
        ours = sorted(m for m in sys.modules if m.split(".")[0] == "rxagent")
        from rxagent import ChatModel
        from rxagent.model import ModelError
        print(json.dumps({{
            "file": rxagent.__file__,
            "heavy": heavy,
            "rxagent": ours,
            "contract": loaded("reactivex", "asyncio", "aiohttp"),
        }}))
        """
    )

    assert Path(found["file"]).resolve().parent.parent == ROOT
    assert found["heavy"] == []
    assert set(found["rxagent"]) <= BOTTOM, set(found["rxagent"]) - BOTTOM
    assert found["contract"] == []  # the model contract names reactivex in annotations only


def test_the_clients_import_loads_what_it_needs_and_no_optional_part() -> None:
    found = fresh(
        f"""
        import json
        from rxagent import Agent, OpenAIChatModel
        print(json.dumps({{
            "heavy": loaded(*{HEAVY!r}),
            "optional": loaded(*{OPTIONAL!r}),
            "agent": Agent.__module__,
            "client": OpenAIChatModel.__module__,
        }}))
        """
    )

    assert found["heavy"] == sorted(CLIENT_NEEDS)
    assert found["optional"] == []
    assert [found["agent"], found["client"]] == ["rxagent.agent.react", "rxagent.model.openai"]


def test_every_public_name_resolves_and_a_run_without_tools_loads_no_validator_or_store() -> None:
    found = fresh(
        """
        import asyncio, json
        import rxagent
        from rxagent import Agent, ChatModel, ScriptedModel

        model = ScriptedModel(["Hello!"])
        result = asyncio.run(Agent(model).call("Hi"))
        after_run = loaded("jsonschema", "sqlite3", "docstring_parser", "rxagent.notebook", "aiohttp")
        resolved = [name for name in rxagent.__all__ if getattr(rxagent, name, None) is not None]
        print(json.dumps({
            "resolved": resolved,
            "chat_model": isinstance(model, ChatModel),
            "result": [result.text, result.reason, result.usage.model_calls],
            "loaded": after_run,
        }))
        """
    )

    assert found["resolved"] == rxagent.__all__
    assert found["chat_model"] is True
    assert found["result"] == ["Hello!", "MODEL_STOP", 1]
    assert found["loaded"] == []


def test_what_loads_on_first_use_works_when_first_used(tmp_path: Path) -> None:
    found = fresh(
        f"""
        import asyncio, json
        from pydantic import ValidationError
        from rxagent import Agent, Msg, ScriptedModel, ScriptedResponse, ScriptedToolCall, Toolkit, tool

        before = loaded("jsonschema", "docstring_parser", "sqlite3")
        message = Msg.user("hi")
        round_trip = Msg.model_validate_json(message.model_dump_json()) == message
        try:
            Msg.model_validate({{"role": "robot"}})
            refused = None
        except ValidationError as error:
            refused = [list(e["loc"]) for e in error.errors()]

        @tool
        def double(n: int) -> int:
            '''Double a number.

            Args:
                n: the number to double.
            '''
            return 2 * n

        described = double.schema().parameters["properties"]["n"].get("description")
        model = ScriptedModel([
            ScriptedResponse(tool_calls=[ScriptedToolCall("double", {{"n": "many"}})]),
            ScriptedResponse(tool_calls=[ScriptedToolCall("double", {{"n": 21}})]),
            "42",
        ])
        agent = Agent(model, Toolkit([double]), store={str(tmp_path / "sessions.db")!r})
        result = asyncio.run(agent.call("Double 21."))
        agent.close()
        results = [
            [block.status, block.text]
            for request in model.requests
            for msg in request.messages
            for block in msg.tool_results
        ]

        schema = {{"type": "object", "properties": {{"city": {{"type": "string"}}}}, "required": ["city"]}}
        city = asyncio.run(Agent(ScriptedModel(['{{"city": "Paris"}}']), output_type=schema).call("Where?"))
        try:
            Agent(ScriptedModel(["never"]), output_type={{"type": 3}})
            bad_schema = None
        except Exception as error:
            bad_schema = [type(error).__name__, str(error).splitlines()[0]]

        import rxagent.session
        print(json.dumps({{
            "before": before,
            "round_trip": round_trip,
            "refused": refused,
            "described": described,
            "answer": [result.text, result.reason],
            "results": results[-2:],
            "structured": [city.reason, city.structured],
            "bad_schema": bad_schema,
            "store": type(agent.store).__name__,
            "lazy_name": rxagent.session.SQLiteStore is type(agent.store),
            "loaded": loaded("jsonschema", "docstring_parser", "sqlite3"),
        }}))
        """
    )

    assert found["before"] == []
    assert found["round_trip"] is True
    assert found["refused"] == [["role"]]
    assert found["described"] == "the number to double."
    assert found["answer"] == ["42", "MODEL_STOP"]
    (bad_status, bad_text), (good_status, good_text) = found["results"]
    assert bad_status == "error"
    assert "- n: 'many' is not of type 'integer' (rule: type)" in bad_text  # the schema validator's word
    assert (good_status, good_text) == ("ok", "42")
    assert found["structured"] == ["STRUCTURED_OUTPUT", {"city": "Paris"}]
    assert found["bad_schema"][0] == "SchemaError"
    assert "3 is not valid" in found["bad_schema"][1]
    assert found["store"] == "SQLiteStore"
    assert found["lazy_name"] is True
    assert found["loaded"] == ["docstring_parser", "jsonschema", "sqlite3"]


@pytest.mark.parametrize(("module", "name"), [(rxagent, "Nope"), (rxagent.session, "Nope")])
def test_a_name_the_facade_does_not_have_is_an_attribute_error(module: object, name: str) -> None:
    with pytest.raises(AttributeError, match=f"has no attribute '{name}'"):
        getattr(module, name)
