"""Waiting in tests: poll a condition until it holds or a deadline passes (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], what: str, timeout: float = 10.0, interval: float = 0.05) -> T:
    """Return the first true value of `condition()`; fail naming `what` once `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)  # the polling interval of a condition with a deadline
