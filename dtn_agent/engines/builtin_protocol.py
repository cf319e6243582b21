"""The builtin engine's wire format: length-prefixed JSON control messages, binary chunk frames.

Every connection starts with a control message: a 10-byte header (`b"TSDN"`, version, type,
payload length as unsigned 32-bit big-endian) and a JSON object. The first connection is the
control connection (JOB from the sender, ACCEPT or ERROR back, DONE at the end, RESULT back);
each data connection opens with STREAM. Disk data then flows as chunk frames: a 20-byte header
(file index, offset, length, adler32 of the payload) and the payload; a frame with file index
`END_OF_STREAM` closes the stream. Memory-to-memory data is raw bytes until the sender closes.

Anything else is refused with `ProtocolError` naming what was wrong: wrong magic or version,
unknown type, payload over `MAX_MESSAGE`, JSON that is not an object, missing or mistyped fields,
paths that are absolute or climb out of the destination.
"""

from __future__ import annotations

import json
import socket
import struct
from dataclasses import dataclass
from enum import IntEnum
from pathlib import PurePosixPath
from typing import Any

MAGIC = b"TSDN"
VERSION = 1
HEADER = struct.Struct("!4sBBI")
MAX_MESSAGE = 16 * 1024 * 1024
CHUNK = struct.Struct("!IQII")  # file index, offset, length, adler32
END_OF_STREAM = 0xFFFFFFFF
MAX_STREAMS = 256
MIN_CHUNK = 4096
MAX_CHUNK = 256 * 1024 * 1024
ADLER_BASE = 65521

try:  # zlib-ng's SIMD adler32: the same values as zlib's, about 15 times as fast
    from zlib_ng.zlib_ng import adler32
except ImportError:  # a declared dependency, but zlib gives the same values, only slower
    from zlib import adler32


class ProtocolError(Exception):
    """The peer sent something the builtin engine's protocol does not allow."""


class MessageType(IntEnum):
    """Control message types."""

    JOB = 1  # sender -> receiver: what is coming
    ACCEPT = 2  # receiver -> sender: go, and which chunks are already there
    STREAM = 3  # sender -> receiver: first message of each data connection
    DONE = 4  # sender -> receiver: every stream finished; per-file adler32
    RESULT = 5  # receiver -> sender: verdict
    ERROR = 6  # either way: the transfer is refused or failed


def encode(kind: MessageType, payload: dict[str, Any]) -> bytes:
    """One control message as bytes."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    if len(body) > MAX_MESSAGE:
        raise ProtocolError(f"{kind.name} message of {len(body)} bytes exceeds the limit of {MAX_MESSAGE}")
    return HEADER.pack(MAGIC, VERSION, kind, len(body)) + body


def recv_exact(sock: socket.socket, size: int, what: str) -> bytes:
    """Exactly `size` bytes from `sock`; ProtocolError naming `what` if the peer closes first."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if not n:
            raise ProtocolError(f"connection closed after {got} of {size} bytes of {what}")
        got += n
    return bytes(buffer)


def decode_header(header: bytes) -> tuple[MessageType, int]:
    """The type and payload length of a control message header, or ProtocolError."""
    magic, version, kind, length = HEADER.unpack(header)
    if magic != MAGIC:
        raise ProtocolError(f"not a tsdn builtin-engine connection (first bytes {magic!r}, expected {MAGIC!r})")
    if version != VERSION:
        raise ProtocolError(f"protocol version {version} is not supported (this side speaks {VERSION})")
    try:
        message_type = MessageType(kind)
    except ValueError:
        raise ProtocolError(f"unknown control message type {kind}") from None
    if length > MAX_MESSAGE:
        raise ProtocolError(f"control message of {length} bytes exceeds the limit of {MAX_MESSAGE}")
    return message_type, length


def decode_payload(kind: MessageType, body: bytes) -> dict[str, Any]:
    """The JSON object of a control message, or ProtocolError."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ProtocolError(f"{kind.name} message is not valid JSON: {error}") from None
    if not isinstance(payload, dict):
        raise ProtocolError(f"{kind.name} message must be a JSON object, not {type(payload).__name__}")
    return payload


def read_message(sock: socket.socket, *expected: MessageType) -> tuple[MessageType, dict[str, Any]]:
    """Read one control message; ProtocolError if it is malformed or not one of `expected` (or ERROR)."""
    kind, length = decode_header(recv_exact(sock, HEADER.size, "a control message header"))
    payload = decode_payload(kind, recv_exact(sock, length, f"a {kind.name} message"))
    if kind is MessageType.ERROR:
        return kind, {"error": str(payload.get("error", "the peer reported an error without a message"))}
    if expected and kind not in expected:
        names = " or ".join(e.name for e in expected)
        raise ProtocolError(f"expected a {names} message, got {kind.name}")
    return kind, payload


def field(payload: dict[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    """`payload[name]`, checked to be of `kind`; ProtocolError naming the field otherwise."""
    if name not in payload:
        raise ProtocolError(f"{where} lacks the field {name!r}")
    value = payload[name]
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise ProtocolError(f"{where} field {name!r} has the wrong type ({type(value).__name__})")
    return value


@dataclass(frozen=True)
class FileEntry:
    """One file of a disk transfer: its path relative to the destination, and its size."""

    path: str
    size: int


@dataclass(frozen=True)
class JobHeader:
    """The JOB message: what the sender is about to send."""

    transfer_id: str
    streams: int
    mode: str  # "memory" or "files"
    size: int  # memory: bytes in all; files: sum of file sizes
    chunk_size: int
    files: tuple[FileEntry, ...] = ()

    def to_payload(self) -> dict[str, Any]:
        """The JSON object sent on the wire."""
        return {"transfer_id": self.transfer_id, "streams": self.streams, "mode": self.mode, "size": self.size,
                "chunk_size": self.chunk_size, "files": [[f.path, f.size] for f in self.files]}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> JobHeader:
        """Validate a JOB message; ProtocolError naming the first problem."""
        where = "JOB message"
        transfer_id = field(payload, "transfer_id", str, where)
        if not transfer_id or len(transfer_id) > 200:
            raise ProtocolError(f"{where} transfer_id must be 1-200 characters")
        streams = field(payload, "streams", int, where)
        if not 1 <= streams <= MAX_STREAMS:
            raise ProtocolError(f"{where} streams must be between 1 and {MAX_STREAMS}, not {streams}")
        mode = field(payload, "mode", str, where)
        if mode not in ("memory", "files"):
            raise ProtocolError(f"{where} mode must be 'memory' or 'files', not {mode!r}")
        size = field(payload, "size", int, where)
        if size < 0:
            raise ProtocolError(f"{where} size must not be negative, not {size}")
        chunk_size = field(payload, "chunk_size", int, where)
        if not MIN_CHUNK <= chunk_size <= MAX_CHUNK:
            raise ProtocolError(f"{where} chunk_size must be between {MIN_CHUNK} and {MAX_CHUNK}, not {chunk_size}")
        raw_files = field(payload, "files", list, where)
        files = []
        seen = set()
        for item in raw_files:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                    and isinstance(item[1], int) and not isinstance(item[1], bool) and item[1] >= 0):
                raise ProtocolError(f"{where} file entries must be [path, size >= 0], not {item!r:.80}")
            path = safe_relative_path(item[0])
            if path in seen:
                raise ProtocolError(f"{where} lists {path!r} twice")
            seen.add(path)
            files.append(FileEntry(path, item[1]))
        if mode == "memory" and files:
            raise ProtocolError(f"{where} in memory mode must not list files")
        if mode == "files" and size != sum(f.size for f in files):
            raise ProtocolError(f"{where} size {size} is not the sum of its file sizes")
        return cls(transfer_id, streams, mode, size, chunk_size, tuple(files))


def safe_relative_path(path: str) -> str:
    """`path` if it is a plain relative POSIX path inside the destination; ProtocolError otherwise."""
    pure = PurePosixPath(path)
    if (not path or "\0" in path or "\\" in path or pure.is_absolute()
            or any(part in ("", ".", "..") for part in path.split("/"))):
        raise ProtocolError(f"file path {path!r:.200} is not a plain relative path inside the destination")
    if any(part.endswith((".tsdn-partial", ".tsdn-journal")) for part in pure.parts):
        raise ProtocolError(f"file path {path!r:.200} uses a name reserved for partial files")
    return path


def chunk_count(size: int, chunk_size: int) -> int:
    """How many chunks a file of `size` bytes is split into."""
    return -(-size // chunk_size)


def adler32_combine(adler1: int, adler2: int, length2: int) -> int:
    """adler32 of A+B from adler32(A), adler32(B) and len(B) (zlib's adler32_combine)."""
    remainder = length2 % ADLER_BASE
    sum1 = adler1 & 0xFFFF
    sum2 = (remainder * sum1) % ADLER_BASE
    sum1 += (adler2 & 0xFFFF) + ADLER_BASE - 1
    sum2 += ((adler1 >> 16) & 0xFFFF) + ((adler2 >> 16) & 0xFFFF) + ADLER_BASE - remainder
    sum1 %= ADLER_BASE
    sum2 %= ADLER_BASE
    return sum1 | (sum2 << 16)


def file_adler32(chunk_sums: list[int], size: int, chunk_size: int) -> int:
    """adler32 of a whole file from the adler32 of each of its chunks, in order."""
    total = adler32(b"")
    for index, chunk_sum in enumerate(chunk_sums):
        total = adler32_combine(total, chunk_sum, min(chunk_size, size - index * chunk_size))
    return total


TCP_INFO_RTT = 68  # struct tcp_info: __u32 tcpi_rtt (microseconds)
TCP_INFO_TOTAL_RETRANS = 100  # __u32 tcpi_total_retrans
TCP_INFO_BYTES_ACKED = 120  # __u64 tcpi_bytes_acked (Linux 4.1+)
TCP_INFO_BYTES_RECEIVED = 128  # __u64 tcpi_bytes_received (Linux 4.1+)
TCP_INFO_SIZE = 136


@dataclass(frozen=True)
class TcpInfo:
    """What the kernel says of one TCP connection (None: not known)."""

    retransmits: int | None = None
    rtt_ms: float | None = None
    bytes_acked: int | None = None  # payload bytes the peer acknowledged
    bytes_received: int | None = None  # payload bytes received


def tcp_info(sock: socket.socket) -> TcpInfo:
    """The connection's TCP_INFO; all None where the platform or kernel does not tell."""
    option = getattr(socket, "TCP_INFO", None)
    if option is None:
        return TcpInfo()
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, option, TCP_INFO_SIZE)
    except OSError:
        return TcpInfo()
    if len(raw) < TCP_INFO_BYTES_ACKED:
        return TcpInfo()
    (rtt_us,) = struct.unpack_from("=I", raw, TCP_INFO_RTT)
    (retrans,) = struct.unpack_from("=I", raw, TCP_INFO_TOTAL_RETRANS)
    if len(raw) < TCP_INFO_SIZE:
        return TcpInfo(retrans, rtt_us / 1000.0)
    acked, received = struct.unpack_from("=QQ", raw, TCP_INFO_BYTES_ACKED)
    return TcpInfo(retrans, rtt_us / 1000.0, acked, received)
