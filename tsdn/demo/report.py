"""The report folder of a demo run: report.html, events.jsonl, samples.jsonl and PNG plots.

    write_report(out_dir, scenario, recording, results)

`throughput.png` has each transfer's nominal rate (solid) and booking (dashed) over time;
`aggregate.png` the sum of the rates against the sum of the bookings. Failures, restores,
congestion and reroutes are vertical lines on both. Pure apart from writing files; matplotlib
runs with its Agg backend (no display needed).
"""

from __future__ import annotations

import html
import itertools
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from sdn_app.core import decisions
from sdn_app.core.units import format_bandwidth
from tsdn.demo.calibration import FIT
from tsdn.demo.console import flow_rows
from tsdn.demo.expectations import Result
from tsdn.demo.held_back import POLICY, held_back, not_moved_rows
from tsdn.demo.record import MARKED, Recording
from tsdn.demo.scenario import Scenario

LINE_STYLES = {"failure": ("tab:red", "-"), "restore": ("tab:green", "-"), "congestion": ("tab:orange", "--"),
               "clear": ("tab:olive", "--"), "reroute": ("tab:purple", ":")}


def write_jsonl(path: Path, rows: Sequence[dict]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, sort_keys=False, default=str) + "\n")


def _mark_events(axes, recording: Recording) -> None:
    seen: set[str] = set()
    for event in recording.sorted_events():
        what = MARKED.get(event.kind)
        if what is None:
            continue
        color, style = LINE_STYLES[what]
        axes.axvline(event.time, color=color, linestyle=style, linewidth=1.2, alpha=0.8,
                     label=what if what not in seen else None)
        seen.add(what)
    for i, (_, start, end) in enumerate(congestion_windows(recording)):
        axes.axvspan(start, end, color="tab:orange", alpha=0.12, linewidth=0, label="congested" if i == 0 else None)


def congestion_windows(recording: Recording) -> list[tuple[str, float, float]]:
    """(link, from, until) of each congestion the timeline put on a link: `congest_link` to the
    next `clear_link` of that link, or to the end of the run."""
    windows: list[tuple[str, float, float]] = []
    open_since: dict[str, float] = {}
    for event in recording.sorted_events():
        link = event.details.get("link")
        if event.kind == "congest_link" and link:
            open_since.setdefault(link, event.time)
        elif event.kind == "clear_link" and link in open_since:
            windows.append((link, open_since.pop(link), event.time))
    end = max(recording.ended, max((e.time for e in recording.events), default=0.0))
    windows += [(link, start, end) for link, start in open_since.items()]
    return sorted(windows, key=lambda w: (w[1], w[0]))


def reroute_rows(recording: Recording) -> list[tuple[str, ...]]:
    """Per reroute: when, which flow, from and to, its cause (from the typed decision, never the
    reason text), the links of its old path that the timeline had congested or cut then, and the
    controller's reason (the evidence)."""
    windows = congestion_windows(recording)
    cut: dict[str, float] = {}  # link -> failed since
    rows = []
    for event in recording.sorted_events():
        link = event.details.get("link")
        if event.kind == "fail_link" and link:
            cut.setdefault(link, event.time)
        elif event.kind == "restore_link" and link:
            cut.pop(link, None)
        if event.kind != "reroute":
            continue
        d = event.details
        old = list(d.get("old") or ())
        if d.get("old_links"):  # the links it took: exact, parallel links too
            on_old = set(d["old_links"]) & set(recording.links)
            parallel: set[str] = set()
        else:
            hops = {frozenset(pair) for pair in itertools.pairwise(old)}
            on_old = {label for label, ends in recording.links.items() if frozenset(ends) in hops}
            # Between two switches joined by parallel links the path alone does not say which it took.
            parallel = {label for label in on_old
                        if sum(1 for ends in recording.links.values() if ends == recording.links[label]
                               or ends[::-1] == recording.links[label]) > 1}
        then = sorted({(link, "congested") for link, start, end in windows if link in on_old
                       and start <= event.time <= end} | {(link, "cut") for link in cut if link in on_old})
        shown = [f"{link} {what}" + (" (a parallel link)" if link in parallel else "") for link, what in then]
        reason = str(d.get("reason", ""))
        decision = decisions.from_dict(d["decision"]) if d.get("decision") else None
        cause = d.get("cause") or (decision.cause if decision is not None else None)
        rows.append((f"{event.time:.1f}", str(d.get("flow", "")), " ".join(old), " ".join(d.get("new") or ()),
                     cause or "-", ", ".join(shown) or "none", reason or "-"))
    return rows


def _unit(recording: Recording) -> tuple[float, str]:
    top = max([s.booked_bps for s in recording.rates] + [s.nominal_bps for s in recording.rates] + [1])
    return (1e12, "Tbit/s") if top >= 1e12 else (1e9, "Gbit/s") if top >= 1e9 else (1e6, "Mbit/s")


def plot_throughput(recording: Recording, path: Path) -> None:
    """Per-transfer nominal rate and booking over time, events as vertical lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale, unit = _unit(recording)
    fig, axes = plt.subplots(figsize=(10, 4.5), dpi=100)
    flows = sorted({s.flow for s in recording.rates})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, flow in enumerate(flows):
        samples = [s for s in recording.rates if s.flow == flow]
        color = colors[i % len(colors)]
        axes.plot([s.time for s in samples], [s.nominal_bps / scale for s in samples], color=color, label=flow,
                  marker=".", markersize=3, linewidth=1.4)
        axes.step([s.time for s in samples], [s.booked_bps / scale for s in samples], where="post", color=color,
                  linestyle="--", linewidth=0.8, alpha=0.7)
    _finish(fig, axes, recording, f"nominal rate ({unit}); dashed: booked",
            f"{recording.scenario}: per-transfer throughput", path)


def aggregate_series(recording: Recording) -> tuple[list[float], list[float], list[float]]:
    """Per second: (time, sum of the transfers' rates, sum of their bookings), from each
    transfer's last report in that second."""
    bins: dict[int, dict[str, tuple[float, int]]] = {}
    for sample in recording.rates:
        bins.setdefault(math.floor(sample.time), {})[sample.flow] = (sample.nominal_bps, sample.booked_bps)
    times = sorted(bins)
    return ([t + 0.5 for t in times], [sum(v[0] for v in bins[t].values()) for t in times],
            [sum(v[1] for v in bins[t].values()) for t in times])


def plot_aggregate(recording: Recording, path: Path) -> None:
    """Sum of the transfers' nominal rates against the sum of their bookings."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale, unit = _unit(recording)
    times, carried, booked = aggregate_series(recording)
    fig, axes = plt.subplots(figsize=(10, 3.5), dpi=100)
    axes.plot(times, [c / scale for c in carried], color="tab:blue", label="carried", linewidth=1.6)
    axes.step(times, [b / scale for b in booked], where="mid", color="black", linestyle="--", linewidth=1,
              label="booked")
    _finish(fig, axes, recording, f"aggregate ({unit})",
            f"{recording.scenario}: aggregate throughput of the transfers", path)


def _finish(fig, axes, recording: Recording, ylabel: str, title: str, path: Path) -> None:
    """Mark the events, label, save and close a plot over the timeline."""
    import matplotlib.pyplot as plt

    _mark_events(axes, recording)
    axes.set_xlabel("time since the start of the timeline (s)")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px;vertical-align:top}
th{background:#f0f0f0}
.pass{color:#176b1e;font-weight:bold}.fail{color:#b00020;font-weight:bold}
.verdict{font-size:20px;padding:0.4em 0.8em;display:inline-block;border-radius:4px}
.verdict.pass{background:#e3f5e5}.verdict.fail{background:#fde7ea}
code{background:#f5f5f5;padding:0 3px}
"""


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]], raw_cols: frozenset[int] = frozenset()) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if i in raw_cols else html.escape(str(c))}</td>" for i, c in enumerate(row))
        + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(scenario: Scenario, recording: Recording, results: Sequence[Result], plots: Sequence[str],
                started: float | None = None) -> str:
    """The report page (self-contained apart from the PNGs next to it)."""
    passed = all(r.passed for r in results)
    verdict = "every expectation held" if passed else "some expectation failed: " + ", ".join(
        r.name for r in results if not r.passed)
    when = datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if started else ""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>tsdn demo {html.escape(scenario.name)}</title><style>{CSS}</style></head><body>",
        f"<h1>tsdn demo: {html.escape(scenario.name)}</h1>",
        f"<p>{html.escape(scenario.description)}</p>",
        f"<p>Topology <code>{html.escape(scenario.topology)}</code>, {_scale_text(scenario, recording)}. "
        f"Timeline of {scenario.end:g} s{', started ' + when if when else ''}; ran until {recording.ended:.1f} s"
        f"{' (interrupted)' if recording.interrupted else ''}.</p>",
        f"<p class='verdict {'pass' if passed else 'fail'}'>{'PASS' if passed else 'FAIL'}: {html.escape(verdict)}</p>",
    ]
    if recording.error:
        parts.append(f"<p class='fail'>error: {html.escape(recording.error)}</p>")
    parts.append("<h2>Expectations</h2>")
    parts.append(_table(
        ["expectation", "result", "expected", "measured", "detail"],
        [(html.escape(r.name), f"<span class='{'pass' if r.passed else 'fail'}'>{'passed' if r.passed else 'FAILED'}"
          "</span>", html.escape(r.expected), html.escape(r.measured), html.escape(r.detail)) for r in results],
        raw_cols=frozenset({0, 1, 2, 3, 4})))
    if recording.calibration:
        parts.append("<h2>Calibration</h2>")
        parts.append("<p>Before the timeline the runner played its heaviest moment (the transfers, reservations "
                     "and cross traffic live then; the cross traffic over the same link the other way, so it costs "
                     "the switches the same without congesting what is measured) on the real fabric and measured "
                     "what arrived: the transfers' rate reports after their first ones, the cross traffic's port "
                     f"counters. A scale fits when both carried at least {FIT:.0%} of what they offered. "
                     f"Chosen: {html.escape(recording.scale_why)}.</p>")
        parts.append(_table(["scale", "offered (Mbit/s)", "carried (Mbit/s)", "transfers", "cross traffic", "verdict",
                             "per transfer", "notes"], calibration_rows(recording)))
    parts.append("<h2>Throughput</h2>")
    parts.append("<p>Solid: each transfer's nominal rate (its sender's rate / the emulation scale); dashed: its "
                 "booking. Vertical lines: red link failure, green restore, orange congestion, olive congestion "
                 "cleared, purple dotted reroute; shaded orange: a link congested by the timeline.</p>")
    for plot in plots:
        parts.append(f"<p><img src='{html.escape(plot)}' alt='{html.escape(plot)}' style='max-width:100%'></p>")
    loads = congestion_rows(recording)
    if loads:
        parts.append("<h2>Congested links, measured</h2>")
        parts.append("<p>What the sending port of each congested direction transmitted (ovs-ofctl dump-ports, "
                     "about once a second while the cross traffic ran), all traffic included: measured by the "
                     "runner, not taken from the controller.</p>")
        parts.append(_table(["direction", "from (s)", "to (s)", "cross traffic sent", "measured load (median)",
                             "peak", "samples"], loads))
    reroutes = reroute_rows(recording)
    if reroutes:
        parts.append("<h2>Reroutes, and why</h2>")
        parts.append("<p>Each move with the controller's reason, which carries its evidence (the measured "
                     "congestion, or the link that went down), and what the timeline had done to its old path "
                     "then (by the links it took, when the controller named them). Its cause is the "
                     "controller's typed decision, not read from the reason. A move with nothing on its old "
                     "path is part of a rearrangement (cause <code>rearrangement</code>) or asked for.</p>")
        parts.append(_table(["time (s)", "flow", "from", "to", "cause", "old path then", "reason"], reroutes))
    segments = segment_rows(recording)
    if segments:
        parts.append("<h2>NSI segments</h2>")
        parts.append("<p>Which part of each flow is tsdn's and which was requested over NSI. A flow to a DTN in "
                     "a neighbouring domain crosses an inter-domain port: tsdn programs its switches up to that "
                     "port, and the rest is a VLAN circuit the neighbour's NSA booked for it (the remote "
                     "connection id is the neighbour's). <em>confirmed</em>: when the controller committed the "
                     "flow with the neighbour's segment booked; <em>at the end</em>: what the neighbour itself "
                     "said of the connection when the run ended (querySummarySync). The other flows stayed on "
                     "tsdn's switches.</p>")
        parts.append(_table(["flow", "DTNs", "whose", "neighbour NSA", "remote connection id", "inter-domain port",
                             "VLAN", "confirmed (s)", "at the end"], segments))
    stayed = not_moved_rows(recording)
    if stayed:
        parts.append("<h2>Not moved, and why</h2>")
        parts.append(f"<p>Each time a transfer sagged ({POLICY.consecutive} rate reports or more in a row below "
                     f"{POLICY.threshold:.0%} of its booking) and no move ended it: what the controller decided "
                     "then, with its evidence.</p>")
        parts.append(_table(["flow", "from (s)", "to (s)", "reports", "mean rate", "the controller's verdicts"],
                            stayed))
    parts.append("<h2>Final state</h2>")
    parts.append("<p><em>held back by</em>: who held each transfer back when it sagged, from the controller's own "
                 "decisions about it (the network: a congested or failed link; its hosts: every link of its path "
                 "measured clear).</p>")
    parts.append(_table(["name", "kind", "DTNs", "state", "rate / booked", "path", "held back by"],
                        [(*row, held_back(recording, f.name)[1] if f.kind == "transfer" else "")
                         for row, f in zip(flow_rows(recording), recording.flows.values(), strict=True)]))
    parts.append("<h2>Timeline of events</h2>")
    parts.append(_table(["time (s)", "kind", "details"],
                        [(f"{e.time:.1f}", e.kind, e.describe()) for e in recording.sorted_events()]))
    parts.append("<p>Raw data: <a href='events.jsonl'>events.jsonl</a> (one event per line), "
                 "<a href='samples.jsonl'>samples.jsonl</a> (rate reports and booking samples).</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _scale_text(scenario: Scenario, recording: Recording) -> str:
    scale = recording.scale or scenario.scale_bound
    text = f"emulation scale {scale:g} (nominal rates shown; Mininet ran them x {scale:g})"
    return f"{text}: {html.escape(recording.scale_why)}" if recording.scale_why else text


def calibration_rows(recording: Recording) -> list[tuple[str, ...]]:
    """Per scale tried: offered and carried (Mbit/s as emulated), each part's share, the verdict."""
    rows = []
    for attempt in recording.calibration:
        per = ", ".join(f"{f.name} {f.carried_bps / f.offered_bps:.0%}" if f.offered_bps else f.name
                        for f in attempt.flows)
        cross = f"{attempt.cross_share:.0%}" if attempt.cross_offered_bps else "-"
        rows.append((f"{attempt.scale:g}", f"{attempt.offered_mbps:.1f}", f"{attempt.carried_mbps:.1f}",
                     f"{attempt.transfers_share:.0%}", cross, "fits" if attempt.fits else "does not fit", per,
                     "; ".join(attempt.notes) or "-"))
    return rows


def segment_rows(recording: Recording) -> list[tuple[str, ...]]:
    """Per flow of the timeline, when any DTN of the topology is remote: the WAN segment it crossed
    (neighbour NSA, remote connection id, inter-domain port, VLAN, when confirmed, its end), or that it
    stayed on tsdn's switches. Empty when the topology has no remote DTN."""
    if not recording.remote_dtns:
        return []
    rows = []
    for name, flow in sorted(recording.flows.items()):
        remote = flow.dst if flow.dst in recording.remote_dtns else flow.src if flow.src in recording.remote_dtns \
            else ""
        ends = f"{flow.src} -> {flow.dst}"
        if not remote:
            rows.append((name, ends, "tsdn's", "-", "-", "-", "-", "-", "tsdn's switches only"))
            continue
        segment = recording.segments.get(name)
        port, nsa = recording.remote_dtns[remote]
        if segment is None:
            rows.append((name, ends, "tsdn's + NSI", nsa, "none: never booked", port, "-", "-",
                         f"{flow.state}{': ' + flow.reason if flow.reason else ''}"))
            continue
        end = segment.end or "not asked"
        if segment.ended is not None:
            end += f" (seen at {segment.ended:.1f} s)"
        rows.append((name, ends, "tsdn's + NSI", segment.nsa, segment.connection_id, segment.interdomain,
                     str(segment.vlan), f"{segment.confirmed:.1f}", end))
    return rows


def congestion_rows(recording: Recording) -> list[tuple[str, ...]]:
    """Per congested direction and episode: when, the cross traffic sent, the load measured (median, peak)."""
    rows = []
    by_direction: dict[str, list] = {}
    for sample in sorted(recording.link_loads, key=lambda s: s.time):
        by_direction.setdefault(sample.direction, []).append(sample)
    for direction, samples in sorted(by_direction.items()):
        episodes: list[list] = []
        for sample in samples:
            if episodes and sample.time - episodes[-1][-1].time <= 3.0:
                episodes[-1].append(sample)
            else:
                episodes.append([sample])
        for episode in episodes:
            capacity = episode[0].capacity_bps
            measured = sorted(s.measured_bps for s in episode)
            median, peak = measured[len(measured) // 2], measured[-1]
            rows.append((direction, f"{episode[0].time:.1f}", f"{episode[-1].time:.1f}",
                         f"{format_bandwidth(episode[0].cross_traffic_bps)}",
                         f"{format_bandwidth(round(median))} ({median / capacity:.0%} of "
                         f"{format_bandwidth(capacity)})", f"{format_bandwidth(round(peak))} ({peak / capacity:.0%})",
                         str(len(episode))))
    return rows


def write_report(out_dir: Path, scenario: Scenario, recording: Recording, results: Sequence[Result],
                 started: float | None = None) -> Path:
    """Write report.html, events.jsonl, samples.jsonl, throughput.png and aggregate.png; return report.html."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(out_dir / "events.jsonl", [e.to_dict() for e in recording.sorted_events()])
    if recording.segments:
        write_jsonl(out_dir / "segments.jsonl", [s.to_dict() for s in recording.segments.values()])
    write_jsonl(out_dir / "samples.jsonl", [{"type": "rate", **s.to_dict()} for s in recording.rates]
                + [{"type": "booking", **s.to_dict()} for s in recording.bookings]
                + [{"type": "link", **s.to_dict()} for s in recording.link_loads])
    plots = []
    for name, plot in (("throughput.png", plot_throughput), ("aggregate.png", plot_aggregate)):
        plot(recording, out_dir / name)
        plots.append(name)
    report = out_dir / "report.html"
    report.write_text(render_html(scenario, recording, results, plots, started), encoding="utf-8")
    return report


def summary(results: Sequence[Result]) -> str:
    """The expectation lines people read at the end of a run."""
    return "\n".join(r.line() for r in results)

