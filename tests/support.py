"""Small helpers shared by tests (not fixtures)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    """Poll `predicate` until it returns something truthy (returned), or fail the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what or getattr(predicate, '__name__', predicate)}")
