"""Retry policy and the per-run retry budget.

A :class:`RetryPolicy` says how one call retries (attempts, exponential backoff with jitter, honouring a
server's ``Retry-After``). A :class:`RetryBudget` caps the retries of a whole run: every call of the run
draws from the same budget, so ten model calls that each hit a flaky server cannot retry forty times
between them. Errors opt in to retrying by carrying ``retryable = True`` (and optionally
``retry_after`` seconds), as every :class:`rxagent.model.ModelError` does.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "RetryAttempt",
    "RetryBudget",
    "RetryExhausted",
    "RetryPolicy",
    "is_retryable",
    "plan_retry",
    "retry_after_of",
]


def is_retryable(error: BaseException) -> bool:
    """True when ``error`` says it may succeed on a new attempt (its ``retryable`` attribute)."""
    return bool(getattr(error, "retryable", False))


def retry_after_of(error: BaseException) -> float | None:
    """The server-requested wait in seconds carried by ``error`` (``retry_after``), if any."""
    value = getattr(error, "retry_after", None)
    return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How one call retries.

    The n-th retry (n = 1, 2, …) waits ``min(max_delay, base_delay * multiplier ** (n - 1))`` scaled by a
    random factor in ``[1 - jitter, 1 + jitter]``; a server's ``Retry-After`` replaces that wait when it is
    longer (and no longer than ``max_retry_after``: a longer demand fails the call rather than stall it).
    The waits themselves run on the clock of whatever retries (``retry_backoff(clock=...)``, the model's
    ``clock``).

    Attributes:
        max_attempts: attempts per call, the first included (1 disables retrying).
        base_delay: wait before the first retry, seconds.
        multiplier: growth of the wait per retry.
        max_delay: cap on the computed wait.
        jitter: relative spread of the random factor, 0 to 1.
        max_retry_after: longest ``Retry-After`` the policy will honour.
        rng: the jitter's random source, uniform in ``[0, 1)``: the ``random`` module's by default;
            ``random.Random(seed).random`` makes the waits reproducible.

    Example:
        >>> import random
        >>> policy = RetryPolicy(base_delay=1.0, jitter=0.5, rng=random.Random(7).random)
        >>> [round(policy.delay(n, Exception()), 3) for n in (1, 2, 3)]
        [0.824, 1.302, 4.604]
    """

    max_attempts: int = 4
    base_delay: float = 0.5
    multiplier: float = 2.0
    max_delay: float = 20.0
    jitter: float = 0.25
    max_retry_after: float = 60.0
    rng: Callable[[], float] = field(default=random.random, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_delay < 0 or self.max_delay < 0 or self.multiplier < 1:
            raise ValueError("delays must be >= 0 and multiplier >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")

    def delay(self, retry_number: int, error: BaseException) -> float | None:
        """Seconds to wait before retry number ``retry_number`` (1-based) after ``error``.

        Returns ``None`` when the server asked for a wait longer than ``max_retry_after``.

        Raises:
            ValueError: ``rng`` returned a number outside ``[0, 1]``.
        """
        backoff = min(self.max_delay, self.base_delay * self.multiplier ** (retry_number - 1))
        wait = backoff
        if self.jitter:
            draw = self.rng()
            if not 0 <= draw <= 1:
                raise ValueError(f"RetryPolicy.rng must return a number between 0 and 1, got {draw!r}")
            wait = backoff * (1 - self.jitter + 2 * self.jitter * draw)
        server_wait = retry_after_of(error)
        if server_wait is not None:
            if server_wait > self.max_retry_after:
                return None
            wait = max(wait, server_wait)
        return wait


@dataclass(frozen=True, slots=True)
class RetryAttempt:
    """One retry about to happen: which retry of the call, how long it waits, and the error that caused it."""

    retry_number: int
    delay: float
    error: BaseException
    budget_remaining: int | None


@dataclass(eq=False)
class RetryBudget:
    """Retries allowed for a whole run, shared by every call in it.

    Create one per run and pass it to every request of the run (``ChatRequest.retry_budget``). Listeners
    added with :meth:`add_listener` hear about each retry (the agent turns them into events).

    Example:
        >>> budget = RetryBudget(max_retries=2)
        >>> budget.try_spend(), budget.try_spend(), budget.try_spend()
        (True, True, False)
    """

    max_retries: int = 8
    used: int = 0
    # A tuple, replaced on change: a run rarely adds a listener, and an empty tuple is no object for the
    # garbage collector to walk while the run is in flight (an empty list per run would be).
    _listeners: tuple[Callable[[RetryAttempt], None], ...] = field(default=(), repr=False)

    @property
    def remaining(self) -> int:
        """Retries still allowed."""
        return max(0, self.max_retries - self.used)

    def try_spend(self) -> bool:
        """Take one retry from the budget; False when none is left."""
        if self.used >= self.max_retries:
            return False
        self.used += 1
        return True

    def add_listener(self, listener: Callable[[RetryAttempt], None]) -> Callable[[], None]:
        """Call ``listener`` before every retry drawn from this budget; returns a function that removes it."""
        self._listeners = (*self._listeners, listener)
        return _Removal(self, listener)

    def notify(self, attempt: RetryAttempt) -> None:
        """Tell the listeners about ``attempt`` (called by the retrying operator)."""
        for listener in self._listeners:
            listener(attempt)


class _Removal:
    """Removes one listener from a budget when called (one slotted object per model call, not a closure)."""

    __slots__ = ("_budget", "_listener")

    def __init__(self, budget: RetryBudget, listener: Callable[[RetryAttempt], None]) -> None:
        self._budget = budget
        self._listener = listener

    def __call__(self) -> None:
        budget = self._budget
        listeners = list(budget._listeners)  # pyright: ignore[reportPrivateUsage] - the budget's own helper
        if self._listener not in listeners:
            raise ValueError("this listener was removed from the retry budget already")
        listeners.remove(self._listener)
        budget._listeners = tuple(listeners)  # pyright: ignore[reportPrivateUsage]


class RetryExhausted(Exception):
    """A retryable error that could not be retried any more; ``__cause__`` and ``last_error`` hold it."""

    def __init__(
        self, last_error: BaseException, attempts: int, why: Literal["attempts", "budget", "retry_after"]
    ) -> None:
        reasons = {
            "attempts": f"gave up after {attempts} attempts",
            "budget": f"the run's retry budget is exhausted (after {attempts} attempts of this call)",
            "retry_after": "the server asked to wait longer than the policy allows",
        }
        super().__init__(f"{reasons[why]}: {last_error}")
        self.last_error = last_error
        self.attempts = attempts
        self.why = why


def plan_retry(
    policy: RetryPolicy, attempts: int, error: BaseException, budget: RetryBudget | None
) -> float | RetryExhausted:
    """Decide whether a retryable ``error`` after ``attempts`` attempts gets another one.

    Returns the seconds to wait before it (having spent one retry of ``budget`` and told its listeners),
    or the :class:`RetryExhausted` to fail with (attempts used up, ``Retry-After`` over the cap, or the
    run's budget spent). The caller checks first that the error is retryable and that nothing was emitted.

    Raises:
        Exception: whatever a budget listener raises (a listener's bug ends the call, visibly).
    """
    if attempts >= policy.max_attempts:
        return RetryExhausted(error, attempts, "attempts")
    delay = policy.delay(attempts, error)
    if delay is None:
        return RetryExhausted(error, attempts, "retry_after")
    if budget is not None:
        if not budget.try_spend():
            return RetryExhausted(error, attempts, "budget")
        budget.notify(RetryAttempt(attempts, delay, error, budget.remaining))
    return delay
