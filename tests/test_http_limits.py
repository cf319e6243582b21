"""The HTTP side's bounds on a real controller: connections, idle clients, event streams in total
and per client, and a stream reader that stops reading (docs/operations.md, "HTTP limits")."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request

import pytest

from northbound.client import TsdnClient
from sdn_app.web.server import WebLimits
from tests.waiting import wait_for

G = 1_000_000_000


def connect(controller, receive_buffer: int | None = None) -> socket.socket:
    host, port = controller.http_address.rsplit(":", 1)
    sock = socket.socket()
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(10)
    sock.connect((host, int(port)))
    return sock


def read_until_closed(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """Everything the server sends until it closes the connection (fails after `timeout`)."""
    sock.settimeout(timeout)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def open_stream(controller) -> urllib.request.Request:
    return urllib.request.urlopen(f"http://{controller.http_address}/api/events", timeout=10)


def test_a_connection_beyond_the_limit_gets_503_and_the_others_keep_working(start_controller):
    controller = start_controller("ring8", listen_http="127.0.0.1:0", web_limits=WebLimits(max_connections=3))
    held = [connect(controller) for _ in range(3)]
    try:
        extra = connect(controller)
        assert read_until_closed(extra).startswith(b"HTTP/1.1 503 ")
        held[0].sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert held[0].recv(4096).startswith(b"HTTP/1.1 200 ")
    finally:
        for sock in held:
            sock.close()
    wait_for(lambda: controller.web.connections == 0, "the closed connections to be let go")
    with urllib.request.urlopen(f"http://{controller.http_address}/healthz", timeout=5) as reply:
        assert reply.status == 200  # the slots came back


def test_a_connection_that_sends_nothing_is_closed_after_the_idle_timeout(start_controller):
    controller = start_controller("ring8", listen_http="127.0.0.1:0", web_limits=WebLimits(idle_timeout=0.5))
    silent = connect(controller)
    assert read_until_closed(silent, timeout=10) == b""  # closed by the server, nothing sent
    half = connect(controller)  # a request line and no end of headers: the same
    half.sendall(b"GET /healthz HTTP/1.1\r\n")
    assert read_until_closed(half, timeout=10) == b""


def test_event_streams_are_limited_per_client_and_in_total(start_controller):
    controller = start_controller("ring8", listen_http="127.0.0.1:0",
                                  web_limits=WebLimits(max_streams=3, max_streams_per_client=2))
    first, second = open_stream(controller), open_stream(controller)
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            open_stream(controller)
        assert refused.value.code == 503 and b"too many event streams" in refused.value.read()
        assert refused.value.headers["Retry-After"]
        first.close()
        wait_for(lambda: controller.web.streams.open == 1, "the closed stream's slot to come back")
        third = open_stream(controller)  # the freed slot is usable
        third.close()
    finally:
        first.close()
        second.close()


def test_a_stream_reader_that_stops_reading_is_dropped(start_controller):
    controller = start_controller("sc16", listen_http="127.0.0.1:0",
                                  web_limits=WebLimits(write_timeout=0.5, stream_backlog=50))
    stuck = connect(controller, receive_buffer=4096)
    stuck.sendall(b"GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
    wait_for(lambda: controller.web.streams.open == 1, "the stream to open")
    client = TsdnClient(controller.address, timeout=10)
    try:
        deadline = time.monotonic() + 60
        events = 0
        while controller.web.streams.open:  # events the reader never takes: its socket, then its backlog fill
            assert time.monotonic() < deadline, f"the stuck reader is still served after {events} events"
            created = client.create_reservation("caltech-a-dtn1", "umich-dtn1", G)
            client.delete_reservation(created.name)
            events += 2
        reader = open_stream(controller)  # others are served as before
        assert reader.readline().startswith(b"retry:")
        reader.close()
    finally:
        client.close()
        stuck.close()
    started = time.monotonic()
    with urllib.request.urlopen(f"http://{controller.http_address}/api/snapshot", timeout=5) as reply:
        assert reply.status == 200 and time.monotonic() - started < 5
