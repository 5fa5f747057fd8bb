"""The tests that load the embedded model run in pytest subprocesses of their own (a pytest plugin).

llama.cpp is native code: when it crashes (a segfault inside ``llama_decode`` on a CPU it was not built
for, an illegal instruction, an abort), the process dies with no Python exception, and a pytest that
ran the test in-process dies with it: no summary, and the results of every other test are lost. So:

==================  ============================================================================
who                 what it does
==================  ============================================================================
``llm`` tests       A module's ``llm``-marked tests (the selected ones, by node id) run in one
                    ``python -m pytest`` subprocess, started ahead (while the tests before them run)
                    and waiting. The child runs one test each time the parent asks for it, so the
                    order of the whole run is unchanged and no two tests run at once; each report comes
                    back as a JSON line (``pytest_report_to_serializable``) and is replayed in the
                    parent through ``pytest_runtest_logstart/logreport/logfinish``: the terminal,
                    ``-ra``, ``-x``, the exit code, JUnit and the CI rule on skips see ordinary
                    reports. Warnings raised in a test come back too.
a crash             The child dies during a test (killed by a signal, or exiting without
                    reporting): that test fails with ``crashed: the test process was killed by
                    SIGSEGV`` (or ``exited with code 3``), with the tail of the child's output
                    (where Python's faulthandler prints the stack); the module's later tests run in
                    a fresh child. A child that dies after a test finished fails that test's
                    teardown; one that cannot run its first test (a collection error, an unknown node
                    id) fails each of its tests once, without starting again.
the parent process  never imports ``llama_cpp``: a meta-path finder refuses it, and a stand-in
                    package first on ``PYTHONPATH`` refuses it in the processes a test starts (the
                    command line, a server). A test that tried fails with ``this test loads the
                    embedded model: mark it `llm```, whatever it did with the ``ImportError``. So
                    ``-m "not llm"`` runs without the model, and the mark is complete by
                    construction.
==================  ============================================================================

One subprocess per module. Not per test: a child costs a Python and pytest start-up (pytest's, the
plugins', the conftest's and the module's imports: 2 to 3 s of CPU on this 2-core machine) and loads the
model again, and module-scoped fixtures (a loaded model, a llama.cpp server) would be set up per test. Not
one for the whole run: the modules stay apart as they were (process-wide state such as "the model is
loaded once per process" is the module's own), a child collects only its own module, and since the
children of the next two modules start while the tests before them run, their start-up is mostly hidden.
The summary line ``isolation: …`` says how many children ran, how long the run waited for them to start,
and how many crashed.

The child gets the options that change how a test runs or how its failure reads (``--tb``, ``-l``,
verbosity, ``-p``, ``-o``, ``-W``, capture, ``--runxfail``, import and assert modes, the log level, the
asyncio and Hypothesis settings), never the ones that select or stop (``-k``, ``-m``, ``-x``, ``--lf``:
the parent selected, the child runs the node ids it is given) nor ``--pdb`` (a child has no terminal).
With ``-s``, an isolated test's output goes to its child's output, shown only when the child crashes.
``-p no:tests.isolation`` turns all of this off (to debug an ``llm`` test in-process).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, Protocol

import pytest

__all__ = ["CHILD_OPTION", "MARK", "MODEL_PACKAGE", "NOT_MARKED"]

MARK = "llm"
"""The mark of the tests that load the embedded model, and so run isolated."""

MODEL_PACKAGE = "llama_cpp"
"""The package whose import loads llama.cpp's native library: never in the parent pytest process."""

CHILD_OPTION = "--isolated-child"
"""Internal: makes a pytest process a child; its value is the two pipe ends it talks to its parent on."""

NOT_MARKED = "this test loads the embedded model: mark it `llm`"
"""Why a test outside the ``llm`` mark that imported :data:`MODEL_PACKAGE` failed."""

_REFUSED = (
    f"{MODEL_PACKAGE} is not importable here: the tests that load the embedded model must be marked "
    f"`@pytest.mark.{MARK}`, and run in a pytest subprocess of their own (tests/isolation.py)"
)
_OUTCOME = {"passed": "passed", "failed": "failed", "skipped": "was skipped"}
_TAIL_LINES = 200  # enough for faulthandler's stacks of a few threads
_TAIL_BYTES = 64_000
_EXIT_WAIT_S = 60.0  # how long a child told to stop may take to tear its fixtures down


def pytest_addoption(parser: pytest.Parser) -> None:
    """Adds :data:`CHILD_OPTION` (hidden: only the plugin gives it, to the children it starts)."""
    parser.addoption(CHILD_OPTION, dest="isolated_child", default=None, help=argparse.SUPPRESS)


def pytest_configure(config: pytest.Config) -> None:
    """Registers the plugin's side for this process: a child's, or the parent's (which guards the model)."""
    channel: str | None = config.getoption("isolated_child")
    if channel is not None:
        config.pluginmanager.register(_ChildSide(config, channel), "isolation-child")
    else:
        config.pluginmanager.register(_ParentSide(config), "isolation-parent")


# ---- how a failure the plugin reports reads ------------------------------------------------------------


class _Writer(Protocol):
    def line(self, s: str = "", **markup: bool) -> None: ...


@dataclass(frozen=True)
class _Where:
    """Where a failure points (pytest reads ``reprcrash``: the -ra line, ``--tb=line``, JUnit's message)."""

    path: str
    lineno: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.lineno}: {self.message}"


@dataclass(frozen=True)
class _Failure:
    """The ``longrepr`` of a failure the plugin makes: one line saying what happened, then the details."""

    reprcrash: _Where
    details: str

    @classmethod
    def at(cls, item: pytest.Item, message: str, details: str) -> _Failure:
        """A failure of ``item``, pointing at its definition."""
        path, line, _ = item.location
        return cls(_Where(path, (line or 0) + 1, message), details)

    def toterminal(self, out: _Writer) -> None:
        out.line(self.reprcrash.message, red=True, bold=True)
        for line in self.details.splitlines():
            out.line(line)

    def __str__(self) -> str:
        return f"{self.reprcrash.message}\n{self.details}".rstrip()


_Phase = Literal["setup", "call", "teardown"]


def _failure(item: pytest.Item, when: _Phase, message: str, details: str) -> pytest.TestReport:
    return pytest.TestReport(
        item.nodeid,
        item.location,
        dict.fromkeys(item.keywords, 1),
        "failed",
        _Failure.at(item, message, details),
        when,
        user_properties=item.user_properties,
    )


# ---- the parent: the model guard ---------------------------------------------------------------------

_STAND_IN = f'''"""{MODEL_PACKAGE} in the processes a test outside `{MARK}` starts (tests/isolation.py)."""
import os, sys, time
from pathlib import Path

try:  # tell the parent pytest process which command tried
    record = Path(__file__).resolve().parents[2] / "imports" / f"{{os.getpid()}}-{{time.monotonic_ns()}}"
    record.write_text(" ".join(sys.argv), encoding="utf-8")
except OSError:
    pass
raise ImportError({_REFUSED!r})
'''


class _ModelGuard(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Refuses :data:`MODEL_PACKAGE` in this process (a meta-path finder) and in the processes it starts
    (a stand-in package first on ``PYTHONPATH``), and remembers who tried during a test."""

    def __init__(self) -> None:
        if MODEL_PACKAGE in sys.modules:
            raise pytest.UsageError(
                f"{MODEL_PACKAGE} was imported before the tests ran (by a plugin or a conftest): the parent "
                "pytest process must not load the embedded model (tests/isolation.py)"
            )
        self._directory = Path(tempfile.mkdtemp(prefix="rxagent-model-guard-"))
        self._imports = self._directory / "imports"
        self._imports.mkdir()
        package = self._directory / "path" / MODEL_PACKAGE
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(_STAND_IN, encoding="utf-8")
        self._pythonpath = os.environ.get("PYTHONPATH")
        self._here: list[str] = []
        self.test: str | None = None
        """The node id of the test running in this process, if one is."""
        sys.meta_path.insert(0, self)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(package.parent), self._pythonpath) if p)

    def close(self) -> None:
        """Stop guarding: the finder goes, ``PYTHONPATH`` is what it was, the stand-in is deleted."""
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if self._pythonpath is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = self._pythonpath
        shutil.rmtree(self._directory, ignore_errors=True)

    def unguarded_environment(self, environment: Mapping[str, str]) -> dict[str, str]:
        """``environment`` as it would be without the guard (for the children, which load the model)."""
        unguarded = dict(environment)
        if self._pythonpath is None:
            unguarded.pop("PYTHONPATH", None)
        else:
            unguarded["PYTHONPATH"] = self._pythonpath
        return unguarded

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        # A spec, so that find_spec("llama_cpp") still says it is installed; only importing it is refused.
        return importlib.util.spec_from_loader(fullname, self) if fullname == MODEL_PACKAGE else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        if self.test is not None:
            self._here.append("in the pytest process")
        raise ImportError(_REFUSED)

    def take(self) -> list[str]:
        """Where :data:`MODEL_PACKAGE` was imported since the last call (forgotten once taken)."""
        found, self._here = self._here, []
        for record in sorted(self._imports.iterdir()):
            command = record.read_text(encoding="utf-8", errors="replace").strip()
            found.append(f"in a subprocess ({command or '?'})")
            record.unlink(missing_ok=True)
        return found


# ---- the parent: one child -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Ended:
    """How a child process ended."""

    returncode: int

    @property
    def normal(self) -> bool:
        """Exited as pytest exits when it ran its tests (0: all passed, 1: some failed)."""
        return self.returncode in (0, 1)

    def __str__(self) -> str:
        if self.returncode >= 0:
            return f"exited with code {self.returncode}"
        try:
            name = signal.Signals(-self.returncode).name
        except ValueError:
            name = f"signal {-self.returncode}"
        return f"was killed by {name}"


class _Child:
    """A ``python -m pytest`` subprocess running the node ids it was given, one each time it is told to.

    It says ``{"ready": nodeid}`` before each test and waits for a line on its control pipe; then
    ``start``, each ``report``, any ``warning``, and ``finish``. Its stdout and stderr go to a temporary
    file, shown (its tail) only when it crashed.
    """

    def __init__(self, config: pytest.Config, nodeids: Sequence[str], basetemp: Path, env: dict[str, str]):
        self.output = tempfile.TemporaryFile()  # noqa: SIM115  # open while the child lives: read after
        control_read, self._control = os.pipe()
        reports_read, reports_write = os.pipe()
        try:
            self.process = subprocess.Popen(
                [
                    *(sys.executable, "-m", "pytest", *_child_options(config), f"--basetemp={basetemp}"),
                    *(f"{CHILD_OPTION}={control_read},{reports_write}", *nodeids),
                ],
                cwd=config.rootpath,
                env={**env, "PYTHONUNBUFFERED": "1"},  # nothing lost in a buffer when it crashes
                stdin=subprocess.DEVNULL,
                stdout=self.output,
                stderr=subprocess.STDOUT,
                pass_fds=(control_read, reports_write),
            )
        except OSError:
            for fd in (self._control, reports_read):
                os.close(fd)
            self.output.close()
            raise
        finally:
            os.close(control_read)
            os.close(reports_write)
        self._reports = os.fdopen(reports_read, "rb")
        self.ready: str | None = None
        """The node id the child said it is ready to run, until it is told to."""
        self._since = 0

    def go(self) -> None:
        """Let the child run the test it is ready for."""
        with contextlib.suppress(BrokenPipeError):  # it died meanwhile: the next read says so
            os.write(self._control, b"go\n")

    def read(self) -> dict[str, Any] | None:
        """The child's next record; ``None`` when it has ended (or sent something that is not one)."""
        line = self._reports.readline()
        if not line.endswith(b"\n"):  # the end, or a line cut short by a crash
            return None
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            self.process.kill()
            return None
        return record  # pyright: ignore[reportUnknownVariableType]

    def end(self) -> _Ended:
        """Close the control pipe (a waiting child then stops cleanly), wait for the child, and say how
        it ended (killed, if it does not end within a minute)."""
        if self._control >= 0:
            os.close(self._control)
            self._control = -1
        try:
            self.process.wait(_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reports.close()
        return _Ended(self.process.returncode)

    def mark(self, since: int) -> None:
        """From now on, :meth:`tail` shows only what the child printed after its first ``since`` bytes."""
        self._since = since

    def tail(self) -> str:
        """The last lines the child printed since :meth:`mark` (faulthandler's stacks, after a crash)."""
        size = os.fstat(self.output.fileno()).st_size
        self.output.seek(max(self._since, size - _TAIL_BYTES))
        lines = self.output.read().decode("utf-8", "replace").splitlines()[-_TAIL_LINES:]
        if not lines:
            return "The test process printed nothing meanwhile."
        return "\n".join(["What the test process printed meanwhile:", *lines])


def _child_options(config: pytest.Config) -> list[str]:
    option = config.option
    options = [
        "--color=no",
        f"--rootdir={config.rootpath}",
        f"--verbosity={option.verbose}",
        f"--tb={option.tbstyle}",
        f"--capture={option.capture}",
        f"--import-mode={option.importmode}",
        f"--assert={option.assertmode}",
    ]
    if config.inipath is not None:
        options.append(f"--config-file={config.inipath}")
    for flag, values in (("-p", option.plugins), ("-o", option.override_ini), ("-W", option.pythonwarnings)):
        for value in values or ():
            options += [flag, value]
    for flag, dest in (("--showlocals", "showlocals"), ("--full-trace", "fulltrace")):
        if config.getoption(dest, False):
            options.append(flag)
    for flag, dest in (("--runxfail", "runxfail"), ("--noconftest", "noconftest")):
        if config.getoption(dest, False):
            options.append(flag)
    for flag, dest in (
        ("--log-level", "log_level"),
        ("--confcutdir", "confcutdir"),
        ("--asyncio-mode", "asyncio_mode"),
        ("--hypothesis-profile", "hypothesis_profile"),
        ("--hypothesis-seed", "hypothesis_seed"),
        ("--hypothesis-verbosity", "hypothesis_verbosity"),
    ):
        value = config.getoption(dest, None)
        if value is not None:
            options.append(f"{flag}={value}")
    return options


# ---- the parent: one module's isolated tests -----------------------------------------------------------


def _next_phase(last: pytest.TestReport | None) -> _Phase:
    if last is None:
        return "setup"
    if last.when == "setup" and last.passed:
        return "call"
    return "teardown"


class _Module:
    """The isolated tests of one module still to run, and the child running them."""

    def __init__(self, parent: _ParentSide) -> None:
        self._parent = parent
        self.pending: list[pytest.Item] = []
        self._child: _Child | None = None
        self._unrunnable: tuple[str, str] | None = None

    def run(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """Run ``item`` in the child and replay its reports here, as its protocol would have made them."""
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        try:
            for report in self._reports(item):
                ihook.pytest_runtest_logreport(report=report)
        finally:
            self.pending.remove(item)
        teardown = self._tear_down_here(item, nextitem)
        if teardown is not None:
            ihook.pytest_runtest_logreport(report=teardown)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)

    def close(self) -> None:
        """Stop the child, if one is running (after ``-x``, or an interrupted run)."""
        if self._child is not None:
            self._forget(self._child)

    def _reports(self, item: pytest.Item) -> Iterator[pytest.TestReport]:
        if self._unrunnable is not None:
            yield _failure(item, "setup", *self._unrunnable)
            return
        child = self._child or self._start()
        if child is None:
            assert self._unrunnable is not None
            yield _failure(item, "setup", *self._unrunnable)
            return
        if child.ready is None:
            waiting = time.perf_counter()
            record = self._read(child)
            self._parent.start_up_seconds += time.perf_counter() - waiting
            if record is None or "ready" not in record:
                # It ended before its first test: it would again, so none of its tests can run.
                ended, tail = self._forget(child)
                self._unrunnable = (f"the test process {ended} before running any test here", tail)
                yield _failure(item, "setup", *self._unrunnable)
                return
            child.ready = str(record["ready"])
        if child.ready != item.nodeid:
            yield _failure(
                item,
                "setup",
                "the test process did not run this test",
                f"It was ready for {child.ready} instead: is the test's node id different in another process "
                "(a parametrisation whose ids change from run to run)?",
            )
            return
        child.ready = None
        child.go()
        last: pytest.TestReport | None = None
        started = finished = False
        while not finished:
            record = self._read(child)
            if record is None:
                break
            started = started or "start" in record
            finished = "finish" in record
            if "output" in record:  # a test started or finished: what it printed before is not this crash's
                child.mark(int(record["output"]))
            if "report" in record:
                last = self._parent.report_from(record["report"])
                yield last
        if not finished:
            ended, tail = self._forget(child)
            self._parent.crashes += 1
            crash = f"crashed: the test process {ended}" + ("" if started else " before this test started")
            yield _failure(item, _next_phase(last), crash, tail)
            return
        record = self._read(child)
        if record is not None and "ready" in record:
            child.ready = str(record["ready"])
            return
        ended, tail = self._forget(child)
        if not ended.normal:
            self._parent.crashes += 1
            yield _failure(
                item, "teardown", f"crashed: the test process {ended} after this test finished", tail
            )

    def prefetch(self) -> None:
        """Start the child now, if there is none yet: it starts up while other tests run here, and waits."""
        if self._child is None and self._unrunnable is None and self.pending:
            self._start()

    def _start(self) -> _Child | None:
        try:
            self._child = self._parent.start_child([pending.nodeid for pending in self.pending])
        except OSError as error:
            self._unrunnable = ("the test process could not start", repr(error))
        return self._child

    def _read(self, child: _Child) -> dict[str, Any] | None:
        """The child's next record that is not a warning (replayed here)."""
        while True:
            record = child.read()
            if record is None or "warning" not in record:
                return record
            self._parent.warn(record["warning"])

    def _forget(self, child: _Child) -> tuple[_Ended, str]:
        """End ``child``: how it ended, and the tail of its output."""
        self._child = None
        ended = child.end()
        try:
            return ended, child.tail()
        finally:
            child.output.close()

    def _tear_down_here(self, item: pytest.Item, nextitem: pytest.Item | None) -> pytest.TestReport | None:
        # What runtestprotocol's teardown would do here: finalize what the previous tests of this process
        # set up and `nextitem` does not need (else the next setup finds the stack of another module).
        # The hook itself cannot be called: its wrappers expect this item's setup to have run here.
        if item.session.shouldfail or item.session.shouldstop:
            nextitem = None
        call = pytest.CallInfo.from_call(
            lambda: item.session._setupstate.teardown_exact(nextitem),  # pyright: ignore[reportPrivateUsage]
            when="teardown",
            reraise=(pytest.exit.Exception, KeyboardInterrupt),
        )
        return pytest.TestReport.from_item_and_call(item, call) if call.excinfo is not None else None


# ---- the parent: the plugin ----------------------------------------------------------------------------


class _ParentSide:
    """The plugin in the pytest process the user started: isolates the ``llm`` tests, guards the model."""

    def __init__(self, config: pytest.Config) -> None:
        self._config = config
        self._guard = _ModelGuard()
        self._modules: dict[str, _Module] = {}
        self._module_of: dict[str, _Module] = {}
        self.children = 0
        self.start_up_seconds = 0.0
        """How long this process waited for children to start up (what isolation costs, beyond the
        children's CPU time)."""
        self.crashes = 0
        self._isolated = 0
        self._seconds = 0.0

    def start_child(self, nodeids: Sequence[str]) -> _Child:
        """A new child for ``nodeids``, with its own temporary directory under this session's."""
        self.children += 1
        factory: pytest.TempPathFactory | None = getattr(self._config, "_tmp_path_factory", None)
        base = factory.getbasetemp() if factory is not None else Path(tempfile.gettempdir())
        env = self._guard.unguarded_environment(os.environ)
        env.pop("PYTEST_ADDOPTS", None)  # what it said is in the options given to the child (-x is not)
        return _Child(self._config, nodeids, base / f"isolated-{os.getpid()}-{self.children}", env)

    def report_from(self, data: dict[str, Any]) -> pytest.TestReport:
        """A report the child serialised, as pytest made it there (JSON turned its tuples into lists)."""
        report = self._config.hook.pytest_report_from_serializable(config=self._config, data=data)
        assert isinstance(report, pytest.TestReport), data
        report.location = tuple(report.location)  # pyright: ignore[reportAttributeAccessIssue]
        if isinstance(report.longrepr, list):  # a skip's (path, line, reason)
            report.longrepr = tuple(report.longrepr)  # pyright: ignore[reportAttributeAccessIssue]
        return report

    def warn(self, data: dict[str, Any]) -> None:
        """Replay a warning a test raised in the child, for the warnings summary."""
        category: type[Warning] = UserWarning
        module, _, name = str(data["category"]).rpartition(".")
        try:
            found = getattr(importlib.import_module(module), name)
            if isinstance(found, type) and issubclass(found, Warning):
                category = found
            message = category(data["message"])
        except Exception:  # a category that cannot be found or made here: the text still says it
            category, message = UserWarning, UserWarning(f"{data['category']}: {data['message']}")
        self._config.hook.pytest_warning_recorded.call_historic(
            kwargs={
                "warning_message": warnings.WarningMessage(
                    message, category, str(data["filename"]), int(data["lineno"])
                ),
                "when": "runtest",
                "nodeid": str(data["nodeid"]),
                "location": None,
            }
        )

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            if item.get_closest_marker(MARK) is not None:
                self._module(item).pending.append(item)

    def _module(self, item: pytest.Item) -> _Module:
        module = self._modules.setdefault(item.nodeid.split("::", 1)[0], _Module(self))
        self._module_of[item.nodeid] = module
        return module

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        self._prefetch()
        module = self._module_of.get(item.nodeid)
        if module is None or item not in module.pending:
            if item.get_closest_marker(MARK) is None:
                return None
            module = self._module(item)  # an item run without having been collected: isolated all the same
            module.pending.append(item)
        started = time.perf_counter()
        try:
            module.run(item, nextitem)
        finally:
            self._isolated += 1
            self._seconds += time.perf_counter() - started
        return True

    def _prefetch(self) -> None:
        # The next two modules with isolated tests to run have their children started already: a start-up
        # (pytest, the plugins, the conftest and the module's imports: seconds) overlaps the tests run
        # before that module's (here, or in the child before it). No further ahead: a child idles (and
        # holds its imports) until its first test.
        upcoming = [module for module in self._modules.values() if module.pending]
        for module in upcoming[:2]:
            module.prefetch()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self._guard.test = nodeid

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logfinish(self) -> None:
        self._guard.test = None

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Iterator[None]:  # a wrapper's generator
        report: pytest.TestReport = yield  # pyright: ignore[reportAssignmentType]
        imported = self._guard.take()
        if imported:
            details = "\n".join(
                [
                    f"{MODEL_PACKAGE} was imported " + "; and ".join(imported) + ".",
                    f"The tests that load the embedded model are marked `@pytest.mark.{MARK}` and run in",
                    "a pytest subprocess of their own: a native crash there fails that test only",
                    "(tests/isolation.py).",
                    f"Otherwise its {call.when} {_OUTCOME[report.outcome]}"
                    + (":" if report.longrepr else "."),
                    report.longreprtext,
                ]
            )
            report.outcome = "failed"
            report.longrepr = _Failure.at(item, NOT_MARKED, details)
            if hasattr(report, "wasxfail"):
                del report.wasxfail
        return report  # pyright: ignore[reportReturnType]

    def pytest_sessionfinish(self) -> None:
        for module in self._modules.values():
            module.close()

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self._isolated:
            terminalreporter.write_line(
                f"isolation: {self._isolated} `{MARK}` test(s) of {len(self._modules)} module(s) ran in "
                f"{self.children} subprocess(es) in {self._seconds:.2f} s "
                f"(waiting for them to start: {self.start_up_seconds:.2f} s); {self.crashes} crashed"
            )

    def pytest_unconfigure(self) -> None:
        self.pytest_sessionfinish()
        self._guard.close()


# ---- the child -----------------------------------------------------------------------------------------


class _ChildSide:
    """The plugin in a child: runs its tests in the order given, each when told, and reports them."""

    def __init__(self, config: pytest.Config, channel: str) -> None:
        self._config = config
        try:
            control, reports = (int(fd) for fd in channel.split(","))
            os.set_inheritable(control, False)  # not for the processes its tests start
            os.set_inheritable(reports, False)
        except (ValueError, OSError) as error:
            raise pytest.UsageError(
                f"{CHILD_OPTION} is for tests/isolation.py only: it takes two open file descriptors "
                f"'CONTROL,REPORTS', not {channel!r} ({error})"
            ) from None
        self._control: IO[bytes] = os.fdopen(control, "rb")
        self._reports: IO[str] = os.fdopen(reports, "w", encoding="utf-8")
        # The output file, as faulthandler has it: pytest captures fd 2 during tests, not this copy.
        self._output = os.dup(2)
        os.set_inheritable(self._output, False)

    def _printed(self) -> int:
        # How much the child printed so far (its stdout is unbuffered: all of it is in the file).
        return os.fstat(self._output).st_size

    def _send(self, record: dict[str, Any]) -> None:
        self._reports.write(json.dumps(record, default=repr) + "\n")
        self._reports.flush()

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        # The parent asks for its tests in its order: the order of the node ids given.
        order = {nodeid: index for index, nodeid in enumerate(config.args)}
        items.sort(key=lambda item: order.get(item.nodeid, len(order)))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> None:
        self._send({"ready": item.nodeid})
        if not self._control.readline():
            pytest.exit("the parent pytest process stopped", returncode=pytest.ExitCode.INTERRUPTED)

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self._send({"start": nodeid, "output": self._printed()})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        hook = self._config.hook
        self._send({"report": hook.pytest_report_to_serializable(config=self._config, report=report)})

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self._send({"finish": nodeid, "output": self._printed()})

    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage, when: str, nodeid: str):
        if when != "runtest":  # the parent collected the same module: it has those already
            return
        category = warning_message.category
        self._send(
            {
                "warning": {
                    "category": f"{category.__module__}.{category.__qualname__}",
                    "message": str(warning_message.message),
                    "filename": warning_message.filename,
                    "lineno": warning_message.lineno,
                    "nodeid": nodeid,
                }
            }
        )
