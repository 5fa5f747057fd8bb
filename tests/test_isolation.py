"""The ``llm`` tests run in pytest subprocesses of their own (tests/isolation.py): a native crash there fails
that test, and every other result is still reported.

Each test runs a small pytest project with the plugin (``pytester``, in a subprocess) whose ``llm`` tests
crash as llama.cpp does, with no model: a SIGSEGV sent to the test's own process, an ``os._exit``, an
``abort`` in a fixture, a crash at interpreter exit. Every test there writes its name and process id to
``ran.txt`` when it is set up, which tells which process ran what.

Bad inputs tried: a child killed by a signal (during a test, in a fixture's setup, after its last test), a
child that exits without a report, a node id that differs in the child (a parametrisation whose ids change
between runs), ``--isolated-child`` given by hand with nonsense, and tests outside ``llm`` that import
``llama_cpp`` in the pytest process or in a process they start.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.isolation import NOT_MARKED

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 120.0

INI = """
[pytest]
markers =
    llm: loads the embedded model
addopts = -ra
"""

CONFTEST = """
import os
from pathlib import Path

import pytest

pytest_plugins = [{plugin!r}]


@pytest.fixture(autouse=True)
def _ran(request):
    with open(Path(str(request.config.rootpath)) / "ran.txt", "a") as ran:
        ran.write(f"{{request.node.name}} {{os.getpid()}}\\n")
"""

CRASHING_MODULE = """
import os
import signal
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def shared():
    yield
    with open(Path(__file__).parent / "ran.txt", "a") as ran:
        ran.write(f"shared-torn-down {os.getpid()}\\n")


def test_first(shared):
    pass


@pytest.mark.llm
def test_before():
    pass


@pytest.mark.llm
def test_crash():
    os.kill(os.getpid(), signal.SIGSEGV)


def test_between(shared):
    pass


@pytest.mark.llm
def test_after():
    pass
"""

ELSEWHERE_MODULE = """
import pytest


def test_plain_elsewhere():
    pass


@pytest.mark.llm
def test_llm_elsewhere():
    pass
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytest project with the plugin, run in a subprocess that can import ``tests.isolation``."""
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    )
    monkeypatch.setenv("COLUMNS", "300")  # summary lines in full
    # Only pytest's own plugins (and this one): no start-up spent on Hypothesis, asyncio, anyio.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("CI", raising=False)
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST.format(plugin="tests.isolation"))
    return pytester


def run(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    return project.runpytest_subprocess("-v", *args, timeout=TIMEOUT_S)


def ran(project: pytest.Pytester) -> dict[str, int]:
    """Which process ran each test (by name, from ``ran.txt``)."""
    found: dict[str, int] = {}
    path = project.path / "ran.txt"
    for line in path.read_text().splitlines() if path.exists() else []:
        name, pid = line.split()
        assert name not in found, f"{name} ran twice"
        found[name] = int(pid)
    return found


def test_a_native_crash_fails_that_test_and_every_other_result_is_reported(project: pytest.Pytester) -> None:
    project.makepyfile(test_model=CRASHING_MODULE, test_elsewhere=ELSEWHERE_MODULE)

    result = run(project)

    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=6, failed=1)
    result.stdout.fnmatch_lines(
        [
            "test_elsewhere.py::test_plain_elsewhere PASSED*",
            "test_elsewhere.py::test_llm_elsewhere PASSED*",
            "test_model.py::test_first PASSED*",
            "test_model.py::test_before PASSED*",
            "test_model.py::test_crash FAILED*",
            "test_model.py::test_between PASSED*",
            "test_model.py::test_after PASSED*",
            "*_ test_crash _*",
            "crashed: the test process was killed by SIGSEGV",
            "What the test process printed meanwhile:",
            "Fatal Python error: Segmentation fault",
            "*",
            '*File "*test_model.py", line * in test_crash',
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "isolation: 4 `llm` test(s) of 2 module(s) ran in 3 subprocess(es) in * s "
            "(waiting for them to start: * s); 1 crashed",
            "*short test summary info*",
            "FAILED test_model.py::test_crash - crashed: the test process was killed by SIGSEGV",
        ]
    )
    # The child's own terminal output is not spilled into the parent's: one header, one summary line.
    assert len([line for line in result.outlines if "test session starts" in line]) == 1
    assert len([line for line in result.outlines if re.search(r"\d+ passed", line)]) == 1

    pids = ran(project)
    # In the order of the run, one at a time, though children start ahead and wait.
    assert list(pids) == [
        *("test_plain_elsewhere", "test_llm_elsewhere"),
        *("test_first", "test_before", "test_crash", "test_between", "test_after", "shared-torn-down"),
    ]
    parent = pids["test_first"]
    assert pids["test_between"] == pids["test_plain_elsewhere"] == pids["shared-torn-down"] == parent
    # Each module's llm tests in a child of their own; after the crash, a fresh one for the rest.
    children = {pids["test_before"], pids["test_after"], pids["test_llm_elsewhere"]}
    assert len(children) == 3
    assert parent not in children
    assert pids["test_crash"] == pids["test_before"]


def test_a_child_that_dies_without_a_report_fails_the_test_it_was_running(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_exits="""
        import atexit
        import os
        import signal

        import pytest


        @pytest.fixture
        def aborting():
            os.abort()


        @pytest.mark.llm
        def test_exits():
            os._exit(3)


        @pytest.mark.llm
        def test_after_exit():
            pass


        @pytest.mark.llm
        def test_aborts_in_setup(aborting):
            pass


        @pytest.mark.llm
        def test_crashes_at_exit():
            atexit.register(os.kill, os.getpid(), signal.SIGSEGV)
        """
    )

    result = run(project)

    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2, failed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "ERROR test_exits.py::test_aborts_in_setup - crashed: the test process was killed by SIGABRT",
            "ERROR test_exits.py::test_crashes_at_exit - crashed: the test process was killed by SIGSEGV "
            "after this test finished",
            "FAILED test_exits.py::test_exits - crashed: the test process exited with code 3",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_aborts_in_setup*",
            "crashed: the test process was killed by SIGABRT",
            "What the test process printed meanwhile:",
            "Fatal Python error: Aborted",
            "*",
            '*File "*test_exits.py", line * in aborting',
        ]
    )
    # A fresh child after each death: the test after a crash runs, in the order of the module.
    pids = ran(project)
    assert pids["test_exits"] != pids["test_after_exit"] == pids["test_aborts_in_setup"]
    assert pids["test_crashes_at_exit"] not in (pids["test_exits"], pids["test_aborts_in_setup"])


def test_skips_xfails_and_warnings_of_isolated_tests_are_replayed_as_such(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_marks="""
        import warnings

        import pytest

        pytestmark = pytest.mark.llm


        def test_skips():
            pytest.skip("no model on this machine")


        @pytest.mark.skipif(True, reason="skipped by its mark")
        def test_skipped_by_mark():
            pass


        @pytest.mark.xfail(reason="a known bug")
        def test_xfails():
            assert False


        @pytest.mark.xfail(reason="fixed since", strict=True)
        def test_xpasses_strictly():
            pass


        @pytest.mark.xfail(reason="fixed, maybe")
        def test_xpasses():
            pass


        def test_warns():
            warnings.warn("mind the model", UserWarning)


        def test_fails():
            assert 1 + 1 == 3
        """
    )

    result = run(project)

    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, skipped=2, xfailed=1, xpassed=1, failed=2, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*warnings summary*",
            "test_marks.py::test_warns",
            "*UserWarning: mind the model",
            "*short test summary info*",
            "SKIPPED [[]1] test_marks.py:*: no model on this machine",
            "SKIPPED [[]1] test_marks.py:*: skipped by its mark",
            "XFAIL test_marks.py::test_xfails - a known bug",
            "XPASS test_marks.py::test_xpasses - fixed, maybe",
            "FAILED test_marks.py::test_xpasses_strictly - *fixed since",
            "FAILED test_marks.py::test_fails - assert (1 + 1) == 3",
        ]
    )
    result.stdout.fnmatch_lines(
        ["    def test_fails():", ">       assert 1 + 1 == 3", "E       assert (1 + 1) == 3"]
    )


def test_with_ci_set_a_replayed_skip_fails_the_run(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The project's own conftest (its fixtures, the CI rule, and the plugin through it).
    project.makeconftest(CONFTEST.format(plugin="tests.conftest"))
    project.makepyfile(
        test_skip="""
        import pytest


        @pytest.mark.llm
        def test_skips():
            pytest.skip("no model")


        @pytest.mark.llm
        def test_passes(clock):
            assert clock.now() == 0
        """
    )
    monkeypatch.setenv("CI", "1")

    result = run(project)

    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        ["CI: 1 test(s) were skipped, which CI does not allow: test_skip.py::test_skips"]
    )


def test_k_and_m_select_what_the_child_runs_and_x_stops_it(project: pytest.Pytester) -> None:
    project.makepyfile(test_model=CRASHING_MODULE, test_elsewhere=ELSEWHERE_MODULE)

    not_llm = run(project, "-m", "not llm")

    assert not_llm.ret == pytest.ExitCode.OK
    not_llm.assert_outcomes(passed=3, deselected=4)
    assert "isolation:" not in not_llm.stdout.str()  # no child was started
    assert set(ran(project)) == {"test_first", "test_between", "test_plain_elsewhere", "shared-torn-down"}

    (project.path / "ran.txt").unlink()
    selected = run(project, "-k", "crash or after or elsewhere", "-x")

    assert selected.ret == pytest.ExitCode.TESTS_FAILED
    selected.assert_outcomes(passed=2, failed=1, deselected=3)
    selected.stdout.fnmatch_lines(["*stopping after 1 failures*"])
    # test_after was selected, but -x stopped the run at the crash before it.
    assert set(ran(project)) == {"test_plain_elsewhere", "test_llm_elsewhere", "test_crash"}


def test_a_test_outside_llm_that_imports_the_model_fails(project: pytest.Pytester) -> None:
    fake = project.path / "fake" / "llama_cpp"  # a llama_cpp that loads nothing, where only these tests look
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    project.makepyfile(
        test_guard="""
        import importlib.util
        import subprocess
        import sys
        from pathlib import Path

        import pytest

        FAKE = str(Path(__file__).parent / "fake")


        def test_imports_it_here_and_swallows_the_error(monkeypatch):
            monkeypatch.syspath_prepend(FAKE)
            try:
                import llama_cpp
            except ImportError:
                pass


        def test_starts_a_process_that_imports_it():
            done = subprocess.run([sys.executable, "-c", "import llama_cpp"], capture_output=True, text=True)
            assert done.returncode == 1
            assert "must be marked `@pytest.mark.llm`" in done.stderr


        def test_asks_only_whether_it_is_installed():
            assert importlib.util.find_spec("llama_cpp") is not None


        @pytest.mark.llm
        def test_marked_imports_it(monkeypatch):
            monkeypatch.syspath_prepend(FAKE)
            import llama_cpp

            assert llama_cpp.__file__.startswith(FAKE)
        """
    )

    result = run(project)

    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*_ test_imports_it_here_and_swallows_the_error _*",
            "this test loads the embedded model: mark it `llm`",
            "llama_cpp was imported in the pytest process.",
            "Otherwise its call passed.",
            "*_ test_starts_a_process_that_imports_it _*",
            "this test loads the embedded model: mark it `llm`",
            "llama_cpp was imported in a subprocess (-c).",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            f"FAILED test_guard.py::test_imports_it_here_and_swallows_the_error - {NOT_MARKED}",
            f"FAILED test_guard.py::test_starts_a_process_that_imports_it - {NOT_MARKED}",
        ]
    )


def test_a_test_the_child_cannot_find_fails_with_the_childs_words(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_unstable="""
        import os

        import pytest


        @pytest.mark.llm
        @pytest.mark.parametrize("n", [1], ids=[f"in-process-{os.getpid()}"])
        def test_with_an_id_of_its_process(n):
            pass


        @pytest.mark.llm
        def test_stable():
            pass
        """
    )

    result = run(project)

    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "the test process exited with code 4 before running any test here",
            "What the test process printed meanwhile:",
            "ERROR: not found: *test_unstable.py::test_with_an_id_of_its_process",
        ]
    )
    result.stdout.fnmatch_lines(["isolation: 2 `llm` test(s) of 1 module(s) ran in 1 subprocess(es)*"])
    assert ran(project) == {}


def test_the_child_option_given_by_hand_is_a_usage_error(project: pytest.Pytester) -> None:
    result = run(project, "--isolated-child=nonsense")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--isolated-child is for tests/isolation.py only*'nonsense'*"])
