"""The agent package's public signatures say what flows through them: no ``Any`` in any of them.

``Any`` on a public signature hides from the type checker exactly what a user's assembly gets wrong (a
tool argument that is not JSON, a step's output, a result's structured value). This test reads every
module of ``rxagent/agent`` with ``ast`` (modules whose name starts with ``_`` are private) and fails,
naming ``file:line``, on ``Any`` in:

- a public function's or method's parameters or return (dunder methods such as ``__init__`` and
  ``__await__`` are public; the implementation of an ``@overload``-ed function is not: callers see only
  the overloads);
- a public class's annotated attributes (dataclass fields included), and its nested public classes;
- a public module-level name's annotation or value (type aliases, ``TypeVar`` bounds);

whether written as ``Any``, ``typing.Any`` or inside a quoted annotation. Private helpers (``_name``) and
the bodies of functions are not signatures, and are not read.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import rxagent.agent

PACKAGE = Path(rxagent.agent.__file__).parent


def _public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _modules() -> list[Path]:
    return sorted(
        path
        for path in PACKAGE.rglob("*.py")
        if not any(part.startswith("_") and part != "__init__.py" for part in path.relative_to(PACKAGE).parts)
    )


def _any_lines(expression: ast.expr | None, *, quoted: bool = True) -> Iterator[int]:
    """The lines where ``expression`` names ``Any``.

    Quoted types are parsed and read too: anywhere in an annotation (``quoted``), and inside a subscript
    of a value (``Callable["Any", None]``), where a string is a type; elsewhere a value's string is data.
    """
    if expression is None:
        return
    named = expression.id if isinstance(expression, ast.Name) else None
    if isinstance(expression, ast.Attribute):  # typing.Any
        named = expression.attr
    if named == "Any":
        yield expression.lineno
    elif isinstance(expression, ast.Constant) and isinstance(expression.value, str) and quoted:
        try:
            parsed = ast.parse(expression.value, mode="eval").body
        except SyntaxError:  # a string that is not a type (a default value)
            return
        yield from (expression.lineno for _ in _any_lines(parsed))
    for child in ast.iter_child_nodes(expression):
        if isinstance(child, ast.keyword):  # TypeVar("T", bound=...)
            child = child.value
        if isinstance(child, ast.expr):
            yield from _any_lines(child, quoted=quoted or isinstance(expression, ast.Subscript))


def _is_overload(decorator: ast.expr) -> bool:
    return (isinstance(decorator, ast.Name) and decorator.id == "overload") or (
        isinstance(decorator, ast.Attribute) and decorator.attr == "overload"
    )


def _signature(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[int]:
    arguments = function.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    for argument in every:
        yield from _any_lines(argument.annotation)
    yield from _any_lines(function.returns)


def _public_any(body: list[ast.stmt], *, in_class: bool) -> Iterator[tuple[int, str]]:
    """``(line, name)`` of each public declaration in ``body`` whose signature names ``Any``."""
    overloaded = {
        statement.name
        for statement in body
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef)
        and any(_is_overload(d) for d in statement.decorator_list)
    }
    for statement in body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            implementation = statement.name in overloaded and not any(
                _is_overload(d) for d in statement.decorator_list
            )
            if _public(statement.name) and not implementation:
                yield from ((line, statement.name) for line in _signature(statement))
        elif isinstance(statement, ast.ClassDef):
            if _public(statement.name):
                for base in statement.bases:
                    yield from ((line, statement.name) for line in _any_lines(base))
                yield from _public_any(statement.body, in_class=True)
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            name = statement.target.id
            if _public(name):
                yield from ((line, name) for line in _any_lines(statement.annotation))
                if not in_class:  # a class attribute's value is data; a module's may be a type alias
                    alias = (
                        isinstance(statement.annotation, ast.Name) and statement.annotation.id == "TypeAlias"
                    )
                    lines = _any_lines(statement.value, quoted=alias)
                    yield from ((line, name) for line in lines)
        elif isinstance(statement, ast.Assign) and not in_class:
            names = [t.id for t in statement.targets if isinstance(t, ast.Name) and _public(t.id)]
            for name in names:
                yield from ((line, name) for line in _any_lines(statement.value, quoted=False))


def public_any() -> list[str]:
    """Every public ``Any`` of the agent package, as ``path:line name``."""
    found: list[str] = []
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(PACKAGE.parent.parent)
        found += [
            f"{where}:{line} {name}" for line, name in dict.fromkeys(_public_any(tree.body, in_class=False))
        ]
    return found


def test_the_agent_package_has_no_public_any() -> None:
    found = public_any()
    assert not found, "public signatures naming Any (say what flows instead):\n" + "\n".join(found)


def test_the_audit_reads_every_public_module_of_the_package() -> None:
    names = {path.relative_to(PACKAGE).as_posix() for path in _modules()}
    assert {"__init__.py", "react.py", "nodes.py", "compose.py", "recipes/reviewer.py"} <= names


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f(x: Any) -> None: ...", ["1 f"]),
        ("def f(*, x: int = 0) -> typing.Any: ...", ["1 f"]),
        ("async def f(**kw: Any) -> None: ...", ["1 f"]),
        ("class C:\n    x: dict[str, Any]\n    def m(self) -> 'list[Any]': ...", ["2 x", "3 m"]),
        ("class C:\n    def __await__(self) -> Any: ...", ["2 __await__"]),
        ("class C(Generic[Any]): ...", ["1 C"]),
        ("Alias: TypeAlias = 'Callable[[Any], None]'", ["1 Alias"]),
        ("Alias = Callable[[Any], None]", ["1 Alias"]),
        ("T = TypeVar('T', bound=Any)", ["1 T"]),
        # not public, or not a signature
        ("def _f(x: Any) -> Any: ...", []),
        ("class _C:\n    x: Any", []),
        ("class C:\n    _x: Any\n    def _m(self, x: Any) -> None: ...", []),
        ("def f() -> None:\n    x: Any = 1", []),
        ("_Alias = Callable[[Any], None]", []),
        ("class C:\n    note: str = 'Any'", []),
        ("NOTE: str = 'Any'", []),
        ("NOTE = 'Any'", []),
        ("Alias = Callable['Any', None]", ["1 Alias"]),
        (
            "@overload\ndef f(x: int) -> int: ...\n@overload\ndef f(x: str) -> str: ...\n"
            "def f(x: Any) -> Any: return x",
            [],
        ),
    ],
)
def test_the_audit_finds_any_where_a_caller_sees_it(source: str, expected: list[str]) -> None:
    found = [f"{line} {name}" for line, name in _public_any(ast.parse(source).body, in_class=False)]
    assert found == expected
