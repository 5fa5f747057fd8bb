"""The README runs as written: every Python block in it is executed here, and prints what it shows.

The README's Python is notebook code (``await`` and ``async with`` at the top level), run as
``tests/snippets.py`` runs a page's cells (the documentation site's pages are run the same way). Each block of
"## Using it" runs on its own; the blocks of "## An agent, in a notebook" run in order as one notebook,
and the first one prints exactly the ``text`` block that follows it. A block that talks to a server
(``http://127.0.0.1:8080/v1``) talks to the loopback OpenAI-compatible server instead, scripted for that
block; it must close what it opens (no unclosed-session warning).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.model.openai_server import OpenAIServer, Reply, finish_chunk, text_chunk, tool_chunk
from tests.snippets import SERVER_URL, Block, blocks, leaks_recorded, run_cell

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
USING_IT = "## Using it"
NOTEBOOK = "## An agent, in a notebook"


def section_blocks(title: str, language: str | None = None) -> list[Block]:
    return [b for b in blocks(README) if b.section == title and (language is None or b.language == language)]


# What the loopback server answers to each block that talks to a server (found by a phrase in the block).
# llama.cpp's server sends no usage while streaming: neither does this one for the first block.
SCRIPTS: dict[str, list[Reply]] = {
    "Name three rivers.": [
        Reply.sse(text_chunk("Nile, "), text_chunk("Amazon, "), text_chunk("Danube."), finish_chunk("stop"))
    ],
    "remote_agent": [
        Reply.sse(tool_chunk(0, "call_1", "add", json.dumps({"a": 2, "b": 3})), finish_chunk("tool_calls")),
        Reply.sse(text_chunk("2 + 3 = 5."), finish_chunk("stop")),
    ],
    "FallbackModel([primary": [Reply.error(503, "overloaded")],
}

PRINTS: dict[str, str] = {
    "Name three rivers.": ("Nile, Amazon, Danube.\n21 characters, finish reason: stop\nno usage reported\n"),
    "remote_agent": "MODEL_STOP 2 + 3 = 5.\n",
    "stepper.iter(": "Start → Reason → Act → Reason → Finish · MODEL_STOP 8.\n",
    "reflect_then_revise(critic=critic)": "8: I added 4 and 4. · 2 answering turns · 4 model calls\n",
    "to_async_iterator(model.stream(request), max_buffer=256)": "2050 characters\n",
    "Telemetry(provider)": "['chat scripted', 'invoke_agent greeter'] 4bf92f3577b34da6a3ce929d0e0e4736\n",
    "What do these show?": "['text', 'image', 'document'] 1 · A cat, and a one-page brief.\n",
    "FallbackModel([primary": "Paris. answered by small\n",
}
"""What a block prints, where the README does not show it (found by a phrase in the block)."""


async def run_readme_cell(code: str, namespace: dict[str, Any], server: OpenAIServer) -> str:
    """Run ``code``, a block of the README, as a notebook cell; what it printed."""
    return await run_cell(code, namespace, page=README, server=server, scripts=SCRIPTS)


def expected_print(code: str) -> str | None:
    phrases = [phrase for phrase in PRINTS if phrase in code]
    return PRINTS[phrases[0]] if phrases else None


def test_every_python_block_is_run_here() -> None:
    python = [b for b in blocks(README) if b.language == "python"]
    assert python
    assert {b.section for b in python} == {USING_IT, NOTEBOOK}
    assert [b.language for b in section_blocks(NOTEBOOK)].count("text") == 1


@pytest.mark.parametrize("index", range(len(section_blocks(USING_IT, "python"))))
async def test_each_snippet_of_using_it_runs_on_its_own(index: int, server: OpenAIServer) -> None:
    code = section_blocks(USING_IT, "python")[index].code
    namespace: dict[str, Any] = {"__name__": "__readme__"}

    with leaks_recorded() as leaks:
        printed = await run_readme_cell(code, namespace, server)
        namespace.clear()  # as when the notebook's kernel stops: whatever was left open is collected

    assert leaks == [], f"the snippet left resources open: {leaks}"

    expected = expected_print(code)
    if expected is not None:
        assert printed == expected
    if SERVER_URL in code:
        assert not server.replies  # every scripted reply was asked for


async def test_the_notebook_section_runs_in_order_and_prints_what_it_shows(server: OpenAIServer) -> None:
    section = section_blocks(NOTEBOOK)
    cells = [b.code for b in section if b.language == "python"]
    [documented] = [b.code for b in section if b.language == "text"]
    assert [b.language for b in section][:2] == ["python", "text"]  # the output follows the first cell
    namespace: dict[str, Any] = {"__name__": "__readme__"}

    with leaks_recorded() as leaks:
        printed = [await run_readme_cell(cell, namespace, server) for cell in cells]
        namespace.clear()

    assert leaks == [], f"the notebook left resources open: {leaks}"

    assert printed[0] == documented
    lines = printed[0].splitlines()
    assert lines[0] == "MODEL_STOP 2 + 3 = 5. 2"
    assert lines[1] == "run_started"
    assert lines[-1] == "agent_result"
    assert "tool_result" in lines
    assert "".join(
        ast.literal_eval(line.removeprefix("  text: ")) for line in lines if line.startswith("  text: ")
    ) == ("I shouted: FIVE!")
    for cell, output in zip(cells[1:], printed[1:], strict=True):
        assert output == expected_print(cell)
    # The remote cell really ran the tool round against the server: the result went back to it.
    assert [m["role"] for m in server.requests[-1].body["messages"]][-2:] == ["assistant", "tool"]


def test_the_layout_lists_every_top_level_module() -> None:
    text = README.read_text(encoding="utf-8")
    layout = text[text.index("## Layout") : text.index("\n## ", text.index("## Layout") + 1)]
    listed = set(re.findall(r"`([^`]+)`", layout))
    package = ROOT / "rxagent"
    modules = {
        f"rxagent/{entry.name}/" if entry.is_dir() else f"rxagent/{entry.name}"
        for entry in package.iterdir()
        if (entry.is_dir() and (entry / "__init__.py").exists()) or entry.suffix == ".py"
    }
    assert modules - listed == set()
    folders = {
        f"{entry.name}/"
        for entry in ROOT.iterdir()
        if entry.name in ("scripts", "tests", "bench", "notebooks")
    }
    assert folders - listed == set()
