"""Files of a disk transfer: what the sender lists, and the receiver's partial files and journals.

The receiver writes each file under a temporary name next to its final one
(`.name.tsdn-partial`), each chunk at its offset, and appends every chunk it has verified to a
journal (`.name.tsdn-journal`: a header line with the file size and chunk size, then one
`index adler32` line per chunk). A file is renamed to its final name only once every chunk is
there and the whole file's adler32 matches the sender's; the journal is then removed. After an
interruption the journal says which chunks need not be sent again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from dtn_agent.engines.builtin_protocol import FileEntry, adler32, chunk_count, file_adler32

JOURNAL_MAGIC = "tsdn-journal 1"


def collect_files(paths: tuple[Path, ...]) -> list[tuple[Path, str]]:
    """The regular files under `paths` as (path on disk, name relative to the destination), sorted.

    A file is sent under its own name; a directory under its name with every regular file
    below it (symbolic links and empty directories are not sent).
    """
    found: list[tuple[Path, str]] = []
    for given in paths:
        path = Path(given)
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise ValueError(f"{path} is not a regular file or directory")
        if path.is_file():
            found.append((path, path.name))
            continue
        for root, dirs, names in os.walk(path):
            dirs.sort()
            for name in sorted(names):
                full = Path(root) / name
                if full.is_file() and not full.is_symlink():
                    found.append((full, str(PurePosixPath(path.name) / full.relative_to(path).as_posix())))
    names = [name for _, name in found]
    if len(set(names)) != len(names):
        raise ValueError("two of the given paths would land on the same name at the destination")
    return found


def partial_path(final: Path) -> Path:
    """Where a file is written until it is complete and verified."""
    return final.with_name(f".{final.name}.tsdn-partial")


def journal_path(final: Path) -> Path:
    """The journal of verified chunks kept next to a partial file."""
    return final.with_name(f".{final.name}.tsdn-journal")


def read_journal(journal: Path, size: int, chunk_size: int) -> dict[int, int]:
    """Chunks (index -> adler32) a journal lists as verified; empty if it is absent or for another file shape."""
    try:
        lines = journal.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    if not lines or lines[0] != f"{JOURNAL_MAGIC} {size} {chunk_size}":
        return {}
    chunks = chunk_count(size, chunk_size)
    verified: dict[int, int] = {}
    for line in lines[1:]:
        parts = line.split()
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            continue  # a line cut short by the interruption
        index, adler = int(parts[0]), int(parts[1])
        if index < chunks:
            verified[index] = adler
    return verified


@dataclass
class PartialFile:
    """The receiver's side of one file: its partial file, journal and the chunks verified so far."""

    entry: FileEntry
    final: Path
    chunk_size: int
    verified: dict[int, int] = field(default_factory=dict)  # chunk index -> adler32

    @classmethod
    def prepare(cls, destination: Path, entry: FileEntry, chunk_size: int) -> PartialFile:
        """Create (or take up again after an interruption) the partial file and journal of `entry`."""
        final = destination.joinpath(*PurePosixPath(entry.path).parts)
        final.parent.mkdir(parents=True, exist_ok=True)
        partial, journal = partial_path(final), journal_path(final)
        verified: dict[int, int] = {}
        if partial.is_file() and partial.stat().st_size == entry.size:
            verified = read_journal(journal, entry.size, chunk_size)
        if not verified:
            journal.write_text(f"{JOURNAL_MAGIC} {entry.size} {chunk_size}\n")
        fd = os.open(partial, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, entry.size)
        finally:
            os.close(fd)
        return cls(entry, final, chunk_size, verified)

    @property
    def chunks(self) -> int:
        """How many chunks the file has."""
        return chunk_count(self.entry.size, self.chunk_size)

    def write(self, offset: int, data: memoryview, adler: int) -> None:
        """Write one verified chunk at `offset` and note it in the journal."""
        fd = os.open(partial_path(self.final), os.O_WRONLY)
        try:
            written = 0
            while written < len(data):
                written += os.pwrite(fd, data[written:], offset + written)
        finally:
            os.close(fd)
        index = offset // self.chunk_size
        line = f"{index} {adler}\n".encode()
        fd = os.open(journal_path(self.final), os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        self.verified[index] = adler

    def missing(self) -> list[int]:
        """Chunk indices not yet verified."""
        return [i for i in range(self.chunks) if i not in self.verified]

    def adler32(self) -> int:
        """adler32 of the whole file from its verified chunks (all must be there)."""
        return file_adler32([self.verified[i] for i in range(self.chunks)], self.entry.size, self.chunk_size)

    def complete(self) -> None:
        """Rename the partial file to its final name and drop the journal."""
        os.replace(partial_path(self.final), self.final)
        journal_path(self.final).unlink(missing_ok=True)


def read_chunk_adler32(path: Path, offset: int, length: int) -> int | None:
    """adler32 of `length` bytes at `offset` of `path`; None if the file is shorter now."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read(length)
    return adler32(data) if len(data) == length else None
