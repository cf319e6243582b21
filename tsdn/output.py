"""How the command line prints: aligned tables for people, JSON for programs, errors to stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from sdn_app.core.errors import TsdnError

# Exit codes: 1 when the network says no (no capacity, no route), 2 for bad input.
EXIT_REFUSED = 1
EXIT_BAD_INPUT = 2


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Render rows under headers as left-aligned columns."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def print_json(data: Any) -> None:
    """Print `data` as indented JSON on stdout."""
    print(json.dumps(data, indent=2, sort_keys=False))


def fail(error: TsdnError | str, code: int | None = None) -> int:
    """Print `error` to stderr as `tsdn: error: ...` and return the exit code it deserves."""
    print(f"tsdn: error: {error}", file=sys.stderr)
    if code is not None:
        return code
    if isinstance(error, TsdnError) and error.code in ("RESOURCE_EXHAUSTED", "FAILED_PRECONDITION"):
        return EXIT_REFUSED
    return EXIT_BAD_INPUT
