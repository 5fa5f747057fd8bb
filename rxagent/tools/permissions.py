"""Permission rules: may this call run now, must it be refused, or must a human be asked first?

Every call passes the same gate, however its tool was built (decorated function, schema tool, MCP tool):
the executor asks :meth:`Permissions.decide` before running anything, and again if an interceptor
rewrote the arguments. The order is fixed:

1. **deny** rules — a match refuses the call;
2. **ask** rules — a match suspends the call for a human decision;
3. the tool's own check (``@tool(permission=...)``) — it may allow, deny or ask;
4. **allow** rules — a match lets the call run;
5. the mode's default — ``default`` allows, ``ask_all`` asks, ``deny_all`` refuses.

Decisions are data (:class:`PermissionDecision`: decision, the rule that made it, a reason), so a later
layer can suspend the run, show the question to a person, and resume with their answer.

**What an argument pattern guards.** A plain string pattern is a glob (``fnmatch``: ``*`` also matches
``/``). On an argument whose text is its meaning — ids, names, amounts — it matches the *text*, and guards
nothing else: on a ``str`` argument, ``deny("read_file", path="/etc/*")`` does **not** stop
``/tmp/../etc/passwd``, ``//etc/passwd``, ``/./etc/passwd`` or a symlink into ``/etc``, because their text
differs. A :class:`PathPattern` matches the path the argument names instead: the argument is canonicalised
the way the operating system will resolve it (``..`` and ``.`` segments, repeated or leading slashes,
symlinks, a trailing slash) before the glob is matched, so every spelling of one file meets the same rule::

    Permissions().deny("read_file", path=PathPattern("/etc/*"))
    Permissions(mode="deny_all").allow("read_*", path=PathPattern("/tmp/*"))

**Arguments the tool says are paths.** When the tool's own schema says an argument names files
(:attr:`Tool.path_arguments <rxagent.tools.Tool.path_arguments>`: ``pathlib.Path``, ``Path | None``,
``list[Path]``, ``format: path`` in a hand-written or MCP schema), *every* rule on it matches as a
:class:`PathPattern`: a plain glob there is ``PathPattern(glob)`` made when the rule was made, so relative
arguments and a relative glob are taken from the working directory of that moment (give a
:class:`PathPattern` with its own ``root`` for a tool that resolves relative paths against another
directory). A text glob that cannot be a path pattern (``.`` or ``..`` after a glob character) fails closed
on such an argument. For these arguments, and for any argument a :class:`PathPattern` is given for:

- a list of paths is matched path by path: a deny or ask rule matches when one of them does, an allow rule
  only when there is at least one and it matches every one;
- ``None`` (JSON ``null``) names no path: the rule does not match, as for a left-out argument;
- a value that names no path (a number, an object, text with a NUL character) fails closed: a deny or ask
  rule matches it, an allow rule does not.

A rule looks only at the arguments the call gives: a tool's default for a left-out argument is the tool's
to guard.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import PurePath
from typing import Any, Literal, TypeAlias, cast

from rxagent.context import RuntimeContext
from rxagent.tools._tool import Tool

__all__ = [
    "ArgumentPattern",
    "Decision",
    "PathPattern",
    "PermissionDecision",
    "PermissionMode",
    "PermissionRule",
    "Permissions",
    "canonical_path",
]

Decision: TypeAlias = Literal["allow", "deny", "ask"]
"""Run it, refuse it, or ask a human."""

PermissionMode: TypeAlias = Literal["default", "ask_all", "deny_all"]
"""What happens when no rule and no tool check decided: allow, ask, or refuse."""

_MODE_DECISION: dict[PermissionMode, Decision] = {"default": "allow", "ask_all": "ask", "deny_all": "deny"}

_GLOB_CHARACTERS = frozenset("*?[")


def canonical_path(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> str:
    """The absolute path the operating system opens for ``path`` (taken relative to ``root`` if relative).

    ``..`` and ``.`` segments, repeated and leading slashes and a trailing slash are resolved, and so are
    symlinks, as far as the path exists (``os.path.realpath``): ``/tmp/../etc/passwd``, ``//etc/passwd``,
    ``/./etc/passwd/`` and a link to it all give ``/etc/passwd``. ``~`` is not expanded (the OS does not).

    Raises:
        TypeError: ``path`` is not text (or a path object).
        ValueError: ``path`` contains a NUL character (no OS call accepts one).
    """
    text = os.fspath(path)
    if not isinstance(text, str):  # pyright: ignore[reportUnnecessaryIsInstance] - untyped callers
        raise TypeError(f"a path must be text, got {type(path).__name__}")
    if "\x00" in text:
        raise ValueError("a path cannot contain a NUL character")
    joined = os.path.join(os.fspath(root), text)  # an absolute ``text`` replaces ``root``
    # POSIX lets a system give a leading "//" its own meaning and realpath keeps it on some versions;
    # Linux and macOS treat it as "/", which is what the file is opened as.
    return os.path.realpath("/" + joined.lstrip("/"))


@dataclass(frozen=True, slots=True, init=False)
class PathPattern:
    """A glob over canonical filesystem paths, for an argument that names a file or directory.

    The argument is canonicalised with :func:`canonical_path` before it is matched, so ``..``, ``.``,
    repeated or leading slashes, symlinks and a trailing slash cannot step around the rule. The pattern's
    leading part without glob characters is canonicalised the same way (``/tmp/*`` becomes
    ``/private/tmp/*`` where ``/tmp`` is a link). ``*`` also matches ``/``, and ``DIR/*`` covers ``DIR``
    itself as well as everything below it.

    Relative arguments and a relative pattern are taken from ``root`` (default: the working directory when
    the pattern is made); give the directory the tool resolves relative paths against, as
    :class:`~rxagent.tools.demo.FileReader` does with its own. An empty argument names ``root`` itself (as
    ``Path("")`` is ``.``); ``~`` is an ordinary name (``pathlib`` does not expand it either). A relative
    pattern is anchored at ``root``: ``PathPattern("*.pem")`` is a ``.pem`` file below it (``*`` also
    matches ``/``); ``PathPattern("/*.pem")`` is one anywhere.

    A value that is not a path (not text, or text with a NUL character) fails closed: a ``deny`` or ``ask``
    rule matches it, an ``allow`` rule does not.

    Example:
        >>> pattern = PathPattern("/etc/*")
        >>> pattern.matches("/tmp/../etc/passwd"), pattern.matches("//etc/passwd"), pattern.matches("/tmp/x")
        (True, True, False)

    Raises:
        ValueError: the pattern has ``.`` or ``..`` segments after a glob character (they cannot be
            resolved before the match), or a NUL character.
    """

    pattern: str
    """The glob as given."""
    root: str
    """The canonical directory relative paths are taken from."""
    glob: str
    """The canonical glob the arguments are matched against."""

    def __init__(self, pattern: str, *, root: str | os.PathLike[str] | None = None) -> None:
        base: str = os.path.realpath(os.getcwd() if root is None else os.fspath(root))
        if "\x00" in pattern:
            raise ValueError(f"path pattern {pattern!r}: a path cannot contain a NUL character")
        parts = pattern.split("/")
        first_glob = next(
            (i for i, part in enumerate(parts) if _GLOB_CHARACTERS.intersection(part)), len(parts)
        )
        literal, rest = "/".join(parts[:first_glob]), [part for part in parts[first_glob:] if part]
        if any(part in (".", "..") for part in rest):
            raise ValueError(f"path pattern {pattern!r}: '.' and '..' cannot follow a glob character")
        prefix = canonical_path(literal or ("/" if pattern.startswith("/") else "."), base)
        glob = prefix.rstrip("/") + "/" + "/".join(rest) if rest else prefix
        object.__setattr__(self, "pattern", pattern)
        object.__setattr__(self, "root", base)
        object.__setattr__(self, "glob", glob)

    def matches(self, value: str | PurePath) -> bool:
        """True when ``value``, canonicalised, matches the pattern.

        Raises:
            TypeError, ValueError: ``value`` is not a path (see :func:`canonical_path`).
        """
        path = canonical_path(value, self.root)
        return fnmatchcase(path, self.glob) or fnmatchcase(path.rstrip("/") + "/", self.glob)


ArgumentPattern: TypeAlias = str | PathPattern
"""What a rule matches one argument with: a glob on its text, or a :class:`PathPattern` on the path it
names."""


@dataclass(frozen=True, slots=True)
class PermissionRule:
    """A rule matching tool names (glob patterns such as ``"fs_*"``) and, optionally, arguments.

    Attributes:
        decision: what a match decides.
        tools: glob pattern for the tool name.
        arguments: patterns the given arguments must all match: a glob on the argument's text, or a
            :class:`PathPattern` on the path it names (see the module's notes on what each guards). On an
            argument the tool says names files, a glob matches as ``PathPattern(glob)`` made with the rule.
        when: a predicate over the arguments and the run's context, for anything patterns cannot say.
        reason: why, shown in the decision (and to the model when a call is refused).
    """

    decision: Decision
    tools: str = "*"
    arguments: Mapping[str, ArgumentPattern] = field(default_factory=lambda: {})
    when: Callable[[Mapping[str, Any], RuntimeContext], bool] | None = None
    reason: str = ""
    # Each pattern as a path pattern, made once with the rule (None: a glob that cannot be one).
    _as_paths: Mapping[str, PathPattern | None] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_as_paths", {k: _as_path(v) for k, v in self.arguments.items()})

    def matches(
        self,
        tool_name: str,
        arguments: Mapping[str, Any],
        context: RuntimeContext,
        *,
        paths: Collection[str] = frozenset(),
    ) -> bool:
        """True when this rule applies to the call.

        Args:
            tool_name: the called tool's name.
            arguments: the call's arguments (with presets).
            context: the run's context, for ``when``.
            paths: the arguments that name files (:attr:`Tool.path_arguments
                <rxagent.tools.Tool.path_arguments>`); every pattern on them matches as a path pattern.
        """
        if not fnmatchcase(tool_name, self.tools):
            return False
        for name, pattern in self.arguments.items():
            if name not in arguments:
                return False
            value = arguments[name]
            if isinstance(pattern, str) and name not in paths:
                matched = fnmatchcase(_text(value), pattern)
            else:
                matched = value is not None and self._path_matches(self._as_paths[name], value)
            if not matched:
                return False
        return self.when is None or self.when(arguments, context)

    def _path_matches(self, pattern: PathPattern | None, value: Any) -> bool:
        # Fail closed: what names no path (or a glob that is no path pattern) is refused or asked about,
        # never allowed by a path.
        closed = self.decision != "allow"
        if isinstance(value, list | tuple):
            each = [self._path_matches(pattern, item) for item in cast("Sequence[Any]", value)]
            return any(each) if closed else bool(each) and all(each)
        if pattern is None:
            return closed
        try:
            return pattern.matches(value)
        except (TypeError, ValueError):
            return closed


def _as_path(pattern: ArgumentPattern) -> PathPattern | None:
    if isinstance(pattern, PathPattern):
        return pattern
    try:
        # A text glob that begins with `*` meant "in any folder" (`deny(path="*.pem")`): anchored at the
        # working directory it would let every other .pem file through, so it is anchored at `/`.
        return PathPattern("/" + pattern if pattern.startswith("*") else pattern)
    except (ValueError, OSError):  # OSError: the working directory is gone
        return None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


@dataclass(frozen=True, slots=True)
class PermissionDecision:
    """The gate's answer for one call, and where it came from (``rule``, ``tool`` check, or ``mode``)."""

    decision: Decision
    source: Literal["rule", "tool", "mode"]
    reason: str
    rule: PermissionRule | None = None


_MODE_DECISIONS: dict[PermissionMode, PermissionDecision] = {
    mode: PermissionDecision(decision, "mode", f"permission mode {mode!r}")
    for mode, decision in _MODE_DECISION.items()
}
"""The decision of each mode, made once: a frozen value every call that no rule decides shares."""


@dataclass(frozen=True, slots=True)
class Permissions:
    """An immutable rule set plus a mode. Derive changed sets with :meth:`allow`, :meth:`deny`, :meth:`ask`.

    Example:
        >>> gate = Permissions().deny("delete_*", reason="never").ask("refund", amount="[0-9][0-9][0-9]*")
        >>> [r.decision for r in gate.rules]
        ['deny', 'ask']
    """

    rules: tuple[PermissionRule, ...] = ()
    mode: PermissionMode = "default"

    def _with(
        self, decision: Decision, tools: str, when: Any, reason: str, arguments: Mapping[str, ArgumentPattern]
    ) -> Permissions:
        rule = PermissionRule(decision, tools, dict(arguments), when, reason)
        return replace(self, rules=(*self.rules, rule))

    def allow(
        self,
        tools: str = "*",
        *,
        when: Callable[[Mapping[str, Any], RuntimeContext], bool] | None = None,
        reason: str = "",
        **arguments: ArgumentPattern,
    ) -> Permissions:
        """A copy with an allow rule added (``arguments``: a text glob or a :class:`PathPattern` per name)."""
        return self._with("allow", tools, when, reason, arguments)

    def deny(
        self,
        tools: str = "*",
        *,
        when: Callable[[Mapping[str, Any], RuntimeContext], bool] | None = None,
        reason: str = "",
        **arguments: ArgumentPattern,
    ) -> Permissions:
        """A copy with a deny rule added."""
        return self._with("deny", tools, when, reason, arguments)

    def ask(
        self,
        tools: str = "*",
        *,
        when: Callable[[Mapping[str, Any], RuntimeContext], bool] | None = None,
        reason: str = "",
        **arguments: ArgumentPattern,
    ) -> Permissions:
        """A copy with an ask rule added (``arguments``: a text glob or a :class:`PathPattern` per name)."""
        return self._with("ask", tools, when, reason, arguments)

    def with_mode(self, mode: PermissionMode) -> Permissions:
        """A copy with another mode."""
        return replace(self, mode=mode)

    def decide(self, tool: Tool, arguments: Mapping[str, Any], context: RuntimeContext) -> PermissionDecision:
        """Decide one call: deny rules, ask rules, the tool's own check, allow rules, then the mode.

        Rules on the tool's :attr:`~rxagent.tools.Tool.path_arguments` match the paths those name.
        """
        paths = tool.path_arguments
        for wanted in ("deny", "ask"):
            for rule in self.rules:
                if rule.decision == wanted and rule.matches(tool.name, arguments, context, paths=paths):
                    return PermissionDecision(
                        wanted, "rule", rule.reason or f"{wanted} rule for {rule.tools}", rule
                    )
        check = tool.traits.permission
        if check is not None:
            answer = check(arguments, context)
            if answer is not None:
                return PermissionDecision(answer, "tool", f"tool {tool.name!r} decided {answer}")
        for rule in self.rules:
            if rule.decision == "allow" and rule.matches(tool.name, arguments, context, paths=paths):
                return PermissionDecision(
                    "allow", "rule", rule.reason or f"allow rule for {rule.tools}", rule
                )
        return _MODE_DECISIONS[self.mode]
