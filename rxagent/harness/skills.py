"""Skills: folders of instructions the agent loads when a task needs them (the Agent Skills format).

A skill is a folder holding a ``SKILL.md`` that starts with YAML front matter::

    pdf-forms/
      SKILL.md              ---
      references/forms.md   name: pdf-forms
                            description: Fill in PDF forms. Use when the user sends a form to fill.
                            ---
                            # How to fill a form
                            1. Read `references/forms.md` ...

:func:`load_skills` finds the skills in the folders it is given (each sub-folder holding a ``SKILL.md``)
and checks their front matter as the Agent Skills specification says: ``name`` (1 to 64 lowercase
letters, digits and single hyphens, not at either end, the same as the folder's name) and
``description`` (1 to 1024 characters) are required; other keys (``license``, ``metadata``, …) are kept.

**Progressive disclosure.** The system prompt lists each skill in one line, its name and description;
that line is all an unused skill costs. ``use_skill(name)`` returns the body as the tool's result, so it
enters the conversation when the model asks for it, with the paths of the skill's other files. Those are
readable through the workspace's file tools once the harness mounts :meth:`SkillSet.mounts` (read-only,
``skills/<name>/…``).

Bad input is refused when the skills are loaded, each error naming the file: a missing folder, a
``SKILL.md`` without front matter or with front matter that does not close, YAML that does not parse or
is not a mapping, a missing or malformed ``name`` or ``description``, a name that differs from its folder,
two skills with one name, a file that is not UTF-8 or is over :data:`MAX_SKILL_BYTES`. A ``use_skill``
call with an unknown name gets a plain message listing the skills there are.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, cast

import yaml
from pydantic import Field

from rxagent.harness._part import HarnessPart
from rxagent.tools import tool

__all__ = [
    "MAX_SKILL_BYTES",
    "SKILLS_PREFIX",
    "SKILL_FILE",
    "Skill",
    "SkillError",
    "SkillSet",
    "load_skills",
    "read_skill",
    "skills_part",
]

SKILL_FILE = "SKILL.md"
"""The file that makes a folder a skill."""

MAX_SKILL_BYTES = 256_000
"""The largest ``SKILL.md`` read."""

SKILLS_PREFIX = "skills"
"""Where the skills' folders appear to the file tools: ``skills/<name>/…``."""

_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_MAX_NAME = 64
_MAX_DESCRIPTION = 1024
_MAX_LISTED_FILES = 50


class SkillError(ValueError):
    """A skill that cannot be loaded; the message names its file and what is wrong.

    Attributes:
        path: the ``SKILL.md`` (or the folder) at fault.
    """

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path


@dataclass(frozen=True, slots=True)
class Skill:
    """One loaded skill.

    Attributes:
        name: its name (the same as its folder's).
        description: what it does and when to use it, in one line.
        folder: the folder holding it.
        body: the instructions after the front matter.
        front_matter: every key of the front matter (``name`` and ``description`` included).
    """

    name: str
    description: str
    folder: Path
    body: str
    front_matter: Mapping[str, object] = field(default_factory=lambda: {})

    def files(self) -> list[str]:
        """The skill's other files, as paths relative to its folder (sorted; hidden ones left out)."""
        found: list[str] = []
        for root, folders, names in os.walk(self.folder):
            folders[:] = sorted(f for f in folders if not f.startswith("."))
            base = Path(root).relative_to(self.folder)
            found += [
                (base / n).as_posix()
                for n in names
                if not n.startswith(".") and (base / n) != Path(SKILL_FILE)
            ]
        return sorted(found)


def _front_matter(path: Path, text: str) -> tuple[dict[str, object], str]:
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise SkillError(path, "has no front matter: it must begin with a line '---', then YAML, then '---'")
    for index in range(1, len(lines)):
        if lines[index].strip() in ("---", "..."):
            break
    else:
        raise SkillError(path, "its front matter is not closed: no line '---' after the opening one")
    try:
        data: object = yaml.safe_load("".join(lines[1:index]))
    except yaml.YAMLError as error:
        problem = " ".join(str(error).split())
        raise SkillError(path, f"its front matter is not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise SkillError(path, f"its front matter must be a mapping of keys, not {type(data).__name__}")
    mapping = cast("dict[object, object]", data)
    matter = {str(key): value for key, value in mapping.items()}
    return matter, "".join(lines[index + 1 :]).strip()


def read_skill(folder: str | os.PathLike[str]) -> Skill:
    """The skill in ``folder`` (its ``SKILL.md``, checked).

    Raises:
        SkillError: the folder holds no readable, well-formed skill (the message says why).
    """
    where = Path(folder)
    path = where / SKILL_FILE
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_SKILL_BYTES + 1)
    except OSError as error:
        raise SkillError(path, f"cannot be read: {error.strerror or error}") from None
    if len(raw) > MAX_SKILL_BYTES:
        raise SkillError(path, f"is over {MAX_SKILL_BYTES:,} bytes: move the details into other files")
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        raise SkillError(path, f"is not UTF-8 text ({error.reason} at byte {error.start})") from None
    matter, body = _front_matter(path, text)
    name, description = matter.get("name"), matter.get("description")
    if name is None:
        raise SkillError(path, "its front matter has no 'name'")
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > _MAX_NAME:
        raise SkillError(
            path,
            f"its name {name!r} is not a skill name: 1 to {_MAX_NAME} lowercase letters, digits and single "
            "hyphens, not at either end",
        )
    if name != where.name:
        raise SkillError(path, f"its name {name!r} must be the name of its folder, {where.name!r}")
    if description is None:
        raise SkillError(path, "its front matter has no 'description'")
    if not isinstance(description, str) or not description.strip():
        raise SkillError(path, "its 'description' must be text saying what the skill does and when to use it")
    line = " ".join(description.split())
    if len(line) > _MAX_DESCRIPTION:
        raise SkillError(path, f"its description is {len(line):,} characters, over {_MAX_DESCRIPTION:,}")
    return Skill(name, line, where.resolve(), body, matter)


def load_skills(dirs: Iterable[str | os.PathLike[str]]) -> SkillSet:
    """The skills found in ``dirs``: every sub-folder holding a ``SKILL.md`` (folders without one, and
    hidden ones, are left alone).

    Raises:
        SkillError: a folder of ``dirs`` that does not exist, a skill that cannot be loaded, or two skills
            with the same name (the error names both files).
    """
    skills: dict[str, Skill] = {}
    for entry in dirs:
        directory = Path(entry)
        if not directory.is_dir():
            raise SkillError(directory, "is not a folder of skills (it does not exist, or is a file)")
        for folder in sorted(directory.iterdir()):
            if folder.name.startswith(".") or not (folder / SKILL_FILE).is_file():
                continue
            skill = read_skill(folder)
            other = skills.get(skill.name)
            if other is not None:
                raise SkillError(
                    folder / SKILL_FILE,
                    f"the name {skill.name!r} is taken already by {other.folder / SKILL_FILE}: names must "
                    "differ",
                )
            skills[skill.name] = skill
    return SkillSet(skills.values())


class SkillSet:
    """Loaded skills: the system prompt's list of them, the ``use_skill`` tool, and their folders.

    Args:
        skills: the skills (distinct names).
        prefix: where their folders appear to the file tools (``skills/<name>/…``).

    Raises:
        ValueError: two skills with one name.
    """

    def __init__(self, skills: Iterable[Skill], *, prefix: str = SKILLS_PREFIX) -> None:
        self.skills: tuple[Skill, ...] = tuple(skills)
        names = [s.name for s in self.skills]
        if len(set(names)) != len(names):
            raise ValueError(f"skills must have distinct names, got {names}")
        self.prefix = prefix.strip("/")
        self._by_name = {s.name: s for s in self.skills}

    def __len__(self) -> int:
        return len(self.skills)

    def get(self, name: str) -> Skill | None:
        """The skill called ``name``, if there is one."""
        return self._by_name.get(name)

    def instructions(self) -> str:
        """The system prompt's section: a line saying how to use skills, then one line per skill, its name
        and description ("" when there is no skill)."""
        if not self.skills:
            return ""
        lines = [
            "Skills (instructions for particular tasks): before you do a task a skill covers, call use_skill "
            f"with its name to read it; its files are then readable under {self.prefix}/<name>/."
        ]
        lines += [f"- {s.name}: {s.description}" for s in self.skills]
        return "\n".join(lines)

    def mounts(self) -> dict[str, Path]:
        """The skills' folders by the path the file tools show them under (``skills/<name>``), to mount
        read-only in the workspace."""
        return {f"{self.prefix}/{s.name}": s.folder for s in self.skills}

    @tool(read_only=True, concurrency_safe=True)
    def use_skill(
        self,
        name: Annotated[
            str, Field(description="the skill's name, as the system prompt lists it", max_length=64)
        ],
    ) -> str:
        """Read a skill's instructions before you do a task it covers."""
        skill = self._by_name.get(name)
        if skill is None:
            known = ", ".join(s.name for s in self.skills) or "none"
            raise ValueError(f"there is no skill {name!r}; the skills are: {known}")
        where = f"{self.prefix}/{skill.name}"
        parts = [
            f"# Skill: {skill.name}",
            skill.body or "(the skill has no instructions beyond its description)",
        ]
        files = skill.files()
        if files:
            listed = [f"- {where}/{f}" for f in files[:_MAX_LISTED_FILES]]
            if len(files) > _MAX_LISTED_FILES:
                listed.append(f"- … and {len(files) - _MAX_LISTED_FILES} more under {where}/")
            parts.append(
                "The skill's files, readable with the file tools (paths as given):\n" + "\n".join(listed)
            )
        return "\n\n".join(parts)

    def part(self) -> HarnessPart:
        """The skills as a harness part: ``use_skill`` and the system prompt's list (no tool and no
        section when there is no skill)."""
        if not self.skills:
            return HarnessPart("skills")
        return HarnessPart("skills", tools=(self.use_skill,), instructions=self.instructions())


def skills_part(dirs: Iterable[str | os.PathLike[str]] | SkillSet) -> HarnessPart:
    """The skills in ``dirs`` (or a loaded :class:`SkillSet`) as a harness part (see :meth:`SkillSet.part`;
    the file tools see their folders through :meth:`SkillSet.mounts`).

    Raises:
        SkillError: as :func:`load_skills`.

    Example:
        >>> part = skills_part([])
        >>> part.tools, part.instructions
        ((), '')
    """
    loaded = dirs if isinstance(dirs, SkillSet) else load_skills(dirs)
    return loaded.part()
