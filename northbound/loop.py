"""The asyncio event loop the gRPC server runs on, in a thread of its own.

The rest of the controller is threads (the core worker, the provisioner, OpenFlow, the live
map), and its callers (`tsdn controller`, tests) start and stop it from plain threads; they
reach the loop only through `LoopThread.run` and `LoopThread.call`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An event loop running forever on a daemon thread named `name`, until `close`."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def running(self) -> bool:
        """Whether the loop still runs (not closed)."""
        return not self.loop.is_closed() and self._thread.is_alive()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = 30.0) -> T:
        """Run `coroutine` on the loop and wait for its result (or error)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def call(self, fn: Callable[..., T], *args: Any, timeout: float | None = 30.0) -> T:
        """Run the plain function `fn(*args)` on the loop's thread and wait for its result (or error)."""
        async def on_loop() -> T:
            return fn(*args)
        return self.run(on_loop(), timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the loop, cancelling what still runs on it, and end its thread (again: nothing)."""
        if self.loop.is_closed():
            return

        async def cancel_the_rest() -> None:
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.loop.shutdown_asyncgens()
        if self._thread.is_alive():
            # closing regardless: a task that will not end must not keep the process up
            with contextlib.suppress(TimeoutError, RuntimeError):
                self.run(cancel_the_rest(), timeout)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()
