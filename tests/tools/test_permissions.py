"""The permission gate: deny → ask → the tool's own check → allow → the mode's default."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from rxagent.context import RuntimeContext
from rxagent.tools import PathPattern, Permissions, tool
from rxagent.tools.permissions import PermissionMode

CTX = RuntimeContext(user_id="u1")


def cautious(arguments: Mapping[str, Any], _: RuntimeContext) -> Any:
    return "ask" if float(arguments.get("amount", 0)) > 100 else "allow"


@tool(permission=cautious)
def refund(order: str, amount: float) -> str:
    """Refund an order."""
    return order


@tool
def delete_file(path: str) -> str:
    """Delete a file."""
    return path


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return path


def test_mode_defaults() -> None:
    modes: dict[PermissionMode, str] = {"default": "allow", "ask_all": "ask", "deny_all": "deny"}
    for mode, expected in modes.items():
        decision = Permissions(mode=mode).decide(read_file, {"path": "a"}, CTX)
        assert (decision.decision, decision.source) == (expected, "mode")


def test_deny_beats_ask_beats_tool_check_beats_allow() -> None:
    gate = Permissions().allow("*").ask("refund").deny("refund", order="X-*", reason="fraud list")
    denied = gate.decide(refund, {"order": "X-1", "amount": 5}, CTX)
    assert (denied.decision, denied.reason) == ("deny", "fraud list")
    assert denied.rule is not None
    asked = gate.decide(refund, {"order": "A-1", "amount": 5}, CTX)
    assert (asked.decision, asked.source) == ("ask", "rule")
    without_ask = Permissions().allow("*")
    assert (
        without_ask.decide(refund, {"order": "A", "amount": 500}, CTX).decision == "ask"
    )  # tool's own check
    assert without_ask.decide(refund, {"order": "A", "amount": 5}, CTX).source == "tool"
    assert without_ask.decide(read_file, {"path": "a"}, CTX).source == "rule"


def test_patterns_match_names_and_arguments() -> None:
    gate = Permissions(mode="deny_all").allow("read_*", path=PathPattern("/tmp/*")).deny("delete_*")
    assert gate.decide(read_file, {"path": "/tmp/x"}, CTX).decision == "allow"
    assert gate.decide(read_file, {"path": "/etc/passwd"}, CTX).decision == "deny"
    assert gate.decide(delete_file, {"path": "/tmp/x"}, CTX).decision == "deny"
    assert gate.decide(read_file, {}, CTX).decision == "deny"  # a pattern on a missing argument never matches


def test_predicates_see_arguments_and_context() -> None:
    gate = Permissions().deny("*", when=lambda _args, ctx: ctx.user_id == "guest", reason="guests read only")
    assert gate.decide(read_file, {"path": "a"}, RuntimeContext(user_id="guest")).decision == "deny"
    assert gate.decide(read_file, {"path": "a"}, CTX).decision == "allow"


def test_rule_sets_are_immutable() -> None:
    base = Permissions()
    stricter = base.deny("delete_*")
    assert base.rules == ()
    assert len(stricter.rules) == 1
    assert stricter.with_mode("ask_all").mode == "ask_all"
    with pytest.raises(AttributeError):
        base.mode = "deny_all"  # type: ignore[misc]


# ---- arguments that name paths ---------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``public/`` (a file, a subfolder, a link to the secret file, a link to the secret folder) and
    ``secret/`` (a file) and ``secret-other/`` (a folder whose name starts like the secret one)."""
    public, secret = tmp_path / "public", tmp_path / "secret"
    (public / "sub").mkdir(parents=True)
    secret.mkdir()
    (tmp_path / "secret-other").mkdir()
    (public / "notes.txt").write_text("notes")
    (secret / "passwd").write_text("root:x:0:0")
    (public / "file_link").symlink_to(secret / "passwd")
    (public / "dir_link").symlink_to(secret, target_is_directory=True)
    (public / "relative_link").symlink_to(Path("..") / "secret" / "passwd")
    return tmp_path


def secret_spellings(root: Path) -> list[str]:
    """Every spelling of the secret file (or its folder) the issue lists: ``..``, repeated and leading
    double slashes, ``.`` segments, symlinks (absolute and relative, to the file and to the folder), a
    trailing slash."""
    secret, public = f"{root}/secret", f"{root}/public"
    return [
        f"{secret}/passwd",
        f"{public}/../secret/passwd",
        f"{public}/sub/../../secret/passwd",
        f"/{secret}/passwd",  # a leading "//"
        f"///{secret}/passwd",
        f"{secret}//passwd",
        f"{root}//secret///passwd",
        f"{root}/./secret/./passwd",
        f"/.{secret}/passwd",
        f"{public}/file_link",
        f"{public}/relative_link",
        f"{public}/dir_link/passwd",
        f"{public}/dir_link/../secret/passwd",  # the link is followed before ".." is applied
        f"{secret}/passwd/",
        f"{secret}/",
        secret,
        f"{public}/dir_link/",
        f"{public}/../secret/not-created-yet",
    ]


def test_a_plain_glob_guards_text_not_paths() -> None:
    # Documented: a str pattern matches the argument's text, so other spellings of a path step around it.
    gate = Permissions().deny("read_file", path="/etc/*")
    assert gate.decide(read_file, {"path": "/etc/passwd"}, CTX).decision == "deny"
    for spelling in ("/tmp/../etc/passwd", "//etc/passwd", "/./etc/passwd"):
        assert gate.decide(read_file, {"path": spelling}, CTX).decision == "allow"


@pytest.mark.parametrize("spelling", ["/etc/passwd", "/tmp/../etc/passwd", "//etc/passwd", "/./etc/passwd"])
def test_the_issue_examples_are_guarded_by_a_path_pattern(spelling: str) -> None:
    denied = Permissions().deny("read_file", path=PathPattern("/etc/*"))
    assert denied.decide(read_file, {"path": spelling}, CTX).decision == "deny"
    allowed = Permissions(mode="deny_all").allow("read_*", path=PathPattern("/tmp/*"))
    assert allowed.decide(read_file, {"path": spelling}, CTX).decision == "deny"
    assert allowed.decide(read_file, {"path": "/tmp/notes.txt"}, CTX).decision == "allow"


def test_a_deny_path_pattern_catches_every_spelling_of_the_path(tree: Path) -> None:
    gate = Permissions().deny("read_file", path=PathPattern(f"{tree}/secret/*"), reason="secret")
    for spelling in secret_spellings(tree):
        decision = gate.decide(read_file, {"path": spelling}, CTX)
        assert (decision.decision, decision.reason) == ("deny", "secret"), spelling
    for harmless in (f"{tree}/public/notes.txt", f"{tree}/secret-other/x", f"{tree}/public/sub/"):
        assert gate.decide(read_file, {"path": harmless}, CTX).decision == "allow", harmless


def test_an_allow_path_pattern_under_deny_all_lets_no_spelling_out(tree: Path) -> None:
    gate = Permissions(mode="deny_all").allow("read_*", path=PathPattern(f"{tree}/public/*"))
    for spelling in secret_spellings(tree):
        assert gate.decide(read_file, {"path": spelling}, CTX).decision == "deny", spelling
    for inside in (
        f"{tree}/public/notes.txt",
        f"{tree}/public/sub/../notes.txt",
        f"{tree}//public/./notes.txt",
        f"{tree}/public/sub/",
        f"{tree}/public",
        f"{tree}/secret/../public/notes.txt",
    ):
        assert gate.decide(read_file, {"path": inside}, CTX).decision == "allow", inside


def test_relative_paths_and_patterns_are_taken_from_the_root(tree: Path) -> None:
    public = tree / "public"
    gate = Permissions().deny("read_file", path=PathPattern("../secret/*", root=public))
    for spelling in ("../secret/passwd", "file_link", "dir_link/passwd", "./sub/../../secret/passwd"):
        assert gate.decide(read_file, {"path": spelling}, CTX).decision == "deny", spelling
    assert gate.decide(read_file, {"path": "notes.txt"}, CTX).decision == "allow"
    assert PathPattern("../secret/*", root=public).glob == f"{tree.resolve()}/secret/*"


def test_the_pattern_itself_is_canonical(tree: Path) -> None:
    # A link or ".." in the pattern's literal part resolves the way arguments do.
    through_link = PathPattern(f"{tree}/public/dir_link/*")
    assert through_link.glob == f"{tree.resolve()}/secret/*"
    assert through_link.matches(f"{tree}/secret/passwd")
    assert PathPattern(f"//{tree}/public/../secret/").glob == f"{tree.resolve()}/secret"


@pytest.mark.parametrize(
    ("value", "why"),
    [("/tmp/a\x00/etc/passwd", "a NUL character"), (42, "not text"), (["/etc/passwd"], "not text")],
)
def test_a_value_that_is_no_path_fails_closed(value: object, why: str) -> None:
    denied = Permissions().deny("read_file", path=PathPattern("/etc/*"))
    assert denied.decide(read_file, {"path": value}, CTX).decision == "deny", why
    asked = Permissions().ask("read_file", path=PathPattern("/etc/*"))
    assert asked.decide(read_file, {"path": value}, CTX).decision == "ask", why
    allowed = Permissions(mode="deny_all").allow("read_file", path=PathPattern("/tmp/*"))
    assert allowed.decide(read_file, {"path": value}, CTX).decision == "deny", why


def test_bad_path_patterns_are_refused() -> None:
    with pytest.raises(ValueError, match=r"'\.' and '\.\.' cannot follow a glob character"):
        PathPattern("/tmp/*/../etc/*")
    with pytest.raises(ValueError, match="NUL"):
        PathPattern("/tmp/\x00/*")
    # A rule on an argument the call leaves out does not match (the tool's default is the tool's to guard).
    gate = Permissions().deny("read_file", path=PathPattern("/etc/*"))
    assert gate.decide(read_file, {}, CTX).decision == "allow"
