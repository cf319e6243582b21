"""Topology files shipped with tsdn, and tools that make or consume them.

`builtin_topology("sc16")` finds a shipped file by name, so every `--topology` option
accepts either a path or one of `BUILTIN_TOPOLOGIES`.
"""

from __future__ import annotations

from pathlib import Path

from sdn_app.core.errors import InvalidArgument

TOPOLOGY_DIR = Path(__file__).resolve().parent
BUILTIN_TOPOLOGIES = ("sc16", "ring8", "sc16-nsi")


def builtin_topology(name: str) -> Path:
    """Return the path of the shipped topology `name` (e.g. `sc16`)."""
    if name not in BUILTIN_TOPOLOGIES:
        raise InvalidArgument(f"no built-in topology {name!r} (built-in: {', '.join(BUILTIN_TOPOLOGIES)})")
    return TOPOLOGY_DIR / f"{name}.yaml"


def resolve_topology(ref: str) -> Path:
    """Return the file meant by `ref`: an existing path, or the name of a built-in topology."""
    path = Path(ref)
    if path.exists() or ref not in BUILTIN_TOPOLOGIES:
        return path
    return builtin_topology(ref)
