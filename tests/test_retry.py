"""RetryPolicy's waits and its jitter's random source, RetryBudget, plan_retry. Bad inputs tried: zero
attempts, negative delays, a multiplier under 1, jitter outside [0, 1], a random source returning 1.5,
-0.1 and NaN."""

from __future__ import annotations

import doctest
import random

import pytest

import rxagent.retry
from rxagent.retry import RetryAttempt, RetryBudget, RetryExhausted, RetryPolicy, plan_retry


class Flaky(Exception):
    retryable = True

    def __init__(self, retry_after: float | None = None) -> None:
        super().__init__("flaky")
        self.retry_after = retry_after


def test_waits_grow_exponentially_up_to_the_cap() -> None:
    policy = RetryPolicy(base_delay=0.5, multiplier=3, max_delay=10, jitter=0)
    assert [policy.delay(n, Flaky()) for n in (1, 2, 3, 4)] == [0.5, 1.5, 4.5, 10.0]


def test_the_jitter_spans_its_range_by_the_random_source() -> None:
    def policy(draw: float) -> RetryPolicy:
        return RetryPolicy(base_delay=2, jitter=0.25, rng=lambda: draw)

    assert policy(0.0).delay(1, Flaky()) == 1.5
    assert policy(0.5).delay(1, Flaky()) == 2.0
    assert policy(1.0).delay(1, Flaky()) == 2.5


def test_a_seeded_random_source_makes_the_waits_reproducible() -> None:
    def waits(seed: int) -> list[float | None]:
        policy = RetryPolicy(jitter=0.5, rng=random.Random(seed).random)
        return [policy.delay(n, Flaky()) for n in (1, 2, 3)]

    assert waits(11) == waits(11)
    assert waits(11) != waits(12)


def test_no_jitter_draws_nothing() -> None:
    def never() -> float:
        raise AssertionError("drawn without jitter")

    assert RetryPolicy(base_delay=1, jitter=0, rng=never).delay(1, Flaky()) == 1.0


@pytest.mark.parametrize("draw", [1.5, -0.1, float("nan")])
def test_a_random_source_out_of_range_is_a_clear_error(draw: float) -> None:
    with pytest.raises(ValueError, match="must return a number between 0 and 1"):
        RetryPolicy(rng=lambda: draw).delay(1, Flaky())


def test_retry_after_wins_when_longer_and_is_refused_over_the_cap() -> None:
    policy = RetryPolicy(base_delay=1, jitter=0, max_retry_after=30)
    assert policy.delay(1, Flaky(retry_after=7)) == 7
    assert policy.delay(1, Flaky(retry_after=0.5)) == 1.0
    assert policy.delay(1, Flaky(retry_after=31)) is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"base_delay": -1}, "delays must be"),
        ({"multiplier": 0.5}, "multiplier >= 1"),
        ({"jitter": 1.5}, "jitter must be"),
        ({"jitter": -0.1}, "jitter must be"),
    ],
)
def test_bad_policies_fail_at_construction(settings: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**settings)  # pyright: ignore[reportArgumentType]


def test_plan_retry_spends_the_budget_and_tells_its_listeners() -> None:
    budget = RetryBudget(max_retries=1)
    heard: list[RetryAttempt] = []
    budget.add_listener(heard.append)
    policy = RetryPolicy(base_delay=1, jitter=0)
    assert plan_retry(policy, 1, Flaky(), budget) == 1.0
    assert [(a.retry_number, a.delay, a.budget_remaining) for a in heard] == [(1, 1.0, 0)]
    refused = plan_retry(policy, 2, Flaky(), budget)
    assert isinstance(refused, RetryExhausted)
    assert refused.why == "budget"


def test_a_removed_listener_hears_nothing_more_and_the_others_still_do() -> None:
    budget = RetryBudget(max_retries=3)
    first: list[RetryAttempt] = []
    second: list[RetryAttempt] = []
    remove_first = budget.add_listener(first.append)
    budget.add_listener(second.append)
    policy = RetryPolicy(base_delay=1, jitter=0)
    plan_retry(policy, 1, Flaky(), budget)
    remove_first()
    plan_retry(policy, 2, Flaky(), budget)
    assert [a.retry_number for a in first] == [1]
    assert [a.retry_number for a in second] == [1, 2]
    with pytest.raises(ValueError, match="removed from the retry budget already"):
        remove_first()


def test_module_examples() -> None:
    results = doctest.testmod(rxagent.retry)
    assert results.attempted > 0
    assert results.failed == 0
