"""Built-in demo tools for the command line and the notebooks: a calculator, a clock, a file reader.

They are real tools (the file reader cannot leave its directory; the calculator evaluates arithmetic
only, never Python, and refuses a result too large *before* computing it), small enough to read in one
sitting as examples of ``@tool``. Each is read-only (``read_only=True``): a process that dies inside one
leaves no call to reconcile, the next run simply runs it again.
"""

from __future__ import annotations

import ast
import math
import operator
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field

from rxagent.tools._tool import Tool, tool
from rxagent.tools.permissions import canonical_path

__all__ = ["MAX_RESULT_DIGITS", "FileReader", "calculator", "clock", "demo_tools"]

MAX_RESULT_DIGITS = 1000
"""The calculator refuses integer results with more digits than this (``9 ** 999`` has 954)."""

_MAX_RESULT_BITS = math.ceil(MAX_RESULT_DIGITS * math.log2(10))

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: operator.mod,
    ast.Pow: lambda a, b: a**b,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            _refuse_huge_power(left, right)
        try:
            value = _BINARY[type(node.op)](left, right)
        except OverflowError:  # float arithmetic, or a huge int turned into a float
            raise ValueError("the result is too large") from None
        return _bounded(value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    raise ValueError(f"not arithmetic: {ast.dump(node)[:80]}")


def _refuse_huge_power(base: float, exponent: float) -> None:
    # Only an integer power can take unbounded time and memory (a float one overflows at once), and its
    # size is known before it is computed: ``exponent * log10(|base|)`` digits. Python cannot interrupt
    # ``int.__pow__`` once it runs, and neither can a tool timeout (the thread runs on), so refuse first.
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        digits = exponent * math.log10(abs(base))
        if digits > MAX_RESULT_DIGITS:
            raise ValueError(
                f"the result would have about {digits:.3g} digits (the limit is {MAX_RESULT_DIGITS})"
            )


def _bounded(value: float | complex) -> float:
    if isinstance(value, complex):  # e.g. (-8) ** 0.5
        raise ValueError("the result is not a real number")
    if isinstance(value, int) and value.bit_length() > _MAX_RESULT_BITS:
        raise ValueError(f"the result has more than {MAX_RESULT_DIGITS} digits")
    return value


@tool(concurrency_safe=True, read_only=True)
def calculator(
    expression: Annotated[
        str, Field(description="arithmetic such as '17 * 23' or '(2 + 3) ** 2'", max_length=200)
    ],
) -> str:
    """Evaluate an arithmetic expression exactly: + - * / // % ** and parentheses.

    Returns the result as text.
    """
    try:
        tree = ast.parse(expression.replace("^", "**").replace("×", "*"), mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot read {expression!r} as arithmetic") from None
    value = _evaluate(tree)
    if isinstance(value, float) and value.is_integer() and math.isfinite(value):
        value = int(value)
    return str(value)


@tool(concurrency_safe=True, read_only=True)
def clock(
    timezone: Annotated[
        str, Field(description="an IANA time zone such as 'Europe/Oslo'", max_length=64)
    ] = "UTC",
) -> str:
    """The current date and time in a time zone."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {timezone!r}") from None
    return datetime.now(zone).strftime("%Y-%m-%d %H:%M:%S %Z")


class FileReader:
    """Reads text files inside one directory, and only there (no ``..``, no symlinks out, no absolute paths).

    Register an instance: ``toolkit.register(FileReader("docs"))``.
    """

    def __init__(self, root: str | Path, *, max_bytes: int = 64_000) -> None:
        self.root = Path(os.path.realpath(root))
        if not self.root.is_dir():
            raise ValueError(f"{self.root} is not a directory")
        self.max_bytes = max_bytes

    @tool(concurrency_safe=True, read_only=True)
    def read_file(
        self,
        path: Annotated[str, Field(description="a path relative to the allowed directory", max_length=300)],
    ) -> str:
        """Read a text file from the allowed directory (large files are cut off)."""
        target = Path(canonical_path(path, self.root))
        if not target.is_relative_to(self.root):
            raise PermissionError(f"{path!r} is outside the allowed directory")
        if not target.is_file():
            available = sorted(p.name for p in self.root.iterdir() if p.is_file())[:20]
            raise FileNotFoundError(f"no file {path!r}; files here: {', '.join(available) or 'none'}")
        with target.open("rb") as file:  # read no more than is kept: a huge file costs no time
            data = file.read(self.max_bytes + 1)
        text = data[: self.max_bytes].decode("utf-8", errors="replace")
        return text if len(data) <= self.max_bytes else text + "\n[… cut off]"


def demo_tools(names: list[str], *, files_root: str | Path = ".") -> list[Tool]:
    """The named demo tools (``calculator``, ``clock``, ``files``), for ``rxagent run --tools``."""
    available: dict[str, Callable[[], Tool]] = {
        "calculator": lambda: calculator,
        "clock": lambda: clock,
        "files": lambda: FileReader(files_root).read_file,
    }
    unknown = [n for n in names if n not in available]
    if unknown:
        raise ValueError(f"unknown demo tool(s) {unknown}; choose from {sorted(available)}")
    return [available[name]() for name in names]
