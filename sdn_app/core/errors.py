"""Errors the core raises, each tied to the northbound status code it becomes.

Every message is written for the person who must act on it: it names the file, field,
DTN, link or reservation at fault and, where it helps, what would be accepted.
"""

from __future__ import annotations


class TsdnError(Exception):
    """Base of every error the core raises on purpose."""

    code = "UNKNOWN"


class InvalidArgument(TsdnError):
    """The request or file is malformed; nothing was changed."""

    code = "INVALID_ARGUMENT"


class NotFound(TsdnError):
    """A named DTN, switch, link or reservation does not exist."""

    code = "NOT_FOUND"


class AlreadyExists(TsdnError):
    """An object with that id already exists."""

    code = "ALREADY_EXISTS"


class FailedPrecondition(TsdnError):
    """The request is well formed but the network's shape rules it out (no route at all)."""

    code = "FAILED_PRECONDITION"


class NoCapacity(TsdnError):
    """A route exists but no route has the bandwidth in the window; names the bottleneck."""

    code = "RESOURCE_EXHAUSTED"

    def __init__(self, message: str, bottleneck: str | None = None, free_bps: int | None = None):
        super().__init__(message)
        self.bottleneck = bottleneck
        self.free_bps = free_bps


class TopologyError(InvalidArgument):
    """A topology file is invalid; `problems` lists every `file: field.path: what` found."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        shown = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"invalid topology ({len(problems)} problem(s)):\n{shown}")


class PermissionDenied(TsdnError):
    """The caller is known but may not do this (someone else's reservation, wrong role)."""

    code = "PERMISSION_DENIED"


class Unauthenticated(TsdnError):
    """The caller did not prove who it is (no token, or an unknown one)."""

    code = "UNAUTHENTICATED"


class Unavailable(TsdnError):
    """The controller cannot serve this now; the same call may succeed later or on another controller."""

    code = "UNAVAILABLE"


class Fenced(Unavailable):
    """This controller lost the right to write the shared state (another one leads now); nothing was written."""
