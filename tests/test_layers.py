"""The package's layers, held: no module under ``rxagent/`` imports from a layer above its own.

:data:`LAYERS` is the order, bottom first, written once here; the README's "Layout" table states the same
(the last test compares them). A layer is a list of *parts*: a top-level module (``chunks`` for
``rxagent/chunks.py``) or a sub-package with everything in it (``agent`` for ``rxagent/agent/``, recipes
included), and ``__init__`` for the package's facade, ``rxagent/__init__.py``. A module may import from its
own layer and the layers below it. :func:`offences` reads every import of every module with :mod:`ast`:
the ones at the top, the ones under ``if TYPE_CHECKING:``, the lazy ones inside functions, relative ones,
and a module named in a string (what ``importlib.import_module`` and the lazy-name tables of the facades
load). Besides upward imports it refuses a private name taken from another part: a ``_name`` module
(``rxagent.model._endpoint``) or a ``_name`` symbol; a part's own private modules are its business.

Bad inputs tried (on a copy of the package): an upward import at the top, under ``TYPE_CHECKING``, inside
a function, written relative, or as a string given to ``importlib``; a private module and a private symbol
of another part; a module that is in no layer.
"""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rxagent"

LAYERS: list[list[str]] = [
    # Plain data every layer passes around (messages, chunks, requests, events, state, context), what
    # every layer shares (clock, retry policy, redaction) and the display registry the data asks.
    [
        "chunks",
        "media",
        "messages",
        "requests",
        "events",
        "state",
        "context",
        "display",
        "clock",
        "retry",
        "redaction",
        "deprecation",
    ],
    # Stream operators.
    ["operators"],
    # JSON log lines with the current run's ids; above the operators, since with_current_run is one.
    ["logs"],
    # The ChatModel contract, its backends and the embedders.
    ["model"],
    # Tools: schemas, toolkits, permissions, the executor, MCP.
    ["tools"],
    # The context window, token counting, long-term memory.
    ["memory"],
    # Session logs and stores.
    ["session"],
    # The loop, its steps, middleware and hosts (all of rxagent/agent/, recipes included).
    ["agent"],
    # The harness around an agent: workspace, file and shell tools, todos, skills, tasks, context budget.
    ["harness"],
    # What watches an agent: notebook displays and views (which fill the display registry), OpenTelemetry.
    ["notebook", "telemetry"],
    # The HTTP server.
    ["serve"],
    # The command line, and the package facade (which wires the notebook displays to the registry).
    ["cli", "cli_sessions", "__main__", "__init__"],
]


def part_of(module: str) -> str:
    """The part of ``LAYERS`` a dotted module name belongs to (``rxagent.model.types`` → ``model``)."""
    names = module.split(".")
    return names[1] if len(names) > 1 else "__init__"


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_name(package: Path, path: Path) -> str:
    relative = path.relative_to(package.parent).with_suffix("")
    names = list(relative.parts)
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def references(
    tree: ast.Module, module: str, is_package: bool, known: set[str]
) -> Iterator[tuple[int, str, str]]:
    """Every ``(line, module, name)`` the module's code imports from ``rxagent`` (name ``""``: the module
    itself), wherever the import is; and every string naming an ``rxagent`` module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ""
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                source = ".".join([*base, source] if source else base)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in known:  # `from rxagent import notebook` imports the module
                    yield node.lineno, submodule, ""
                else:
                    yield node.lineno, source, alias.name
        # A string holding a submodule's full name is an import to come; a bare "rxagent" in a string is
        # a logger's or a metadata key's name.
        elif isinstance(node, ast.Constant) and node.value in known and node.value != "rxagent":
            yield node.lineno, str(node.value), ""


def offences(package: Path) -> list[str]:
    """What breaks the layers in ``package`` (a copy of ``rxagent/``), one ``path:line: why`` each."""
    layer_of = {part: number for number, layer in enumerate(LAYERS, start=1) for part in layer}
    found: list[str] = []
    assert sum(map(len, LAYERS)) == len(layer_of), "a part is in two layers"
    paths = sorted(package.rglob("*.py"))
    known = {module_name(package, path) for path in paths}
    parts = {part_of(module) for module in known}
    found += [f"LAYERS: {part!r} is not a part of {package.name}/" for part in sorted(set(layer_of) - parts)]
    for path in paths:
        module = module_name(package, path)
        where = path.relative_to(package.parent).as_posix()
        part = part_of(module)
        if part not in layer_of:
            found.append(f"{where}:1: {part!r} is in no layer: add it to LAYERS (and to the README's table)")
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, target, name in references(tree, module, path.name == "__init__.py", known):
            if target != "rxagent" and not target.startswith("rxagent."):
                continue
            target_part = part_of(target)
            if target_part == part:
                continue
            shown = f"{name} from {target}" if name else target
            if layer_of.get(target_part, len(LAYERS) + 1) > layer_of[part]:
                found.append(
                    f"{where}:{line}: imports {shown}, from layer {layer_of.get(target_part, '?')} "
                    f"({target_part}) above its own layer {layer_of[part]} ({part})"
                )
            elif any(map(is_private, target.split("."))) or is_private(name):
                found.append(
                    f"{where}:{line}: imports {shown}, a private name of another part ({target_part})"
                )
    return found


def test_no_module_imports_from_a_layer_above_or_a_private_name_of_another_part() -> None:
    found = offences(PACKAGE)
    assert not found, "layers broken:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("file", "code"),
    [
        ("messages.py", "from rxagent.agent import ReActAgent"),
        ("messages.py", "if TYPE_CHECKING:\n    from rxagent.serve import AgentServer"),
        ("events.py", "def _later() -> None:\n    import rxagent.notebook"),
        ("tools/executor.py", "from ..session import SessionStore"),
        ("operators/_frame.py", "import importlib\nimportlib.import_module('rxagent.model.openai')"),
        ("memory/window.py", "from rxagent.model._endpoint import HttpEndpoint"),
        ("events.py", "from rxagent.messages import _now"),
        ("gadgets.py", "GADGETS = 3"),
    ],
    ids=[
        "eager",
        "type-checking",
        "lazy",
        "relative",
        "string",
        "private-module",
        "private-name",
        "no-layer",
    ],
)
def test_the_check_finds_what_is_added_to_a_copy(tmp_path: Path, file: str, code: str) -> None:
    copy = tmp_path / "rxagent"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / file
    before = target.read_text(encoding="utf-8") if target.exists() else ""
    target.write_text(before + "\n" + code + "\n", encoding="utf-8")
    # The offending statement is the code's last line; a module in no layer is reported at its line 1.
    line = len((before + "\n" + code).splitlines()) if before else 1

    added = set(offences(copy)) - set(offences(PACKAGE))

    assert len(added) == 1, added
    assert added.pop().startswith(f"rxagent/{file}:{line}: ")


def test_the_readme_states_the_same_layers() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"\| \d+ \|", line)]
    stated = [
        [name.removesuffix(".py").removesuffix("/") for name in re.findall(r"`([^`]+)`", row.split("|")[2])]
        for row in rows
    ]
    assert [sorted(layer) for layer in stated] == [sorted(layer) for layer in LAYERS]
