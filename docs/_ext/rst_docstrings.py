"""A griffe extension: rxagent's docstrings, written in reStructuredText habits, read as Markdown.

The docstrings are Google style (what griffe parses into Args/Returns/... sections), but their running
text uses a few reStructuredText constructs that Markdown would show garbled. mkdocstrings renders
Markdown, so before griffe parses a docstring this rewrites, in place and only for the site:

- a role, ``:class:`~rxagent.state.AgentState``` (``:func:``, ``:meth:``, ``:mod:``, ``:attr:``,
  ``:data:``, ``:exc:``, ``:obj:``), into a cross-reference to the object it names, resolved the way Sphinx
  does (a dotted path, or a name in the scope of the documented object: its members, its module's names).
  A name that resolves outside rxagent (``asyncio.Task``) stays code: the build loads no other project's
  inventory (no network). One inside rxagent that resolves nowhere becomes a reference to that name
  anyway, so the strict build fails on it, naming it: a broken cross-reference is an error;
- a literal block (a paragraph ending ``::`` and the indented block after it) into a fenced code block;
- a simple table (columns ruled with ``=====  =====``) into a Markdown table;
- a definition list (a term line, the indented definition under it) into Markdown's definition list.

Nothing here changes the package: the docstrings in ``rxagent/`` stay as ``help()`` and editors show them.
"""

from __future__ import annotations

import builtins
import re
import textwrap
from typing import Any

import griffe

__all__ = ["RstDocstrings", "rst_to_markdown"]

_ROLE = re.compile(
    r":(?:class|func|meth|mod|attr|data|exc|obj):`(~?)\.?([^`<]+?)(?:\s*<([^>]+)>)?`", re.DOTALL
)
_BORDER = re.compile(r"^(\s*)(=+)((?:\s+=+)+)\s*$")
_GOOGLE_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_UNDERLINE = re.compile(r"^\s*(?:=+|-+|~+)\s*$")
_SHARED_ARGUMENTS = re.compile(r"^(\s+)(\w+(?:,\s*\w+)+):\s(.*)$")
_LIFECYCLE_ITEM = re.compile(r"^(\s+)((?:[a-z]|``[a-z])[^:.;,]{0,30}?):\s(.*)$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]\s|\d+[.)]\s|>>>|\.\.\.\s)")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _public(obj: griffe.Object, full: str) -> str | None:
    """Where the site documents ``full``: its canonical path, or, for a name defined in a private module
    (``rxagent.operators._fold_message.fold_message``), the public package's name of that name; None when
    the site documents nothing by that name."""
    parts = full.split(".")
    private = [i for i, part in enumerate(parts) if part.startswith("_") and not part.startswith("__")]
    if not private:
        return full
    try:
        package = obj.modules_collection.get_member(".".join(parts[: private[0]]))
    except KeyError:
        return None
    name = parts[-1]
    return f"{package.path}.{name}" if name in package.members and name in (package.exports or ()) else None


def _canonical(obj: griffe.Object, full: str) -> str | None:
    """``full``'s path as the site documents it when it is in ``obj``'s package (None: not documented),
    else ``full``."""
    if full != obj.package.name and not full.startswith(f"{obj.package.name}."):
        return full
    try:
        found = obj.modules_collection.get_member(full)
    except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        owner, _, name = full.rpartition(".")
        try:  # a member a class inherits: documented on the class that inherits it
            cls = obj.modules_collection.get_member(owner)
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return full
        if cls.is_class and name in cls.all_members:
            return f"{cls.canonical_path}.{name}"
        return full
    return _public(obj, found.canonical_path)


def _resolve(obj: griffe.Object, target: str) -> str | None:
    """The path ``target`` names when read in ``obj``'s scope (as the site documents it), ``""`` when that
    is nothing the site documents, or None when nothing in scope has the name."""
    head, _, rest = target.partition(".")
    if head == obj.package.name:
        return _canonical(obj, target) or ""
    scope: griffe.Object | None = obj
    while scope is not None:
        try:
            found = scope.resolve(head)
        except griffe.NameResolutionError:
            found = None
            if scope.is_class and head in scope.all_members:  # inherited
                found = f"{scope.canonical_path}.{head}"
        if found is not None:
            return _canonical(obj, f"{found}.{rest}" if rest else found) or ""
        scope = scope.parent
    return None


def _roles(text: str, obj: griffe.Object) -> str:
    """Every role of ``text`` as a cross-reference (see the module)."""
    package = obj.package.name

    def link(match: re.Match[str]) -> str:
        short, written, explicit = match.group(1) == "~", match.group(2).strip(), match.group(3)
        target = " ".join((explicit or written).split()).removesuffix("()")
        shown = " ".join(written.split())
        if explicit is None and short:
            shown = shown.rsplit(".", 1)[-1]
        resolved = _resolve(obj, target)
        if resolved == "":  # defined in a private module: not on the site
            return f"`{shown}`"
        if resolved is None:
            # Outside the package (a builtin, the standard library) or a name nothing defines: the
            # former stays code, the latter fails the strict build as a reference to what it says.
            head = target.partition(".")[0]
            outside = ("." in target and head != package) or hasattr(builtins, head)
            return f"`{shown}`" if outside else f"[`{shown}`][{target}]"
        if not resolved.startswith(f"{package}.") and resolved != package:
            return f"`{shown}`"
        return f"[`{shown}`][{resolved}]"

    return _ROLE.sub(link, text)


def _literal_blocks(lines: list[str]) -> list[str]:
    """``text::`` (or a lone ``::``) and the indented block under it: ``text:`` and a fenced block."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.rstrip().endswith("::") or line.strip().startswith(".."):
            out.append(line)
            i += 1
            continue
        base = _indent(line)
        head = line.rstrip()[:-2].rstrip()
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j >= len(lines) or _indent(lines[j]) <= base:
            out.append(line)
            i += 1
            continue
        block: list[str] = []
        while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > base):
            block.append(lines[j])
            j += 1
        while block and not block[-1].strip():
            block.pop()
        if head.strip():
            out.extend([f"{head}:", ""])
        pad = " " * base
        out.append(f"{pad}```")
        code = textwrap.dedent("\n".join(block)).split("\n")
        out.extend(pad + text if text.strip() else "" for text in code)
        out.extend([f"{pad}```", ""])
        i = j
    return out


def _cells(line: str, starts: list[int]) -> list[str]:
    """The cells of a simple table's row, cut where the columns' rules start."""
    ends: list[int | None] = [*starts[1:], None]
    return [line[start:end].strip() for start, end in zip(starts, ends, strict=True)]


def _row(pad: str, cells: list[str]) -> str:
    return pad + "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _closes_table(lines: list[str], j: int) -> bool:
    """Whether line ``j`` is a rule that ends its table (one under a header row is followed by rows)."""
    return bool(_BORDER.match(lines[j])) and (j + 1 >= len(lines) or not lines[j + 1].strip())


def _tables(lines: list[str]) -> list[str]:
    """Simple tables (``====  ====`` rules, a header row between the first two when there are three) as
    Markdown tables; a row whose first cell is empty continues the row above."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        border = _BORDER.match(lines[i])
        if border is None:
            out.append(lines[i])
            i += 1
            continue
        rule = lines[i]
        starts = [m.start() for m in re.finditer(r"=+", rule)]
        pad = border.group(1)
        rows: list[list[str]] = []
        header: list[str] | None = None
        j = i + 1
        while j < len(lines) and not _closes_table(lines, j):
            if _BORDER.match(lines[j]):  # the rule under a header row
                header, rows = (rows[0] if rows else None), []
            elif lines[j].strip():
                cells = _cells(lines[j], starts)
                if rows and not cells[0]:
                    rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
                else:
                    rows.append(cells)
            j += 1
        header = header or [""] * len(starts)
        out.extend([_row(pad, header), pad + "|" + "---|" * len(starts), *(_row(pad, r) for r in rows)])
        i = j + 1
    return out


def _definitions(lines: list[str]) -> list[str]:
    """A term (a line after a blank line, a heading or another definition) and the more indented lines
    under it as Markdown's definition list (``term`` then ``:   definition``). Section titles
    (``Args:``), list items and doctests are not terms."""
    out: list[str] = []
    i = 0
    fence = False
    after_definition = False
    while i < len(lines):
        line = lines[i]
        if line.strip().startswith("```"):
            fence = not fence
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        is_term = (
            not fence
            and line.strip()
            and (i == 0 or after_definition or not lines[i - 1].strip() or _UNDERLINE.match(lines[i - 1]))
            and nxt.strip()
            and _indent(nxt) > _indent(line)
            and not line.rstrip().endswith(":")
            and not _GOOGLE_SECTION.match(line)
            and not _LIST_ITEM.match(line)
            and not line.lstrip().startswith("|")
        )
        if not is_term:
            out.append(line)
            after_definition = False
            i += 1
            continue
        base = _indent(line)
        j = i + 1
        body: list[str] = []
        while j < len(lines) and lines[j].strip() and _indent(lines[j]) > base:
            body.append(lines[j])
            j += 1
        pad = " " * base
        dedented = textwrap.dedent("\n".join(body)).split("\n")
        out.extend([line, f"{pad}:   {dedented[0]}", *(f"{pad}    {rest}" for rest in dedented[1:])])
        after_definition = True
        i = j
    return out


def _shared_arguments(lines: list[str]) -> list[str]:
    """``a, b, c: what they are`` in an Args section: one entry per name, as griffe parses them; and an
    ``Example:`` section read as the ``Examples:`` section it is (its doctests shown as code)."""
    out: list[str] = []
    in_args = False
    for line in lines:
        if line.rstrip() == "Example:":  # Napoleon's singular; griffe parses doctests under "Examples:"
            line = "Examples:"
        if _GOOGLE_SECTION.match(line):
            in_args = line.strip() in ("Args:", "Arguments:", "Parameters:")
        elif line.strip() and _indent(line) == 0:
            in_args = False
        shared = _SHARED_ARGUMENTS.match(line) if in_args else None
        if shared is None:
            out.append(line)
            continue
        pad, names, text = shared.groups()
        out.extend(f"{pad}{name.strip()}: {text}" for name in names.split(","))
    return out


def _lifecycle(lines: list[str]) -> list[str]:
    """A ``Lifecycle:`` section's ``complete: …``, ``error: …``, ``cancel: …`` lines as a list (griffe
    shows the section as an admonition, where they would run together into one paragraph)."""
    out: list[str] = []
    inside = False
    for line in lines:
        if _GOOGLE_SECTION.match(line) and _indent(line) == 0:
            inside = line.strip() == "Lifecycle:"
        elif line.strip() and _indent(line) == 0:
            inside = False
        elif inside and (item := _LIFECYCLE_ITEM.match(line)):
            pad, key, text = item.groups()
            line = f"{pad}- **{key}**: {text}"
        out.append(line)
    return out


def rst_to_markdown(text: str, obj: griffe.Object) -> str:
    """``text``, a docstring of ``obj``, with its reStructuredText constructs written as Markdown."""
    lines = _shared_arguments(text.split("\n"))
    lines = _lifecycle(lines)
    lines = _literal_blocks(lines)
    lines = _tables(lines)
    lines = _definitions(lines)
    return _roles("\n".join(lines), obj)


def _public_modules(module: griffe.Module) -> list[griffe.Module]:
    """``module`` and its public submodules, packages first (a package's names before a module's)."""
    found = [module]
    for sub in module.modules.values():
        if not sub.is_alias and not sub.name.startswith("_"):
            found.extend(_public_modules(sub))
    return sorted(found, key=lambda m: not m.is_init_module)


def _document_exports_once(module: griffe.Module, claimed: set[str]) -> None:
    """Each name a module re-exports is documented once: at the first facade that exports it from inside
    its own package (``rxagent.agent.Agent``, ``rxagent.agent.loop.Reason``: the defining module then
    leaves it out), else where it is defined, the module's docstring linking there."""
    home = module.path if module.is_init_module else module.parent.path if module.parent else ""
    elsewhere: list[str] = []
    for name in module.exports or ():
        member = module.members.get(name)
        if member is None or not member.is_alias:
            continue
        try:
            target = member.final_target
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
        if module.parent is not None and target.path.startswith(f"{home}.") and target.path not in claimed:
            claimed.add(target.path)
            target.public = False  # documented here, at the name users import
        else:
            member.public = False
            elsewhere.append(f"[`{name}`][{_public(module, target.path) or target.path}]")
    if elsewhere and module.docstring is not None:
        module.docstring.value += (
            "\n\nAlso importable from here, documented elsewhere: " + ", ".join(elsewhere) + "."
        )


class RstDocstrings(griffe.Extension):
    """Rewrites every docstring of the loaded package once its object tree is complete, and documents
    each exported name once (see :func:`_document_exports_once`)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        claimed: set[str] = set()
        for module in _public_modules(pkg):
            _document_exports_once(module, claimed)
        self.on_object(obj=pkg, loader=loader)  # griffe fires on_object for the package's members only

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None and not obj.is_alias:
            obj.docstring.value = rst_to_markdown(obj.docstring.value, obj)
