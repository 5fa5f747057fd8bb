"""Progress of a fan-out: counts of its items (waiting, running, done, failed) and a bar that shows them.

``map_concurrent`` (and ``ReActAgent.map_runs`` on it) keeps a :class:`Tally` per subscription when asked
for progress and hands every change to a :class:`ProgressDisplay`; :class:`TqdmProgress` is the display
for notebooks and terminals (``tqdm.auto`` picks the widget or the text bar). tqdm is optional (the
``notebook`` extra): it is imported when a bar is asked for, so rxagent imports without it, and asking
for a bar without it fails when the operator is built, not halfway through a batch.
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

__all__ = [
    "ProgressCounts",
    "ProgressDisplay",
    "ProgressFactory",
    "ProgressOption",
    "Tally",
    "TqdmProgress",
    "progress_factory",
]


@dataclass(frozen=True, slots=True)
class ProgressCounts:
    """Where a fan-out stands.

    Attributes:
        total: items that arrived so far (all of them once ``inputs_done``).
        running: items whose stream is running now.
        done: items whose stream ended well.
        failed: items whose stream failed, or emitted an item the operator counts as a failure.
        inputs_done: the source completed, so ``total`` is final.
    """

    total: int
    running: int
    done: int
    failed: int
    inputs_done: bool

    @property
    def finished(self) -> int:
        """Items that ended, well or not."""
        return self.done + self.failed

    @property
    def waiting(self) -> int:
        """Items that arrived and wait for a place (or never got one: the fan-out was stopped)."""
        return self.total - self.finished - self.running


class ProgressDisplay(Protocol):
    """What shows a fan-out's progress: told every change, then closed once when the fan-out ends."""

    def update(self, counts: ProgressCounts, /) -> None:
        """Show ``counts``."""
        ...

    def close(self) -> None:
        """The fan-out ended (completed, failed or cancelled); the last ``update`` had its final counts."""
        ...


ProgressFactory: TypeAlias = Callable[[], ProgressDisplay]
"""Makes the display of one subscription."""

ProgressOption: TypeAlias = bool | str | ProgressFactory
"""``False``: no progress; ``True``: a tqdm bar; a text: a tqdm bar with that label; a factory: yours."""


class TqdmProgress:
    """A :class:`ProgressDisplay` drawn by ``tqdm.auto``: a widget in a notebook, a text bar in a terminal.

    The bar counts finished items out of the total, with the counts beside it::

        questions:  45%|████▌     | 9/20 [00:01<00:01, 7.51run/s, done=8, failed=1, running=4]

    The bar appears with the first update, sized to the inputs that arrived by then when the source had
    completed (a list's items all arrive at subscription); inputs still streaming in leave the total open
    until they complete. tqdm limits how often it redraws (``mininterval``), so an update costs little.

    Args:
        description: the label before the bar.
        unit: what one item is called (``"run"``, ``"it"``).
        options: more keyword arguments for ``tqdm`` (``file=``, ``mininterval=``, ``leave=``, ...).

    Raises:
        ImportError: tqdm is not installed (``pip install 'rxagent[notebook]'``).
    """

    def __init__(self, description: str = "", *, unit: str = "it", **options: Any) -> None:
        self._tqdm: Any = _tqdm_class()
        self._description = description
        self._unit = unit
        self._options = options
        self._bar: Any = None
        self._last: ProgressCounts | None = None
        self._every = float(options.get("mininterval", 0.1))
        self._labelled = -math.inf

    @property
    def bar(self) -> Any:
        """The ``tqdm`` bar (``None`` before the first update)."""
        return self._bar

    def update(self, counts: ProgressCounts, /) -> None:
        """Move the bar to ``counts.finished`` and show the done, failed and running counts beside it."""
        self._last = counts
        total = counts.total if counts.inputs_done else None
        bar = self._bar
        if bar is None:
            bar = self._bar = self._tqdm(
                total=total,
                desc=self._description or None,
                unit=self._unit,
                postfix=_postfix(counts),
                **self._options,
            )
        elif total is not None and bar.total != total:
            # The inputs have all arrived: give the bar its length. reset() is how tqdm (and its notebook
            # widget) takes a new total; the elapsed time carries over.
            started = bar.start_t
            bar.reset(total=total)
            bar.start_t = started
        # Formatting the counts costs more than the rest of an update: do it at most as often as tqdm
        # redraws (the counts shown lag by at most that long; close() shows the final ones).
        now = time.monotonic()
        if now - self._labelled >= self._every:
            self._labelled = now
            bar.set_postfix(_postfix(counts), refresh=False)
        if counts.finished != bar.n:
            bar.update(counts.finished - bar.n)

    def close(self) -> None:
        """Close the bar, drawn with its final counts (in a notebook: green, or red if items are left)."""
        if self._bar is not None:
            if self._last is not None:
                self._bar.set_postfix(_postfix(self._last), refresh=False)
            self._bar.close()


def _postfix(counts: ProgressCounts) -> dict[str, int]:
    return {"done": counts.done, "failed": counts.failed, "running": counts.running}


def _tqdm_class() -> Any:
    try:
        return importlib.import_module("tqdm.auto").tqdm
    except ImportError:
        raise ImportError(
            "progress=True draws a bar with tqdm, which is not installed: pip install 'rxagent[notebook]' "
            "(or tqdm); or pass progress= a factory of your own ProgressDisplay"
        ) from None


def progress_factory(option: ProgressOption, *, unit: str = "it") -> ProgressFactory | None:
    """The display factory ``option`` asks for (``None``: no progress), checked now.

    Raises:
        ImportError: a tqdm bar is asked for and tqdm is not installed.
        TypeError: ``option`` is neither a bool, a text nor a callable.
    """
    if option is False:
        return None
    if option is True or isinstance(option, str):
        _tqdm_class()  # fail now, not when the batch is under way
        description = option if isinstance(option, str) else ""
        return lambda: TqdmProgress(description, unit=unit)
    if callable(option):
        return option
    raise TypeError(
        f"progress must be True, False, a label or a factory of ProgressDisplay, not {type(option).__name__}"
    )


class Tally:
    """The counts of one subscription of a fan-out, handed to its display as they change.

    The fan-out calls :meth:`arrived` per input, :meth:`inputs_completed`, :meth:`started` and
    :meth:`ended` per inner stream, :meth:`show` once it has subscribed to its source (changes before
    that are counted, not drawn: a source that emits at subscription then draws one bar of known length),
    and :meth:`close` exactly once, however it ends.

    The display is user code: the first error it raises turns it off and is kept in :attr:`failure`, for
    the fan-out to fail with (a broken display is a bug to see, but it must not leave the fan-out's
    bookkeeping half done).
    """

    __slots__ = ("_display", "_done", "_failed", "_inputs_done", "_running", "_shown", "_total", "failure")

    def __init__(self, display: ProgressDisplay) -> None:
        self._display: ProgressDisplay | None = display
        self._total = 0
        self._running = 0
        self._done = 0
        self._failed = 0
        self._inputs_done = False
        self._shown = False
        self.failure: Exception | None = None
        """The first error the display raised (it is not called again)."""

    @property
    def counts(self) -> ProgressCounts:
        """The counts now."""
        return ProgressCounts(self._total, self._running, self._done, self._failed, self._inputs_done)

    def _draw(self, closing: bool = False) -> None:
        display = self._display
        if display is None:
            return
        try:
            display.update(self.counts)
            if closing:
                self._display = None
                display.close()
        except Exception as error:
            self._display = None
            self.failure = error

    def arrived(self) -> None:
        """An input arrived."""
        self._total += 1
        if self._shown:
            self._draw()

    def inputs_completed(self) -> None:
        """The source completed: the total is final."""
        self._inputs_done = True
        if self._shown:
            self._draw()

    def started(self) -> None:
        """An inner stream was subscribed."""
        self._running += 1
        if self._shown:
            self._draw()

    def ended(self, failed: bool) -> None:
        """An inner stream ended, well or not."""
        self._running -= 1
        if failed:
            self._failed += 1
        else:
            self._done += 1
        if self._shown:
            self._draw()

    def show(self) -> None:
        """Start drawing: the counts so far, then every change."""
        if not self._shown:
            self._shown = True
            self._draw()

    def close(self, cancelled: bool = False) -> None:
        """Draw the final counts (``cancelled``: what ran was stopped, so nothing runs now) and close the
        display; later calls do nothing."""
        if cancelled:
            self._running = 0
        self._shown = True
        self._draw(closing=True)
