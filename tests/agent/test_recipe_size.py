"""The recipes stay small and public: each is 40 lines of code or fewer, imports the loop only through
``rxagent.agent`` / ``rxagent.agent.loop`` (besides plain data modules), and never patches the run's state
or pops from its history. Notebook 02, which shows them and a step of its own, is held to the same
imports and the same hands-off rule.

A line of code is a line holding a token that is not a comment, and not part of a docstring (a string
standing alone as a statement) or an import statement. Bad inputs tried (on snippets): an import of a
private module, of a private name, of the run core's modules; an assignment to the run's fields; a pop
from its history.
"""

from __future__ import annotations

import ast
import io
import json
import tokenize
from pathlib import Path

import pytest

import rxagent.agent.recipes

RECIPES = Path(rxagent.agent.recipes.__file__).parent
MAX_LINES = 40
ALLOWED = frozenset(
    {
        # the loop, through its two facades
        "rxagent.agent",
        "rxagent.agent.loop",
        # plain data and the tools every assembly uses
        "rxagent.agent.structured",  # extract_json: reading JSON out of an answer
        "rxagent.events",
        "rxagent.messages",
        "rxagent.model",
        "rxagent.operators",
        "rxagent.tools",
    }
)
"""The rxagent modules a recipe may import from (anything outside rxagent is free)."""
_NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENCODING,
    tokenize.ENDMARKER,
}


def code_lines(source: str) -> int:
    """The lines of ``source`` that are code: not blank, not comments, not docstrings, not imports."""
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.stmt):
            continue
        value = node.value if isinstance(node, ast.Expr) else None
        docstring = isinstance(value, ast.Constant) and isinstance(value.value, str)
        if isinstance(node, ast.Import | ast.ImportFrom) or docstring:
            lines -= set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return len(lines)


def import_problems(source: str) -> list[str]:
    """Imports of rxagent modules outside :data:`ALLOWED`, and of private names."""
    problems: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            modules, names = [node.module], [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            modules, names = [alias.name for alias in node.names], []
        else:
            continue
        problems += [f"imports {m}" for m in modules if m.split(".")[0] == "rxagent" and m not in ALLOWED]
        problems += [f"imports the private {n}" for n in names if n.startswith("_") and n != "__future__"]
    return problems


def _root_and_path(node: ast.expr) -> tuple[str | None, list[str]]:
    """``run.state.messages[0]`` → ``("run", ["state", "messages"])``."""
    path: list[str] = []
    while isinstance(node, ast.Attribute | ast.Subscript):
        if isinstance(node, ast.Attribute):
            path.insert(0, node.attr)
        node = node.value
    return (node.id if isinstance(node, ast.Name) else None), path


def state_patches(source: str) -> list[str]:
    """Writes to the run (``run.x = …``, ``del run.x``) other than the session's ``extras`` (where a recipe
    keeps its own progress), and pops or removals from the run's history or pending calls."""
    problems: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            root, path = _root_and_path(target)
            if root == "run" and path and path != ["state", "extras"]:
                problems.append((target.lineno, f"line {target.lineno}: writes run.{'.'.join(path)}"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            root, path = _root_and_path(node.func.value)
            removing = node.func.attr in {"pop", "remove", "clear", "insert", "__delitem__", "__setitem__"}
            if root == "run" and removing and {"messages", "pending"} & set(path):
                problems.append(
                    (node.lineno, f"line {node.lineno}: {'.'.join(['run', *path])}.{node.func.attr}(...)")
                )
    return [text for _, text in sorted(problems)]


def loop_imports(tree: ast.AST) -> list[str]:
    """The ``rxagent.agent`` modules ``tree`` imports that are not the loop's facades or the recipes."""
    public = {"rxagent.agent", "rxagent.agent.loop", "rxagent.agent.recipes"}
    modules = [
        *(n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module is not None),
        *(a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names),
    ]
    return [m for m in modules if m.startswith("rxagent.agent") and m not in public]


def recipes() -> list[Path]:
    return sorted(p for p in RECIPES.glob("*.py") if p.name != "__init__.py")


def test_there_are_three_recipes() -> None:
    assert [p.stem for p in recipes()] == ["plan_execute", "reflect", "reviewer"]


@pytest.mark.parametrize("path", recipes(), ids=lambda p: p.stem)
def test_each_recipe_is_small_and_uses_only_public_parts(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert code_lines(source) <= MAX_LINES
    assert import_problems(source) == []
    assert state_patches(source) == []


def test_the_line_count_skips_what_is_not_code() -> None:
    source = '''"""A module docstring
over two lines."""

from __future__ import annotations

from rxagent.agent.loop import (
    Reason,
    emit,
)

# a comment
X = 1  # a trailing comment
"""An attribute's docstring."""


def f(
    a: int,
) -> int:
    """A function's docstring."""
    return a
'''
    assert code_lines(source) == 5  # X, the def over three lines, the return


def test_the_import_check_names_what_a_recipe_must_not_import() -> None:
    source = """
from rxagent.agent.run import RunState
from rxagent.agent.loop import _private, emit
import rxagent.session
from rxagent.events import StepNote
from pydantic import BaseModel
"""
    assert import_problems(source) == [
        "imports rxagent.agent.run",
        "imports the private _private",
        "imports rxagent.session",
    ]
    assert loop_imports(ast.parse(source)) == ["rxagent.agent.run"]


def test_the_state_check_finds_patches_and_pops() -> None:
    source = """
def step(node, run):
    run.iteration += 1
    run.last_message = None
    run.state.messages.pop()
    run.messages.remove(node.message)
    del run.state.pending[0]
    run.state.extras["plan"] = {}
    run.add_messages([node.message])
    plan.started += 1
"""
    assert state_patches(source) == [
        "line 3: writes run.iteration",
        "line 4: writes run.last_message",
        "line 5: run.state.messages.pop(...)",
        "line 6: run.messages.remove(...)",
        "line 7: writes run.state.pending",
    ]


def test_notebook_02_assembles_its_loops_from_the_public_parts_only() -> None:
    notebook = json.loads((RECIPES.parents[2] / "notebooks" / "02_custom_pipelines.ipynb").read_text("utf-8"))
    cells = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    source = "\n\n".join(cells)
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT  # a notebook awaits at the top level
    tree = compile(source, "02_custom_pipelines.ipynb", "exec", flags)
    assert "model_turn" in source  # it shows a side turn of its own
    assert loop_imports(tree) == []
    assert [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and any(a.name.startswith("_") for a in n.names)
    ] == []
    assert state_patches(ast.unparse(tree)) == []
