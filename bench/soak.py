"""Soak: many concurrent sessions, turn after turn, in one process. Does a turn cost more as sessions pile
up, or as their history grows?

``--sessions`` sessions (default 1 000) take ``--rounds`` turns each (default 10): in round ``r`` every
session runs its ``r``-th turn, all at once on one event loop, through one
:class:`~rxagent.agent.ReActAgent`. A turn is a tool round: the model (a
:class:`~rxagent.model.scripted.FunctionModel`, no network) calls one tool, then answers. Each
configuration runs in a fresh child process (so the runs do not share a heap), on the in-memory store
and on SQLite (a temporary file), with ``--sessions`` sessions and with a tenth of them, ``--repeats``
times (default 3) in alternation (see **Noise** for what the figures take of the runs).

Measured with ``time.process_time`` (every thread of the process: the SQLite store's too):

- ``round 10 / round 2``: the CPU per turn that a least-squares line through rounds 2 to 10 gives for round
  10, ÷ the line's value for round 2 (round 1 creates the sessions). The history grows by four messages a
  turn; goal <= 1.3. A line, not the two rounds alone, for two reasons. How many of the collector's full
  collections fall in one round is a whole number (one or two a round at 1 000 sessions, in the same
  rounds from run to run of the same code, and in others after any change to what a turn allocates),
  and each costs a large part of its round: the ratio of two rounds said partly which of them got the
  second one. And one round is a second of CPU, which another process's load moves by 10–30 %: three runs
  of the same code in the same minutes gave 1.06, 1.08 and 1.61 (1.46 without the collector's CPU).
  Every round's CPU is counted, the collector's too; the ratio of the two rounds alone is printed beside.
- ``1000 vs 100``: CPU per turn over all rounds with ``--sessions`` sessions ÷ with a tenth of them;
  goal <= 1.2.
- the cyclic garbage collector's share of the CPU (timed through ``gc.callbacks``), its full collections
  in each round, and the objects they walked per turn (every object tracked as each one began): the
  collector's work, which no other process's load moves. Beside them, its CPU per turn by generation,
  its collections per 1 000 turns by generation, the net container allocations per turn that the young
  collections say (701 × generation-0 collections ÷ turns), and how often the 25 % rule held a due full
  collection back (see **Why full collections cost more per turn at 1 000 sessions**).
- RSS per idle session: resident memory after the soak (``gc.collect()`` first) minus before the agent
  existed, ÷ sessions. Idle sessions are those whose projection the agent keeps in memory between turns
  (the in-memory store also holds every session's log).

**Noise.** The runs alternate (each repeat runs every store at both sizes, in turn), so that a change in
the machine's load falls on every configuration alike. Another process's load only ever adds to a run's
CPU (on 2 cores that share caches, by 10–40 % for a round), while what rxagent and the collector do is
nearly the same from run to run of the same code (the same full collections in the same rounds, but for
a thread's timing on SQLite). So the figures are of the least CPU each round took in any of the
``--repeats`` runs (default 3): the run the machine disturbed least, round by round (``timeit``'s
reasoning). The medians of the runs' own ratios, and their range, are printed beside, with the load
average before and after.

Each configuration runs twice over (``--gc both``, the default): with Python's own collector settings
(thresholds 700, 10, 10, nothing frozen), and with the first threshold ``rxagent serve`` sets
(:data:`rxagent.cli.SERVE_GC_THRESHOLD`; the library itself leaves the collector alone). ``--gc default``
runs only the first, what a notebook or a batch job gets; ``--gc serve`` only the second;
``--gc-threshold N`` only ``gc.set_threshold(N, 10, 10)``. With 1 000 turns going at once, each keeps its
container objects alive (its subscriptions, its messages: ``bench/turn_objects.py`` counts them); under
Python's thresholds they reach the old generation, whose full collections then walk every session's
history.

**Why full collections cost more per turn at 1 000 sessions** (CPython 3.11's rules). A young collection
runs every 701 net allocations of container objects (allocations less deallocations since the last one,
never below zero), a generation-1 collection every 11th of them, and a full collection every 11th
generation-1 collection (about 85 000 net allocations) unless fewer objects were promoted since the last
one than a quarter of those it left (the 25 % rule, which makes a growing heap's full collections cost
a constant per promoted object). Here the rule never holds one back: with hundreds of turns in flight,
nearly everything a turn holds survives two young collections and is promoted, its in-flight objects
too, so full collections come at a fixed rate per net allocation, at 100 sessions and at 1 000 alike.
Each walks the whole heap, which the idle sessions' histories make about four times larger at 1 000
(22 containers per turn of history). So the full collections' CPU per turn is about (net allocations
per turn ÷ 85 000) × heap × the cost of an object, and grows with the sessions; the net allocations
per turn are what a turn in flight holds at its peak (every turn reaches its peak before any ends) plus
what it leaves in the history. Measured on the memory store at 1 000 sessions: 50 more containers held
by each turn from its tool call to its answer made 48 more net allocations per turn, 20 full
collections instead of 15, and 100–130 µs more CPU per turn; at 100 sessions, no more full collections.

Last lines, for the first setting run (Python's own unless ``--gc serve`` or ``--gc-threshold``), one per
store, the SQLite size ratio last::

    memory_round_ratio: X    round 10 / round 2 at --sessions sessions (goal <= 1.3)
    sqlite_round_ratio: X
    memory_size_ratio: X     CPU per turn at --sessions sessions / at a tenth of them (goal <= 1.2)
    sqlite_size_ratio: X

Run: ``.venv/bin/python bench/soak.py [--gc default|serve|both] [--sessions N] [--rounds N] [--repeats N]
[--gc-threshold N]`` (about 4 minutes on 2 cores for each setting).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _session_agent import agent_on, question

from rxagent.cli import SERVE_GC_THRESHOLD
from rxagent.context import RuntimeContext
from rxagent.session import MemoryStore, SessionStore, SQLiteStore

__all__ = ["main"]


def rss_bytes() -> int:
    """This process's resident memory now (not the peak)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class GCTimer:
    """CPU spent in the cyclic garbage collector by generation, its collections, and the objects its full
    collections walked, from ``gc.callbacks``.

    The objects are counted (``len(gc.get_objects())``) as a full collection starts: a figure no other
    process's load moves. Counting takes a few milliseconds a collection; that CPU is kept in
    :attr:`counting`, which the soak takes off the rounds' CPU.
    """

    def __init__(self) -> None:
        self.by_generation = [0.0, 0.0, 0.0]
        """CPU in collections of each generation (a collection of generation 2 is a full one)."""
        self.collections = [0, 0, 0]
        self.held_back = 0
        """Young collections that began while generation 2's count was past its threshold: a full
        collection was due, and the 25 % rule held it back (see the module)."""
        self.walked = 0
        self.counting = 0.0
        self._start = 0.0

    @property
    def seconds(self) -> float:
        """CPU in every collection."""
        return sum(self.by_generation)

    @property
    def full(self) -> int:
        """Full collections."""
        return self.collections[2]

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        generation: int = info["generation"]
        if phase == "start":
            if generation == 2:
                began = time.process_time()
                self.walked += len(gc.get_objects())
                self.counting += time.process_time() - began
            elif gc.get_count()[2] > gc.get_threshold()[2]:
                self.held_back += 1
            self._start = time.process_time()
        else:
            self.by_generation[generation] += time.process_time() - self._start
            self.collections[generation] += 1


async def soak(store: SessionStore, sessions: int, rounds: int) -> dict[str, Any]:
    """The rounds on ``store``: CPU per round, GC share, RSS per idle session."""
    gc.collect()
    rss_before = rss_bytes()
    agent = agent_on(store, ("lookup",), parallel=False)
    contexts = [RuntimeContext(user_id="soak", session_id=f"s{i}") for i in range(sessions)]
    timer = GCTimer()
    gc.callbacks.append(timer)
    per_round: list[float] = []
    gc_per_round: list[float] = []
    full_per_round: list[int] = []
    try:
        for turn in range(1, rounds + 1):
            text = question(turn)
            cpu, gc_before, full_before = time.process_time(), timer.seconds, timer.full
            counting = timer.counting
            results = await asyncio.gather(*(agent.call(text, ctx) for ctx in contexts))
            per_round.append(time.process_time() - cpu - (timer.counting - counting))
            gc_per_round.append(timer.seconds - gc_before)
            full_per_round.append(timer.full - full_before)
            assert all(r.reason == "MODEL_STOP" for r in results)
        await agent.aclose()
    finally:
        gc.callbacks.remove(timer)
    gc.collect()
    rss_after = rss_bytes()
    messages = len((await agent.sessions.state(contexts[0])).messages)
    return {
        "per_round": per_round,
        "gc_per_round": gc_per_round,
        "full_collections": timer.full,
        "full_per_round": full_per_round,
        "walked_per_turn": timer.walked / (sessions * rounds),
        "gc_by_generation": timer.by_generation,
        "collections": timer.collections,
        "held_back": timer.held_back,
        "rss_per_session": (rss_after - rss_before) / sessions,
        "messages": messages,
    }


async def one(kind: str, sessions: int, rounds: int) -> dict[str, Any]:
    if kind == "memory":
        return await soak(MemoryStore(), sessions, rounds)
    with tempfile.TemporaryDirectory() as folder:
        async with SQLiteStore(Path(folder) / "soak.db") as store:
            return await soak(store, sessions, rounds)


def run_child(kind: str, sessions: int, rounds: int, threshold: int | None) -> dict[str, Any]:
    """One configuration in a fresh process (see the module)."""
    tuning = ["--gc-threshold", str(threshold)] if threshold is not None else []
    output = subprocess.run(
        [
            sys.executable,
            __file__,
            "--one",
            kind,
            "--sessions",
            str(sessions),
            "--rounds",
            str(rounds),
            *tuning,
        ],
        check=True,
        stdout=subprocess.PIPE,  # its stderr is ours: a failing child says why
        text=True,
    ).stdout
    result: dict[str, Any] = json.loads(output.splitlines()[-1])
    return result


def growth(per_turn: list[float]) -> float:
    """The last round ÷ round 2, both read off the least-squares line through rounds 2 to the last."""
    rounds = list(range(2, len(per_turn) + 1))
    slope, intercept = statistics.linear_regression(rounds, per_turn[1:])
    return (intercept + slope * rounds[-1]) / (intercept + slope * rounds[0])


def report(kind: str, sessions: int, result: dict[str, Any]) -> list[float]:
    """Print one configuration's run; returns its CPU per round."""
    per_round: list[float] = result["per_round"]
    rounds = len(per_round)
    per_turn = sum(per_round) / (rounds * sessions)
    ratio = growth(per_round)
    collector: list[float] = result["gc_per_round"]
    gc_share = sum(collector) / sum(per_round)
    without = growth([cpu - spent for cpu, spent in zip(per_round, collector, strict=True)])
    print(
        f"{kind}, {sessions} sessions x {rounds} rounds: CPU per turn {per_turn * 1e6:.0f} µs; round 2: "
        f"{per_round[1] / sessions * 1e6:.0f} µs/turn, round {rounds}: {per_round[-1] / sessions * 1e6:.0f} "
        f"µs/turn (round {rounds} / round 2: {ratio:.2f} along the line, {per_round[-1] / per_round[1]:.2f} "
        f"of the two rounds; without the gc's CPU: {without:.2f}); gc {gc_share:.0%} of the CPU, full "
        f"collections by round {result['full_per_round']}, which walked {result['walked_per_turn']:.0f} "
        f"objects per turn; RSS per idle session "
        f"{result['rss_per_session'] / 1e3:.1f} KB ({result['messages']} messages each)"
    )
    turns = rounds * sessions
    by_generation: list[float] = result["gc_by_generation"]
    collections: list[int] = result["collections"]
    print(
        f"  gc CPU per turn by generation {', '.join(f'{s / turns * 1e6:.0f}' for s in by_generation)} µs; "
        f"collections per 1 000 turns {', '.join(f'{n * 1000 / turns:.1f}' for n in collections)}; "
        f"net container allocations per turn {collections[0] * 701 / turns:.0f}; young collections "
        f"begun while the 25 % rule held a full one back: {result['held_back']}"
    )
    return per_round


def per_turn_ratio(many: list[float], sessions: int, few: list[float], few_sessions: int) -> float:
    """CPU per turn with ``sessions`` ÷ with ``few_sessions``, from the CPU of each run's rounds."""
    return (sum(many) / sessions) / (sum(few) / few_sessions)


def least(runs: list[list[float]]) -> list[float]:
    """Round by round, the least CPU any of the runs took (see the module)."""
    return [min(cpus) for cpus in zip(*runs, strict=True)]


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f}, {min(values):.2f} to {max(values):.2f}"


def load() -> str:
    """The machine's load averages over 1, 5 and 15 minutes."""
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each configuration (alternating)")
    parser.add_argument(
        "--gc",
        choices=["default", "serve", "both"],
        default="both",
        help="collector settings: Python's own, rxagent serve's threshold, or both (in that order)",
    )
    parser.add_argument(
        "--gc-threshold",
        type=int,
        metavar="N",
        help="run only with gc.set_threshold(N, 10, 10): an application's tuning (overrides --gc)",
    )
    parser.add_argument("--one", choices=["memory", "sqlite"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child: one configuration
        if args.gc_threshold is not None:
            gc.set_threshold(args.gc_threshold, 10, 10)
        print(json.dumps(asyncio.run(one(args.one, args.sessions, args.rounds))))
        return
    if args.rounds < 4 or args.sessions < 100 or args.repeats < 1:
        parser.error("--rounds must be at least 4, --sessions at least 100, --repeats at least 1")
    settings: dict[str, list[int | None]] = {
        "default": [None],
        "serve": [SERVE_GC_THRESHOLD],
        "both": [None, SERVE_GC_THRESHOLD],
    }
    tunings = [args.gc_threshold] if args.gc_threshold is not None else settings[args.gc]
    few = args.sessions // 10
    kinds = ("memory", "sqlite")
    print(f"load average before: {load()}")
    worst: dict[int | None, tuple[float, float]] = {}
    figures: dict[int | None, dict[str, tuple[float, float]]] = {}
    for threshold in tunings:
        print(f"gc thresholds: {(threshold, 10, 10) if threshold else gc.get_threshold()}")
        small: dict[str, list[list[float]]] = {kind: [] for kind in kinds}
        large: dict[str, list[list[float]]] = {kind: [] for kind in kinds}
        walked: dict[str, tuple[float, float]] = {}
        for _ in range(args.repeats):
            # Alternating, so that a change in the machine's load falls on every configuration alike.
            for kind in kinds:
                few_result = run_child(kind, few, args.rounds, threshold)
                small[kind].append(report(kind, few, few_result))
                many_result = run_child(kind, args.sessions, args.rounds, threshold)
                large[kind].append(report(kind, args.sessions, many_result))
                walked[kind] = (many_result["walked_per_turn"], few_result["walked_per_turn"])
        figures[threshold] = {}
        for kind in kinds:
            many, tenth = least(large[kind]), least(small[kind])
            round_ratio = growth(many)
            size_ratio = per_turn_ratio(many, args.sessions, tenth, few)
            figures[threshold][kind] = (round_ratio, size_ratio)
            # Beside them, the medians of the runs' own figures: how far apart the runs were.
            round_ratios = [growth(run) for run in large[kind]]
            size_ratios = [
                per_turn_ratio(a, args.sessions, b, few)
                for a, b in zip(large[kind], small[kind], strict=True)
            ]
            print(
                f"{kind}, least CPU of {args.repeats} runs by round: round {args.rounds} / round 2 at "
                f"{args.sessions} sessions: {round_ratio:.2f} (runs: {_spread(round_ratios)}); CPU per turn "
                f"at {args.sessions} sessions / at {few}: {size_ratio:.2f} (runs: {_spread(size_ratios)}); "
                f"objects walked by full collections per turn at {args.sessions} / at {few}: "
                f"{walked[kind][0]:.0f} / {walked[kind][1]:.0f}"
            )
        worst[threshold] = (
            max(r for r, _ in figures[threshold].values()),
            max(s for _, s in figures[threshold].values()),
        )
    print(f"cores: {os.cpu_count()}; load average after: {load()}")
    for threshold, (round_ratio, size_ratio) in worst.items():
        label = f"gc threshold {threshold}" if threshold else "Python's gc thresholds"
        print(f"{label}: worst round ratio {round_ratio:.2f}, worst size ratio {size_ratio:.2f}")
    first = figures[tunings[0]]
    for kind in kinds:
        print(f"{kind}_round_ratio: {first[kind][0]:.2f}")
    for kind in kinds:
        print(f"{kind}_size_ratio: {first[kind][1]:.2f}")


if __name__ == "__main__":
    main()
