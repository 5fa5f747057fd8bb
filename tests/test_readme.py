"""The README's notebook example runs, and prints exactly the output the README shows.

The section "## An agent, in a notebook" holds ``python`` code block(s) written as notebook cells (``await``
at the top level) and one ``text`` block with what they print. The code is compiled with
``ast.PyCF_ALLOW_TOP_LEVEL_AWAIT``, run inside this test's event loop, and its output compared with the
documented one, so the example cannot drift from what the library does.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## An agent, in a notebook"
_FENCE = re.compile(r"^```(\w+)\n(.*?)^```\n", re.DOTALL | re.MULTILINE)


def section_blocks(title: str) -> list[tuple[str, str]]:
    """The fenced blocks of the README section ``title`` as ``(language, code)``, in order."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n{title}\n") + 1
    end = text.find("\n## ", start + len(title))
    body = text[start : end if end >= 0 else len(text)]
    return [(match.group(1), match.group(2)) for match in _FENCE.finditer(body)]


async def run_notebook_code(source: str) -> str:
    """Run ``source`` as one notebook cell (top-level ``await`` allowed) and return what it printed."""
    code = compile(source, f"{README.name}: {SECTION}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        outcome = eval(code, {"__name__": "__readme__"})
        if inspect.iscoroutine(outcome):
            await outcome
    return printed.getvalue()


def test_the_section_has_code_and_its_output() -> None:
    blocks = section_blocks(SECTION)
    languages = [language for language, _ in blocks]
    assert "python" in languages
    assert languages.count("text") == 1
    code = "".join(source for language, source in blocks if language == "python")
    assert "@tool" in code
    assert "ScriptedModel(" in code
    assert "# model = OpenAIChatModel(" in code  # the line to switch to a real server stays documented
    assert "await agent.call(" in code
    assert "to_async_iterator(agent.stream_events(" in code


async def test_the_notebook_example_prints_what_the_readme_shows() -> None:
    blocks = section_blocks(SECTION)
    code = "\n".join(source for language, source in blocks if language == "python")
    [documented] = [source for language, source in blocks if language == "text"]

    printed = await run_notebook_code(code)

    assert printed == documented
    lines = printed.splitlines()
    assert lines[0] == "MODEL_STOP 2 + 3 = 5. 2"
    assert lines[1] == "run_started"
    assert lines[-1] == "agent_result"
    assert "tool_result" in lines
    assert "".join(
        ast.literal_eval(line.removeprefix("  text: ")) for line in lines if line.startswith("  text: ")
    ) == ("I shouted: FIVE!")
