"""What every benchmark shares: human lines on stderr, the result as the last stdout line, and a
free loopback port for the processes it starts."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
from collections.abc import Callable


def say(line: str) -> None:
    """A human line on stderr."""
    print(line, file=sys.stderr, flush=True)


def print_result(name: str, produce: Callable[[], dict]) -> int:
    """Run `produce` and print its result as one JSON line (exit code 0), or say on stderr why
    the benchmark `name` could not run (a RuntimeError: exit code 1)."""
    try:
        result = produce()
    except RuntimeError as error:
        say(f"tsdn bench {name}: {error}")
        return 1
    with contextlib.suppress(BrokenPipeError):
        print(json.dumps(result), flush=True)
    return 0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
