"""The agents' wake times (`gateway_agent_wake_seconds`) are written once per event-loop pass, added up:
what one observation at a time would have written, and by the end of the pass that woke them."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from prometheus_client import CollectorRegistry, Histogram

from gateway_utils import metrics


def _series(registry: CollectorRegistry) -> dict[tuple, float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in registry.collect()
        for sample in family.samples
    }


def test_many_observations_added_up_are_what_one_at_a_time_writes():
    rnd = random.Random(7)
    values = [rnd.choice([0.0, 0.001, 0.0025, 1.0, 10.0, 11.0]) if rnd.random() < 0.3 else rnd.random() * 12 for _ in range(3000)]
    one, many = CollectorRegistry(), CollectorRegistry()
    by_one = Histogram("w", "w", buckets=metrics.WAKE_BUCKETS, registry=one)
    by_many = Histogram("w", "w", buckets=metrics.WAKE_BUCKETS, registry=many)
    for value in values:
        by_one.observe(value)
    metrics.observe_many(by_many, values)
    expected, got = _series(one), _series(many)
    assert expected.keys() == got.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-12), key


def test_waiters_woken_in_one_pass_are_counted_by_its_end():
    via = f"test-{time.monotonic_ns()}"
    histogram = metrics.WAKE_SECONDS.labels(via)

    def count() -> float:
        return sum(s.value for f in metrics.WAKE_SECONDS.collect() for s in f.samples
                   if s.name.endswith("_count") and s.labels.get("via") == via)  # fmt: skip

    async def scenario() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        for _ in range(50):
            metrics.agent_woken(via=via, decided_at=time.time() - 0.002, loop=loop)
        during = count()
        await asyncio.sleep(0)  # the pass ends
        await asyncio.sleep(0)
        return during, count()

    assert histogram is not None
    assert asyncio.run(scenario()) == (0, 50)
