"""Injectable time: the core never reads the wall clock directly."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Something that tells the current time in epoch seconds."""

    def now(self) -> float:
        """Return the current time in seconds since the Unix epoch."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> float:
        """Return `time.time()`."""
        return time.time()


class FakeClock:
    """A clock that moves only when told to, for tests and what-if runs."""

    def __init__(self, start: float = 1_479_081_600.0):  # 2016-11-14T00:00Z, SC16's first day
        self._now = float(start)

    def now(self) -> float:
        """Return the time this clock was set to."""
        return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward by `seconds` and return the new time."""
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self._now += seconds
        return self._now

    def set(self, epoch: float) -> None:
        """Set the clock to `epoch` (never earlier than now)."""
        if epoch < self._now:
            raise ValueError("a clock cannot go backwards")
        self._now = float(epoch)
