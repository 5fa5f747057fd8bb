"""Skills: one line of the system prompt per skill, the body in the conversation only after ``use_skill``,
the skill's files offered to the file tools through read-only mounts.

Bad inputs tried (each refused at load with an error naming the file): a folder of skills that does not
exist, a ``SKILL.md`` with no front matter, front matter that does not close, YAML that does not parse,
front matter that is a list, no ``name``, a name that is not a skill name, a name that differs from its
folder, no ``description``, an empty one, one over 1024 characters, two skills with one name, a file that
is not UTF-8, a file over the size limit; and ``use_skill`` with an unknown name (a plain message listing
the skills there are).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.events import ToolResult
from rxagent.harness import SkillError, compose_parts, load_skills, skills_part
from rxagent.harness.skills import MAX_SKILL_BYTES
from rxagent.operators import to_list

from .agents import agent_of

FORMS_BODY = "# Filling a form\n\n1. Read `references/fields.md` first.\n2. Fill every field."


def make_skill(
    root: Path, name: str, description: str, body: str = "Do it well.", *, files: dict[str, str] | None = None
) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n{body}\n")
    for relative, text in (files or {}).items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    return folder


def read_mounted(mounts: dict[str, Path], virtual: str) -> str:
    """What a file tool given ``mounts`` reads at ``virtual``: under the mount the path starts with."""
    for prefix, folder in mounts.items():
        if virtual.startswith(prefix + "/"):
            return (folder / virtual.removeprefix(prefix + "/")).read_text()
    raise FileNotFoundError(virtual)


def test_the_system_prompt_grows_by_exactly_one_line_per_skill(tmp_path: Path) -> None:
    descriptions = {
        "pdf-forms": "Fill in PDF forms. Use when the user sends a form.",
        "release-notes": "Turn a list of changes\n  into release notes.",  # folded onto one line
        "sql-review": "Review SQL for injection and missing indexes.",
    }
    prompts: list[list[str]] = []
    for name, description in descriptions.items():
        make_skill(tmp_path / "skills", name, description, body=f"SECRET BODY OF {name}")
        part = skills_part([tmp_path / "skills"])
        prompts.append(compose_parts([part], "You are careful.").instructions.splitlines())
        assert len(part.tools) == 1
        assert f"- {name}: {' '.join(description.split())}" in prompts[-1]
    assert [len(b) - len(a) for a, b in itertools.pairwise(prompts)] == [1, 1]
    assert not any("SECRET BODY" in line for line in prompts[-1])  # only names and descriptions
    assert compose_parts([skills_part([])], "You are careful.").instructions == "You are careful."


async def test_the_body_enters_the_conversation_only_after_use_skill(tmp_path: Path) -> None:
    fields = "Name: the applicant's full name.\nDate: ISO 8601.\n"
    make_skill(
        tmp_path / "skills",
        "pdf-forms",
        "Fill in PDF forms.",
        FORMS_BODY,
        files={"references/fields.md": fields, "scripts/fill.py": "print('fill')\n", ".hidden": "x"},
    )
    make_skill(tmp_path / "skills", "sql-review", "Review SQL.", "SQL BODY")
    skills = load_skills([tmp_path / "skills"])
    use = ScriptedResponse(tool_calls=[ScriptedToolCall("use_skill", {"name": "pdf-forms"}, id="s1")])
    model = ScriptedModel(["Which form?", use, "Filled."])
    agent = agent_of(model, [skills.part()])

    await agent.call("Hello.")
    await agent.call("Fill in this form.")
    before, after = model.requests[1], model.requests[2]
    assert not any(FORMS_BODY in m.text for r in model.requests[:2] for m in r.messages)
    [tool_message] = [m for m in after.messages if m.role == "tool"]
    text = tool_message.tool_results[0].text
    assert FORMS_BODY in text
    assert "SQL BODY" not in text  # only the skill asked for
    assert "- skills/pdf-forms/references/fields.md" in text
    assert "- skills/pdf-forms/scripts/fill.py" in text
    assert ".hidden" not in text
    assert "SKILL.md" not in text
    assert len(after.messages) > len(before.messages)

    # The file tools read the listed paths through the mounts: read-only folders by virtual path.
    mounts = skills.mounts()
    assert set(mounts) == {"skills/pdf-forms", "skills/sql-review"}
    assert read_mounted(mounts, "skills/pdf-forms/references/fields.md") == fields
    assert read_mounted(mounts, "skills/pdf-forms/scripts/fill.py") == "print('fill')\n"


async def test_an_unknown_skill_gets_a_plain_message_naming_the_skills(tmp_path: Path) -> None:
    make_skill(tmp_path / "skills", "pdf-forms", "Fill in PDF forms.")
    make_skill(tmp_path / "skills", "sql-review", "Review SQL.")
    use = ScriptedResponse(tool_calls=[ScriptedToolCall("use_skill", {"name": "excel"}, id="s1")])
    agent = agent_of(ScriptedModel([use, "No such skill."]), [skills_part([tmp_path / "skills"])])
    [result] = [e for e in await to_list(agent.stream_events("Use excel.")) if isinstance(e, ToolResult)]
    assert result.result.status == "error"
    assert "there is no skill 'excel'; the skills are: pdf-forms, sql-review" in result.result.text


def test_folders_without_a_skill_file_and_hidden_folders_are_left_alone(tmp_path: Path) -> None:
    make_skill(tmp_path / "skills", "pdf-forms", "Fill in PDF forms.")
    (tmp_path / "skills" / "assets").mkdir()
    (tmp_path / "skills" / "README.md").write_text("not a skill")
    make_skill(tmp_path / "skills", ".draft", "Not yet.")
    assert [s.name for s in load_skills([tmp_path / "skills"]).skills] == ["pdf-forms"]


BAD_FILES: dict[str, tuple[bytes, str]] = {
    "no front matter": (b"# Just a heading\n", "has no front matter"),
    "unclosed": (b"---\nname: broken\ndescription: x\n", "not closed"),
    "bad yaml": (b"---\nname: [broken\n---\nbody\n", "not valid YAML"),
    "a list": (b"---\n- a\n- b\n---\n", "must be a mapping"),
    "no name": (b"---\ndescription: Does things.\n---\n", "has no 'name'"),
    "bad name": (b"---\nname: Broken--Name\ndescription: x\n---\n", "is not a skill name"),
    "other name": (b"---\nname: other\ndescription: x\n---\n", "must be the name of its folder, 'broken'"),
    "no description": (b"---\nname: broken\n---\n", "has no 'description'"),
    "empty description": (b"---\nname: broken\ndescription: '  '\n---\n", "'description' must be text"),
    "long description": (b"---\nname: broken\ndescription: " + b"x" * 1025 + b"\n---\n", "over 1,024"),
    "not utf-8": (b"---\nname: broken\ndescription: caf\xe9\n---\n", "is not UTF-8"),
    "too large": (b"---\nname: broken\ndescription: x\n---\n" + b"x" * MAX_SKILL_BYTES, "is over"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_malformed_skill_is_refused_at_load_naming_its_file(tmp_path: Path, case: str) -> None:
    content, problem = BAD_FILES[case]
    folder = tmp_path / "skills" / "broken"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_bytes(content)
    with pytest.raises(SkillError) as caught:
        load_skills([tmp_path / "skills"])
    assert str(folder / "SKILL.md") in str(caught.value)
    assert problem in str(caught.value)
    assert caught.value.path == folder / "SKILL.md"


def test_two_skills_with_one_name_are_refused_naming_both_files(tmp_path: Path) -> None:
    first = make_skill(tmp_path / "team", "pdf-forms", "Ours.")
    second = make_skill(tmp_path / "mine", "pdf-forms", "Mine.")
    with pytest.raises(SkillError) as caught:
        load_skills([tmp_path / "team", tmp_path / "mine"])
    message = str(caught.value)
    assert str(first / "SKILL.md") in message
    assert str(second / "SKILL.md") in message
    assert "taken already" in message


def test_a_missing_folder_of_skills_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SkillError, match="is not a folder of skills"):
        load_skills([tmp_path / "nowhere"])
    (tmp_path / "file.md").write_text("x")
    with pytest.raises(SkillError, match="is not a folder of skills"):
        load_skills([tmp_path / "file.md"])
