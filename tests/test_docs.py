"""The documentation site (``docs/``, ``mkdocs.yml``; ``bash scripts/docs.sh`` builds it).

- Every Python block of every page runs here, as the README's do (``tests/snippets.py``): the blocks of a
  page in order, as one notebook, and a block directly followed by a ``text`` block prints exactly that.
  The migration pages (``docs/migrate/``) are held to having snippets at all, so none is skipped by being
  left out. A block that names the PostgreSQL URL below runs on a real test database instead.
- The site builds with ``mkdocs build --strict`` (what ``scripts/docs.sh`` runs, and so CI through the
  suite): any warning fails it, a cross-reference to nothing among them; and it builds without a single
  network request (an audit hook refuses every socket), into pages that load nothing from elsewhere.
- A broken cross-reference in a docstring fails the build, naming it (on a small package made here).
- Every public module of the package is in the API reference.
- ``scripts/docs.sh`` sets up the ``docs`` extra (or finds the ``test`` set-up, which includes it) and
  runs that build, passing its arguments on; ``--serve`` serves instead.

Bad inputs tried: a docstring role naming nothing (the build fails, naming the target and the file), a role
naming another project's object (it stays code: nothing fetched), a build that reaches for the network (an
inventory URL: refused before a socket opens, said on stderr, the build fails).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.snippets import Block, blocks, leaks_recorded, run_cell
from tests.test_scripts import Project

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
MIGRATION = sorted((DOCS / "migrate").glob("*.md"))
POSTGRES_URL = "postgresql://rxagent:secret@127.0.0.1:5432/rxagent"
"""What a page's PostgreSQL snippet connects to; the test gives it a fresh database on the test server."""
BUILD_TIMEOUT_S = 300

# Run as `python -c`, then as mkdocs' command line: any socket the build opens (a font, an inventory, an
# analytics script fetched) raises, and says so on stderr.
NO_NETWORK = """
import runpy, sys
REFUSED = {"socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex",
           "socket.gethostbyaddr", "socket.sendto", "socket.sendmsg", "urllib.Request", "http.client.connect"}
def refuse(event, args):
    if event in REFUSED:
        sys.stderr.write(f"NETWORK REQUEST {event} {args!r}\\n")
        raise OSError(f"the documentation build made a network request ({event})")
sys.addaudithook(refuse)
sys.argv = ["mkdocs", *sys.argv[1:]]
runpy.run_module("mkdocs", run_name="__main__")
"""


def page_id(page: Path) -> str:
    return str(page.relative_to(DOCS))


def cells(page: Path) -> list[tuple[Block, str | None]]:
    """The Python blocks of ``page``, each with the ``text`` block that directly follows it (what it
    prints), if any."""
    text = page.read_text(encoding="utf-8")
    found = blocks(page)
    paired: list[tuple[Block, str | None]] = []
    for index, block in enumerate(found):
        after = found[index + 1] if index + 1 < len(found) else None
        if block.language != "python":
            continue
        follows = after is not None and after.language == "text" and not text[block.end : after.start].strip()
        paired.append((block, after.code if follows and after is not None else None))
    return paired


def mkdocs(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``mkdocs ARGS`` in this interpreter, with every network request refused."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", NO_NETWORK, *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )


# ---- the pages' snippets ---------------------------------------------------------------------------------


@pytest.mark.parametrize("page", [p for p in PAGES if cells(p)], ids=page_id)
async def test_every_python_block_of_a_page_runs_in_order_and_prints_what_it_shows(
    page: Path, request: pytest.FixtureRequest
) -> None:
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    printed: list[tuple[str, str | None]] = []

    with leaks_recorded() as leaks:
        for block, shown in cells(page):
            code = block.code
            if POSTGRES_URL in code:
                code = code.replace(POSTGRES_URL, request.getfixturevalue("postgres_url"))
            printed.append((await run_cell(code, namespace, page=page, line=block.line), shown))
        namespace.clear()  # as when the notebook's kernel stops: whatever was left open is collected

    assert leaks == [], f"{page_id(page)} left resources open: {leaks}"
    for output, shown in printed:
        if shown is not None:
            assert output == shown


@pytest.mark.parametrize("page", MIGRATION, ids=page_id)
def test_each_migration_page_maps_names_with_snippets_that_run(page: Path) -> None:
    assert len(cells(page)) >= 3, f"{page_id(page)}: a migration page shows its mapping in runnable snippets"
    assert "| " in page.read_text(encoding="utf-8"), f"{page_id(page)}: the table of names is missing"


def test_there_is_a_migration_page_for_each_framework() -> None:
    assert [p.stem for p in MIGRATION] == ["agentscope", "langgraph", "pydantic-ai"]


# ---- the build -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_site_builds_strictly_without_the_network(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = mkdocs("build", "--strict", "--site-dir", str(site))

    assert done.returncode == 0, done.stderr[-5000:]
    assert "NETWORK REQUEST" not in done.stderr
    assert "WARNING" not in done.stderr
    pages = list(site.rglob("*.html"))
    assert len(pages) >= len(PAGES)
    assert not (site / "_ext").exists()  # the build's own extension is not published
    for page in pages:
        html = page.read_text(encoding="utf-8")
        loads = re.findall(r"<(?:script|img|iframe)[^>]*\ssrc=\"(https?:)?//[^\"]*\"", html)
        loads += re.findall(r"<link[^>]*\shref=\"(?:https?:)?//[^\"]*\"[^>]*>", html)
        assert loads == [], f"{page.relative_to(site)} loads from elsewhere: {loads}"
    for sheet in site.rglob("*.css"):
        assert not re.search(r"url\(['\"]?(https?:)?//", sheet.read_text(encoding="utf-8")), sheet

    # The contract of the session API, from rxagent.serve's docstring: its status table a real table, its
    # endpoints a definition list, its cross-references links into the reference.
    contract = (site / "session-api" / "index.html").read_text(encoding="utf-8")
    assert re.search(r"<td>409</td>", contract)
    assert "<dt><code>GET /api/sessions/{sid}/feed?after=N</code> — SSE</dt>" in contract
    assert 'href="../reference/session/#rxagent.session.history"' in contract
    # Every role of every docstring (:class:`~rxagent.state.AgentState`) became a link or code, not text.
    for page in (site / "reference").rglob("*.html"):
        assert not re.search(r":(class|func|meth|mod|attr|data|exc|obj):<code>", page.read_text("utf-8")), (
            page
        )


def small_site(root: Path, docstring: str, *, inventories: list[str] | None = None) -> None:
    """A package ``demo`` whose module docstring is ``docstring``, and a site of one page documenting it,
    built with this site's configuration and docstring extension (and, if given, other projects'
    ``inventories`` to load, which this site never does)."""
    (root / "demo").mkdir()
    (root / "demo" / "__init__.py").write_text(
        f'"""{docstring}"""\n\n__all__ = ["Here"]\n\n\nclass Here:\n    """A class that is here."""\n'
    )
    (root / "pages").mkdir()
    (root / "pages" / "index.md").write_text("# Demo\n\n::: demo\n")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    python = config["plugins"][-1]["mkdocstrings"]["handlers"]["python"]
    python["paths"] = [str(root)]
    python["options"]["extensions"] = [str(ROOT / "docs" / "_ext" / "rst_docstrings.py") + ":RstDocstrings"]
    if inventories is not None:
        python["inventories"] = inventories
    config.update(docs_dir=str(root / "pages"), site_dir=str(root / "site"), nav=["index.md"])
    config.pop("exclude_docs", None)
    (root / "mkdocs.yml").write_text(yaml.safe_dump(config))


def test_a_broken_cross_reference_in_a_docstring_fails_the_build(tmp_path: Path) -> None:
    small_site(tmp_path, "Uses :class:`Here` and :class:`Nowhere`.")
    done = mkdocs("build", "--strict", "-f", str(tmp_path / "mkdocs.yml"), cwd=tmp_path)

    assert done.returncode == 1
    assert "Could not find cross-reference target 'Nowhere'" in done.stderr
    assert "demo/__init__.py" in done.stderr  # where the reference is
    assert "Here" not in re.findall(r"target '([^']*)'", done.stderr)


def test_a_docstring_whose_references_resolve_builds(tmp_path: Path) -> None:
    small_site(tmp_path, "Uses :class:`Here`, :class:`~demo.Here` and :class:`asyncio.Task`.")
    done = mkdocs("build", "--strict", "-f", str(tmp_path / "mkdocs.yml"), cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    html = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    links = re.findall(r'<a class="autorefs autorefs-internal"[^>]*href="([^"]*)"', html)
    assert links == ["#demo.Here", "#demo.Here"]  # both roles are links to the class
    assert "<code>asyncio.Task</code>" in html  # another project's name stays code: no inventory fetched


def test_a_build_that_reaches_for_the_network_fails_and_says_so(tmp_path: Path) -> None:
    # What the strict build's test would see if a change made the site fetch something while it builds
    # (here another project's inventory, which mkdocstrings can load): the request is refused, said, and
    # the build fails.
    small_site(tmp_path, "Uses :class:`Here`.", inventories=["https://docs.python.org/3/objects.inv"])
    done = mkdocs("build", "--strict", "-f", str(tmp_path / "mkdocs.yml"), cwd=tmp_path)

    assert done.returncode == 1
    assert "NETWORK REQUEST urllib.Request" in done.stderr  # refused before any socket opened
    assert "docs.python.org/3/objects.inv" in done.stderr


# ---- what the reference covers ---------------------------------------------------------------------------


def test_every_public_module_is_in_the_reference() -> None:
    documented: set[str] = set()
    with_submodules: set[str] = set()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"^::: (\S+)\n((?:    .*\n)*)", text, re.MULTILINE):
            documented.add(match.group(1))
            if "show_submodules: true" in match.group(2):
                with_submodules.add(match.group(1))
    package = ROOT / "rxagent"
    public = {
        ".".join(("rxagent", *path.relative_to(package).with_suffix("").parts)).removesuffix(".__init__")
        for path in package.rglob("*.py")
        if not any(part.startswith("_") and part != "__init__.py" for part in path.relative_to(package).parts)
    }
    missing = {
        module
        for module in public
        if module not in documented and not any(module.startswith(f"{p}.") for p in with_submodules)
    }
    assert missing == set(), (
        f"add these to a page of docs/reference/ (a `::: module` line): {sorted(missing)}"
    )


# ---- scripts/docs.sh -------------------------------------------------------------------------------------


def test_docs_sh_sets_up_the_docs_extra_then_builds_strictly(tmp_path: Path) -> None:
    # In a scratch project whose .venv/bin/python is a stand-in that logs how it is called (see
    # tests/test_scripts.py): the script installs the `docs` extra, then runs the strict build, passing
    # its arguments on; `--serve` serves instead.
    project = Project(tmp_path)
    shutil.copy(ROOT / "scripts" / "docs.sh", tmp_path / "scripts" / "docs.sh")

    def docs_sh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(tmp_path / "scripts" / "docs.sh"), *args],
            cwd=tmp_path.parent,  # the script finds its project from where it is, not from where it is run
            env=project.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    done = docs_sh("--site-dir", "out")
    assert done.returncode == 0, done.stderr
    calls = project.calls()
    assert "-m pip install -q -e .[docs]" in calls
    assert "-m rxagent.model.llama_check" not in calls  # the docs need no embedded model
    assert calls[-1] == "-m mkdocs build --strict --site-dir out"

    assert docs_sh("--serve").returncode == 0
    assert project.calls()[-1] == "-m mkdocs serve --strict"
    assert project.calls().count("-m pip install -q -e .[docs]") == 1  # set up once


def test_docs_sh_uses_the_test_set_up_when_it_is_there(tmp_path: Path) -> None:
    project = Project(tmp_path)
    shutil.copy(ROOT / "scripts" / "docs.sh", tmp_path / "scripts" / "docs.sh")
    assert project.set_up("test", CACHED_WHEEL="1").finish()[0] == 0
    project.log.write_text("")

    done = subprocess.run(
        ["bash", "scripts/docs.sh"],
        cwd=tmp_path,
        env=project.env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert project.calls() == ["-m mkdocs build --strict"]  # the test extras include the docs extra
