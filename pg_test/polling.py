"""Bounded polling for the out-of-process suites (clients, reliability, monitoring, leases):
the one wait_until they share. It guards against hangs only; behaviour between sessions is
asserted on what the server reports, not on how long something took."""
import time


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.01, what: str = "condition"):
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
