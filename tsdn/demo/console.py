"""The live view of a demo run: a table redrawn every second on a terminal, plain lines otherwise.

`render(recording, now, links)` is pure (a string); `Console` decides how to show it.
"""

from __future__ import annotations

import sys
from typing import TextIO

from sdn_app.core.units import format_bandwidth
from tsdn.demo.held_back import held_back
from tsdn.demo.record import Event, Flow, Recording
from tsdn.output import table

LAST_EVENTS = 10
PLAIN_STATUS_EVERY = 5.0  # seconds between status lines when not on a terminal


def rate_cell(flow: Flow) -> str:
    """`372G / 400G (93%)`, or what there is."""
    booked = format_bandwidth(flow.booked_bps)
    if flow.kind != "transfer":
        return f"- / {booked} (no traffic)"
    if flow.nominal_bps is None:
        return f"- / {booked}"
    share = flow.nominal_bps / flow.booked_bps if flow.booked_bps else 0.0
    return f"{format_bandwidth(int(flow.nominal_bps))} / {booked} ({share:.0%})"


def flow_rows(recording: Recording) -> list[tuple[str, ...]]:
    return [(f.name, f.kind, f"{f.src}->{f.dst}", f.state, rate_cell(f), " ".join(f.path) or "-")
            for f in recording.flows.values()]


def flow_table(recording: Recording, held: bool = False) -> str:
    """The per-flow table: name, kind, DTNs, state, nominal rate vs booked, path; with `held`, also
    who held each transfer back (`held_back`: the network, its hosts)."""
    headers = ["NAME", "KIND", "DTNS", "STATE", "RATE / BOOKED", "PATH"]
    rows = flow_rows(recording)
    if held:
        headers.append("HELD BACK BY")
        rows = [(*row, held_back(recording, f.name)[0] if f.kind == "transfer" else "")
                for row, f in zip(rows, recording.flows.values(), strict=True)]
    return table(headers, rows)


def event_line(event: Event) -> str:
    return f"[{event.time:7.1f}s] {event.kind:<13} {event.describe()}"


def render(recording: Recording, now: float, end: float, title: str = "", links: str = "") -> str:
    """The whole screen: header, flow table, link states, the last events."""
    lines = [f"tsdn demo {recording.scenario}: t = {now:5.1f} s of {end:g} s" + (f"  {title}" if title else ""), ""]
    lines.append(flow_table(recording) if recording.flows else "(no transfer or reservation yet)")
    if links:
        lines += ["", links]
    lines += ["", "last events:"]
    lines += [event_line(e) for e in recording.sorted_events()[-LAST_EVENTS:]]
    return "\n".join(lines)


class Console:
    """Shows a run as it goes; `tty=None` asks the stream."""

    def __init__(self, stream: TextIO | None = None, tty: bool | None = None):
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        self._shown_events = 0
        self._last_status = -PLAIN_STATUS_EVERY

    def say(self, text: str) -> None:
        """A line outside the live view (setup, teardown, results)."""
        print(text, file=self.stream, flush=True)

    def update(self, recording: Recording, now: float, end: float, title: str = "", links: str = "") -> None:
        """Redraw (terminal) or print what is new (plain)."""
        if self.tty:
            self.stream.write("\x1b[H\x1b[2J" + render(recording, now, end, title, links) + "\n")
            self.stream.flush()
            return
        self._print_new(recording)
        if now - self._last_status >= PLAIN_STATUS_EVERY:
            self._last_status = now
            for flow in recording.flows.values():
                print(f"[{now:7.1f}s] status        {flow.name} {flow.state} {rate_cell(flow)} "
                      f"path {' '.join(flow.path) or '-'}", file=self.stream)
        self.stream.flush()

    def _print_new(self, recording: Recording) -> None:
        """Events recorded since the last call, in the order they were recorded."""
        with recording._lock:
            events = list(recording.events)
        for event in events[self._shown_events:]:
            print(event_line(event), file=self.stream)
        self._shown_events = len(events)

    def finish(self, recording: Recording) -> None:
        """Print events not shown yet (plain), then the final table."""
        if not self.tty:
            self._print_new(recording)
        print("\n" + (flow_table(recording, held=True) if recording.flows else "(no transfer or reservation)"),
              file=self.stream, flush=True)
