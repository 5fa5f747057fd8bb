"""The permission gate: deny → ask → the tool's own check → allow → the mode's default."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from reactivex import Observable
from reactivex import operators as ops

from rxagent.context import RuntimeContext
from rxagent.messages import ToolUseBlock
from rxagent.tools import (
    PathPattern,
    Permissions,
    SchemaTool,
    Tool,
    ToolBatchFinished,
    ToolCallNext,
    ToolContext,
    ToolEvent,
    ToolExecutor,
    ToolInvocation,
    Toolkit,
    tool,
)
from rxagent.tools.arguments import path_arguments
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


# ---- arguments the tool says are paths -------------------------------------------------------------


@tool
def open_file(path: Path) -> str:
    """Open a file."""
    return str(path)


@tool
def open_files(paths: list[Path]) -> str:
    """Open files."""
    return ",".join(map(str, paths))


@tool
def maybe_open(path: Path | None = None, note: str = "") -> str:
    """Open a file, or nothing."""
    return f"{path} {note}"


def _body(arguments: dict[str, Any], _: ToolContext) -> str:
    return str(arguments)


# As an MCP server (or anyone writing the schema by hand) describes a path: a string of format "path".
fetch_file = SchemaTool(
    "fetch_file",
    "Read a file.",
    {
        "type": "object",
        "properties": {"uri": {"type": "string", "format": "path"}, "label": {"type": "string"}},
        "required": ["uri"],
    },
    _body,
)

# (tool, the argument that names one file) for every route by which a tool says "this is a path".
ONE_PATH = [(open_file, "path"), (maybe_open, "path"), (fetch_file, "uri")]


def test_the_tool_says_which_arguments_name_files() -> None:
    assert open_file.schema().parameters["properties"] == {"path": {"type": "string", "format": "path"}}
    assert open_file.path_arguments == {"path"}
    assert open_files.path_arguments == {"paths"}
    assert maybe_open.path_arguments == {"path"}  # not `note`, a plain string
    assert fetch_file.path_arguments == {"uri"}
    assert read_file.path_arguments == refund.path_arguments == frozenset()


@pytest.mark.parametrize(
    ("schema", "names_files"),
    [
        ({"type": "string", "format": "file-path"}, True),  # pydantic's FilePath
        ({"type": "string", "format": "directory-path"}, True),  # DirectoryPath
        ({"format": "path"}, True),
        ({"type": ["string", "null"], "format": "path"}, True),
        ({"anyOf": [{"type": "string", "format": "path"}, {"type": "null"}]}, True),  # Path | None
        ({"type": "array", "items": {"type": "string", "format": "path"}}, True),  # list[Path]
        ({"type": "array", "prefixItems": [{"format": "path"}, {"format": "path"}], "items": False}, True),
        ({"type": "array", "items": {"type": "array", "items": {"format": "path"}}}, True),
        ({"anyOf": [{"format": "path"}, {"type": "array", "items": {"format": "path"}}]}, True),
        ({"$ref": "#/$defs/Where"}, True),
        ({"type": "string"}, False),
        ({"type": "string", "format": "uri"}, False),
        ({"type": "integer", "format": "path"}, False),
        ({"anyOf": [{"type": "string", "format": "path"}, {"type": "string"}]}, False),  # Path | str
        ({"anyOf": [{"type": "string", "format": "path"}, {"type": "integer"}]}, False),  # Path | int
        ({"type": "null"}, False),
        ({"type": "array"}, False),  # any items
        ({"type": "array", "prefixItems": [{"format": "path"}], "items": True}, False),
        ({"type": "string", "format": ["path"]}, False),  # malformed: no crash, not a path
    ],
)
def test_which_schemas_name_files(schema: dict[str, Any], names_files: bool) -> None:
    parameters = {"type": "object", "properties": {"a": schema}, "$defs": {"Where": {"format": "path"}}}
    assert path_arguments(parameters) == ({"a"} if names_files else set())
    assert path_arguments({"type": "object"}) == path_arguments({"properties": "junk"}) == frozenset()


@pytest.mark.parametrize(("target", "name"), ONE_PATH, ids=lambda x: getattr(x, "name", x))
@pytest.mark.parametrize("spelling", ["/etc/passwd", "/tmp/../etc/passwd", "//etc/passwd", "/./etc/passwd"])
def test_the_issue_examples_are_guarded_by_a_plain_glob_on_a_path_argument(
    target: Tool, name: str, spelling: str
) -> None:
    denied = Permissions().deny(target.name, **{name: "/etc/*"})
    assert denied.decide(target, {name: spelling}, CTX).decision == "deny"
    allowed = Permissions(mode="deny_all").allow(target.name, **{name: "/tmp/*"})
    assert allowed.decide(target, {name: spelling}, CTX).decision == "deny"
    assert allowed.decide(target, {name: "/tmp/notes.txt"}, CTX).decision == "allow"


@pytest.mark.parametrize(("target", "name"), ONE_PATH, ids=lambda x: getattr(x, "name", x))
def test_a_plain_deny_glob_on_a_path_argument_catches_every_spelling(
    tree: Path, target: Tool, name: str
) -> None:
    gate = Permissions().deny(target.name, reason="secret", **{name: f"{tree}/secret/*"})
    for spelling in secret_spellings(tree):
        decision = gate.decide(target, {name: spelling}, CTX)
        assert (decision.decision, decision.reason) == ("deny", "secret"), spelling
    for harmless in (f"{tree}/public/notes.txt", f"{tree}/secret-other/x", f"{tree}/public/sub/"):
        assert gate.decide(target, {name: harmless}, CTX).decision == "allow", harmless


@pytest.mark.parametrize(("target", "name"), ONE_PATH, ids=lambda x: getattr(x, "name", x))
def test_a_plain_allow_glob_on_a_path_argument_lets_no_spelling_out(
    tree: Path, target: Tool, name: str
) -> None:
    gate = Permissions(mode="deny_all").allow(target.name, **{name: f"{tree}/public/*"})
    for spelling in secret_spellings(tree):
        assert gate.decide(target, {name: spelling}, CTX).decision == "deny", spelling
    for inside in (f"{tree}/public/notes.txt", f"{tree}//public/./sub/../notes.txt", f"{tree}/public/sub/"):
        assert gate.decide(target, {name: inside}, CTX).decision == "allow", inside
    # A preset (or an interceptor) may give a path object rather than text: it is the same path.
    assert gate.decide(target, {name: tree / "public" / "dir_link" / "passwd"}, CTX).decision == "deny"
    assert gate.decide(target, {name: tree / "public" / "notes.txt"}, CTX).decision == "allow"


def test_an_ask_glob_on_a_path_argument_asks_for_every_spelling(tree: Path) -> None:
    gate = Permissions().ask("open_file", path=f"{tree}/secret/*")
    for spelling in secret_spellings(tree):
        assert gate.decide(open_file, {"path": spelling}, CTX).decision == "ask", spelling


def test_a_list_of_paths_is_matched_path_by_path(tree: Path) -> None:
    notes, link = f"{tree}/public/notes.txt", f"{tree}/public/file_link"
    denied = Permissions().deny("open_files", paths=f"{tree}/secret/*")
    assert denied.decide(open_files, {"paths": [notes, link]}, CTX).decision == "deny"  # one is enough
    assert denied.decide(open_files, {"paths": [notes, f"{tree}/public/sub/"]}, CTX).decision == "allow"
    assert denied.decide(open_files, {"paths": []}, CTX).decision == "allow"  # names nothing denied
    allowed = Permissions(mode="deny_all").allow("open_files", paths=f"{tree}/public/*")
    assert allowed.decide(open_files, {"paths": [notes, f"{tree}/public/sub"]}, CTX).decision == "allow"
    assert allowed.decide(open_files, {"paths": [notes, link]}, CTX).decision == "deny"  # every one
    assert allowed.decide(open_files, {"paths": []}, CTX).decision == "deny"  # an allow vouches for a path
    assert allowed.decide(open_files, {"paths": [[notes], [notes, link]]}, CTX).decision == "deny"  # nested
    assert allowed.decide(open_files, {"paths": (notes,)}, CTX).decision == "allow"  # a preset's tuple


def test_an_optional_path_set_to_null_names_no_path(tree: Path) -> None:
    # null, like a left-out argument, leaves the tool to its own default: no path rule is about it.
    denied = Permissions().deny("maybe_open", path=f"{tree}/secret/*")
    assert denied.decide(maybe_open, {"path": None}, CTX).decision == "allow"
    assert denied.decide(maybe_open, {"path": f"{tree}/public/file_link"}, CTX).decision == "deny"
    allowed = Permissions(mode="deny_all").allow("maybe_open", path=f"{tree}/public/*")
    assert allowed.decide(maybe_open, {"path": None}, CTX).decision == "deny"  # the mode, not the rule
    assert allowed.decide(maybe_open, {"path": f"{tree}/public/notes.txt"}, CTX).decision == "allow"


def test_a_string_argument_that_is_not_a_path_keeps_matching_its_text() -> None:
    gate = Permissions().deny("maybe_open", note="/etc/*").deny("fetch_file", label="/etc/*")
    assert gate.decide(maybe_open, {"note": "/etc/passwd"}, CTX).decision == "deny"
    assert gate.decide(fetch_file, {"uri": "/tmp/x", "label": "/etc/passwd"}, CTX).decision == "deny"
    for spelling in ("/tmp/../etc/passwd", "//etc/passwd", "/etc"):
        assert gate.decide(maybe_open, {"note": spelling}, CTX).decision == "allow", spelling
        labelled = {"uri": "/tmp/x", "label": spelling}
        assert gate.decide(fetch_file, labelled, CTX).decision == "allow", spelling
    # Text globs that could never be path patterns still work on text.
    odd = Permissions().deny("maybe_open", note="*/../*")
    assert odd.decide(maybe_open, {"note": "a/../b"}, CTX).decision == "deny"
    assert odd.decide(maybe_open, {"note": "a/b"}, CTX).decision == "allow"


def test_relative_paths_are_taken_from_the_working_directory_when_the_rule_was_made(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree / "public")
    gate = Permissions().deny("open_file", path="../secret/*")
    monkeypatch.chdir(tree / "secret-other")  # later moves change nothing: the rule is fixed when made
    for spelling in ("../secret/passwd", "file_link", "dir_link/", f"{tree}/secret/passwd"):
        assert gate.decide(open_file, {"path": spelling}, CTX).decision == "deny", spelling
    assert gate.decide(open_file, {"path": "notes.txt"}, CTX).decision == "allow"


def test_empty_and_home_relative_arguments_are_what_pathlib_makes_of_them(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree / "secret")
    monkeypatch.setenv("HOME", str(tree / "public"))
    gate = Permissions().deny("open_file", path=f"{tree}/secret/*")
    # "" is Path("") == Path("."): the working directory, here the denied folder itself.
    assert gate.decide(open_file, {"path": ""}, CTX).decision == "deny"
    # "~" is not expanded (pathlib does not either): "~/x" is a folder named "~" below the working directory.
    assert gate.decide(open_file, {"path": "~/x"}, CTX).decision == "deny"
    home = Permissions().deny("open_file", path=f"{Path.home()}/*")
    assert home.decide(open_file, {"path": "~/x"}, CTX).decision == "allow"
    assert home.decide(open_file, {"path": f"{tree}/public/x"}, CTX).decision == "deny"


def test_a_glob_that_begins_with_a_star_matches_anywhere(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tree / "secret" / "key.pem").write_text("-----BEGIN")
    (tree / "public" / "innocent.txt").symlink_to(tree / "secret" / "key.pem")
    monkeypatch.chdir(tree / "public")
    gate = Permissions().deny("open_file", path="*.pem")  # as a text rule it meant "any .pem file"
    for spelling in (
        f"{tree}/secret/key.pem",
        f"{tree}/secret/key.pem/",
        "../secret/key.pem",
        "innocent.txt",
        "/elsewhere/x.pem",
    ):
        assert gate.decide(open_file, {"path": spelling}, CTX).decision == "deny", spelling
    assert gate.decide(open_file, {"path": "notes.txt"}, CTX).decision == "allow"
    # An explicit PathPattern stays anchored at its root: as an allow rule it never allows more than that.
    below = PathPattern("*.pem")
    assert below.glob == f"{(tree / 'public').resolve()}/*.pem"
    assert not below.matches(f"{tree}/secret/key.pem")
    assert PathPattern("/*.pem").matches(f"{tree}/secret/key.pem")


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (42, "a number"),
        (True, "a boolean"),
        ({"path": "/tmp/x"}, "an object"),
        ("/tmp/x\x00/../../etc/passwd", "a NUL character"),
        (b"/tmp/x", "bytes (an interceptor's)"),
        (["/tmp/x", 42], "a list with a number in it"),
    ],
)
def test_a_value_of_a_path_argument_that_names_no_path_fails_closed(value: object, why: str) -> None:
    for target, name in ONE_PATH:
        denied = Permissions().deny(target.name, **{name: "/etc/*"})
        assert denied.decide(target, {name: value}, CTX).decision == "deny", why
        asked = Permissions().ask(target.name, **{name: "/etc/*"})
        assert asked.decide(target, {name: value}, CTX).decision == "ask", why
        allowed = Permissions(mode="deny_all").allow(target.name, **{name: "/tmp/*"})
        assert allowed.decide(target, {name: value}, CTX).decision == "deny", why


def test_very_long_paths_are_canonicalised_too() -> None:
    denied = Permissions().deny("open_file", path="/etc/*")
    climb = "/tmp/" + "../" * 20_000 + "etc/passwd"
    assert denied.decide(open_file, {"path": climb}, CTX).decision == "deny"
    long_name = "/etc/" + "a" * 100_000  # longer than any file name: still below /etc
    assert denied.decide(open_file, {"path": long_name}, CTX).decision == "deny"
    allowed = Permissions(mode="deny_all").allow("open_file", path="/tmp/*")
    assert allowed.decide(open_file, {"path": climb}, CTX).decision == "deny"
    assert allowed.decide(open_file, {"path": "/tmp/" + "a/" * 5_000}, CTX).decision == "allow"


def test_a_text_glob_that_is_no_path_pattern_fails_closed_on_a_path_argument() -> None:
    # ".." after a "*" cannot be resolved before the match: on a path it refuses or asks, never allows.
    denied = Permissions().deny("open_file", path="*/../x")
    assert denied.decide(open_file, {"path": "/tmp/y"}, CTX).decision == "deny"
    allowed = Permissions(mode="deny_all").allow("open_file", path="/tmp/*/../x")
    assert allowed.decide(open_file, {"path": "/tmp/x"}, CTX).decision == "deny"
    nul = Permissions().ask("open_file", path="/etc/\x00*")
    assert nul.decide(open_file, {"path": "/tmp/y"}, CTX).decision == "ask"


def test_a_rule_set_whose_working_directory_is_gone_still_matches_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    gate = Permissions().deny("maybe_open", note="x*").deny("open_file", path="/etc/*")
    assert gate.decide(maybe_open, {"note": "xy"}, CTX).decision == "deny"
    assert gate.decide(open_file, {"path": "/tmp/a"}, CTX).decision == "deny"  # no root: fails closed


async def test_the_executor_refuses_a_path_argument_by_the_path_it_names(tree: Path) -> None:
    opened: list[Path] = []

    @tool
    def show(path: Path) -> str:
        """Show a file."""
        opened.append(path)
        return path.read_text()

    def to_secret(call: ToolInvocation, _: RuntimeContext, next_: ToolCallNext) -> Observable[ToolEvent]:
        if call.call.id == "rewritten":
            return next_(call.with_arguments({"path": f"{tree}/public/dir_link/passwd"}))
        return next_(call)

    gate = Permissions().deny("show", path=f"{tree}/secret/*", reason="secret")
    executor = ToolExecutor(permissions=gate, interceptors=[to_secret])
    calls = [
        ToolUseBlock(id=id_, name="show", input={"path": path}, raw_arguments=json.dumps({"path": path}))
        for id_, path in [
            ("link", f"{tree}/public/file_link"),
            ("dots", f"{tree}/public/../secret/passwd"),
            ("rewritten", f"{tree}/public/notes.txt"),
            ("fine", f"{tree}/public/notes.txt"),
        ]
    ]
    events = await executor.execute(calls, Toolkit([show]).view()).pipe(ops.to_list())
    finished = events[-1]
    assert isinstance(finished, ToolBatchFinished)
    assert [(r.tool_use_id, r.status) for r in finished.results] == [
        ("link", "denied"),
        ("dots", "denied"),
        ("rewritten", "denied"),
        ("fine", "ok"),
    ]
    assert opened == [tree / "public" / "notes.txt"]
