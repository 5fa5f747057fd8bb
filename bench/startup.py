"""Start-up cost: what ``import rxagent`` costs next to ``import aiohttp``, in fresh processes.

Every figure comes from a fresh interpreter (``--repeats`` of them per figure, 5 by default, taken in turn
across the figures so that the machine's load falls on all of them alike; medians), after one child per
figure that is not counted (it writes the bytecode caches of a checkout that has none yet):

* **import time**: the child runs under ``python -X importtime``. It writes a marker line to stderr just
  before the statement, and the figure is the sum of the cumulative times of the imports at the top level
  after the marker, so the interpreter's own start (``site``, encodings, the editable install's finder)
  counts on neither side, and modules that start-up already loaded count on neither side either.
* **peak RSS**: ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` in the same child, after the statement.

The statements:

(a) ``import aiohttp``: the floor every asyncio HTTP client pays;
(b) ``import rxagent``: the package facade (its data, nothing loaded on first use);
(c) ``from rxagent import Agent, OpenAIChatModel``: what a program with the OpenAI-compatible client
    imports (aiohttp included);
(d) a one-delta run: ``Agent(ScriptedModel(["Hello!"])).call("Hi")`` under ``asyncio.run``, the imports
    included (peak RSS only);
(e) the client's floor: ``import aiohttp, reactivex`` and ``from pydantic import BaseModel, JsonValue``,
    the libraries (c) is built on (the messages are pydantic models, the agent is observables), with none
    of rxagent's own code.

Prints the figures, then ``client_import_ratio`` ((c) ÷ (a)), ``client_floor_ratio`` ((e) ÷ (a): what
(c) would cost were rxagent's own modules free) and ``run_rss_mb`` ((d)), and as the last two
lines ``import_ratio: X`` ((b) ÷ (a); goal 1.5 or below) and ``rss_mb: X`` (peak RSS after (b); goal 45 or
below).

``--baseline DIR`` measures the rxagent of another checkout too (``DIR/rxagent``, e.g. a worktree of the
main branch before a change), its children taken in turn with this one's, so before and after come from
the same minutes; its rows are marked ``(baseline)``, and the ratios printed are this checkout's.

Run: ``.venv/bin/python bench/startup.py [--repeats N] [--baseline DIR]``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent
MARK = "bench/startup.py: the statement starts here"
IMPORT_LINE = re.compile(r"^import time:\s*(\d+) \|\s*(\d+) \| ( *)(\S+)$")

ONE_DELTA_RUN = """\
import asyncio
from rxagent import Agent, ScriptedModel

async def one_delta() -> None:
    result = await Agent(ScriptedModel(["Hello!"])).call("Hi")
    assert result.text == "Hello!", result

asyncio.run(one_delta())
"""

FLOOR = """\
import aiohttp, reactivex
from pydantic import BaseModel, JsonValue
"""

CHILD = """\
import resource, sys
sys.stderr.write({mark!r} + "\\n")
sys.stderr.flush()
{statement}
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(peak // 1024 if sys.platform == "darwin" else peak)  # macOS counts bytes, Linux KiB
print(getattr(sys.modules.get("rxagent"), "__file__", None))
"""


@dataclass(frozen=True)
class Figure:
    """One statement measured in one checkout."""

    label: str
    statement: str
    root: Path
    timed: bool = True


@dataclass
class Samples:
    """What the children of one :class:`Figure` measured."""

    import_us: list[int] = field(default_factory=lambda: [])
    rss_kib: list[int] = field(default_factory=lambda: [])


def top_level_import_us(stderr: str) -> int:
    """The summed cumulative µs of the top-level imports ``-X importtime`` reported after the marker."""
    lines = stderr.splitlines()
    if MARK not in lines:
        raise RuntimeError(f"the child wrote no marker; its stderr:\n{stderr}")
    total = 0
    for line in lines[lines.index(MARK) + 1 :]:
        found = IMPORT_LINE.match(line)
        if found is not None and not found.group(3):
            total += int(found.group(2))
    return total


def measure(figure: Figure) -> tuple[int, int]:
    """Run ``figure`` in a fresh interpreter: (import µs, peak RSS KiB)."""
    inherited = os.environ.get("PYTHONPATH")
    path = os.pathsep.join([str(figure.root), *([inherited] if inherited else [])])
    env = {**os.environ, "PYTHONPATH": path}
    code = CHILD.format(mark=MARK, statement=figure.statement)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        cwd=figure.root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{figure.label}: the child failed:\n{done.stderr[-3000:]}")
    rss, loaded_from = done.stdout.split("\n")[:2]
    if loaded_from != "None" and not Path(loaded_from).resolve().is_relative_to(figure.root.resolve()):
        raise RuntimeError(f"{figure.label}: the child imported {loaded_from}, not the one in {figure.root}")
    return top_level_import_us(done.stderr), int(rss)


def figures_of(root: Path, suffix: str) -> list[Figure]:
    """The rxagent statements, measured in the checkout at ``root``."""
    return [
        Figure("import rxagent" + suffix, "import rxagent", root),
        Figure(
            "from rxagent import Agent, OpenAIChatModel" + suffix,
            "from rxagent import Agent, OpenAIChatModel",
            root,
        ),
        Figure("one-delta ScriptedModel run" + suffix, ONE_DELTA_RUN, root, timed=False),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description="Start-up cost of rxagent vs. aiohttp, in fresh processes.")
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per figure (default 5)")
    parser.add_argument("--baseline", type=Path, help="another checkout whose rxagent to measure as well")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be 1 or more")
    if args.baseline is not None and not (args.baseline / "rxagent" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: no rxagent package there")

    aiohttp = Figure("import aiohttp", "import aiohttp", ROOT)
    floor = Figure("aiohttp, reactivex, pydantic (the floor)", FLOOR, ROOT)
    ours = figures_of(ROOT, "")
    figures = [aiohttp, floor, *ours]
    if args.baseline is not None:
        figures += figures_of(args.baseline, " (baseline)")
    for figure in figures:
        measure(figure)  # not counted: writes the bytecode caches of a checkout measured for the first time
    samples = {figure: Samples() for figure in figures}
    for _ in range(args.repeats):
        for figure in figures:
            import_us, rss_kib = measure(figure)
            samples[figure].import_us.append(import_us)
            samples[figure].rss_kib.append(rss_kib)

    def import_ms(figure: Figure) -> float:
        return statistics.median(samples[figure].import_us) / 1000

    def rss_mb(figure: Figure) -> float:
        return statistics.median(samples[figure].rss_kib) / 1024

    print(
        textwrap.dedent(f"""\
        python {sys.version.split()[0]}, {args.repeats} fresh processes per figure, medians
        import ms: the sum of -X importtime's cumulative figures for the statement's top-level imports
        (the interpreter's start left out); peak RSS: ru_maxrss in the child after the statement""")
    )
    width = max(len(figure.label) for figure in figures)
    print(f"{'':{width}}  {'import ms':>10}  {'peak RSS MB':>11}")
    for figure in figures:
        timed = f"{import_ms(figure):10.1f}" if figure.timed else f"{'-':>10}"
        print(f"{figure.label:{width}}  {timed}  {rss_mb(figure):11.1f}")
    facade, client, run = ours
    print(f"client_import_ratio: {import_ms(client) / import_ms(aiohttp):.2f}")
    print(f"client_floor_ratio: {import_ms(floor) / import_ms(aiohttp):.2f}")
    print(f"run_rss_mb: {rss_mb(run):.1f}")
    print(f"import_ratio: {import_ms(facade) / import_ms(aiohttp):.2f}")
    print(f"rss_mb: {rss_mb(facade):.1f}")


if __name__ == "__main__":
    main()
