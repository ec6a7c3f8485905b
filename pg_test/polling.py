"""Bounded polling for the out-of-process suites (clients, reliability, monitoring) and the
Python client's tests (clients/python/tests):
the one wait_until they share. It guards against hangs only; behaviour between sessions is
asserted on what the server reports, not on how long something took."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.01, what: str = "condition") -> T:
    """Polls predicate() until it returns a truthy value, which it returns; fails after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
