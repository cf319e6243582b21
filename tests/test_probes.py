"""Sequence-numbered UDP probes (`benchmarks.probes`): gaps, losses and reordering read from the
receiver's records, and the sender and receiver for real over loopback."""

from __future__ import annotations

import json
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import probes
from benchmarks.probes import Record

ROOT = Path(__file__).resolve().parents[1]
INTERVAL = 500_000  # ns
LATENCY = 40_000
START = 7_000_000_000_000  # a CLOCK_MONOTONIC reading some hours after boot
CUT = START + 1_000 * INTERVAL  # the link goes down as probe 1000 is sent


def stream(count: int = 3000, lost: range = range(0), delay: dict[int, int] | None = None,
           late_sends: dict[int, int] | None = None) -> list[Record]:
    """Records of `count` probes every 500 µs with 40 µs latency, in arrival order: `lost`
    never arrive, probe k arrives `delay[k]` ns late, probe k is sent `late_sends[k]` ns late."""
    records = []
    for seq in range(count):
        if seq in lost:
            continue
        sent = START + seq * INTERVAL + (late_sends or {}).get(seq, 0)
        records.append(Record(seq, sent, sent + LATENCY + (delay or {}).get(seq, 0)))
    return sorted(records, key=lambda r: r.received_ns)


def test_a_steady_stream_has_no_gap_loss_or_reordering():
    records = stream()
    gap = probes.longest_gap(records, INTERVAL)
    assert gap is not None and gap.extra_ns == 0
    assert probes.lost(records, sent=3000) == 0 and probes.loss_runs(records, sent=3000) == []
    assert probes.reordered(records) == probes.duplicates(records) == 0
    assert probes.send_interval_ns(records) == INTERVAL


def test_a_failover_that_loses_twelve_probes_is_a_six_ms_gap_from_arrivals_and_from_sequence_numbers():
    records = stream(lost=range(1003, 1015))
    gap = probes.longest_gap(records, INTERVAL, after_ns=CUT)
    assert (gap.before.seq, gap.after.seq) == (1002, 1015)
    assert gap.extra_ns == 12 * INTERVAL
    [run] = probes.loss_runs(records, sent=3000)
    assert (run.first, run.last, run.count) == (1003, 1014, 12)
    assert run.gap_ns(INTERVAL) == 12 * INTERVAL
    assert probes.longest_loss_gap(records, INTERVAL, after_ns=CUT) == run
    assert probes.lost(records, sent=3000) == 12


def test_the_window_takes_the_gaps_that_end_in_it():
    # Half a second before the cut probes 500..505 wait in a queue and arrive together with 505,
    # and the failover gap after the cut.
    records = stream(lost=range(1003, 1015), delay={seq: (505 - seq) * INTERVAL for seq in range(500, 506)})
    after = probes.longest_gap(records, INTERVAL, after_ns=CUT)
    before = probes.longest_gap(records, INTERVAL, after_ns=CUT - 2000 * INTERVAL, until_ns=CUT)
    assert after.after.seq == 1015 and after.extra_ns == 12 * INTERVAL
    assert (before.before.seq, before.after.seq) == (499, 500) and before.extra_ns == 5 * INTERVAL
    assert probes.reordered(records) == 0 and probes.lost(records) == 12
    # The failover gap ends after the cut, so the baseline window leaves it out even though it began before.
    quiet = probes.longest_gap(records, INTERVAL, after_ns=CUT - 400 * INTERVAL, until_ns=CUT)
    assert quiet.extra_ns == 0
    assert probes.longest_loss_gap(records, INTERVAL, until_ns=CUT) is None


def test_a_stalled_sender_shows_in_arrivals_but_loses_nothing():
    # Probes 1001.. go out 8 ms late (the sender had no core) and catch up by 1017.
    late = {seq: max(0, 8_000_000 - (seq - 1001) * INTERVAL) for seq in range(1001, 1018)}
    records = stream(late_sends=late)
    gap = probes.longest_gap(records, INTERVAL, after_ns=CUT)
    assert (gap.before.seq, gap.after.seq) == (1000, 1001) and gap.extra_ns == 8_000_000
    assert probes.loss_runs(records) == [] and probes.longest_loss_gap(records, INTERVAL) is None
    assert probes.reordered(records) == 0


def test_losses_at_the_start_and_end_are_open_runs():
    records = stream(count=100, lost=range(0, 3))
    runs = probes.loss_runs(records, sent=120)
    assert [(r.first, r.last) for r in runs] == [(0, 2), (100, 119)]
    assert runs[0].before is None and runs[0].after.seq == 3 and runs[0].gap_ns(INTERVAL) is None
    assert runs[1].before.seq == 99 and runs[1].after is None
    assert probes.lost(records, sent=120) == 23
    assert probes.lost(records) == 3  # without the sender's count the end is unknown
    assert probes.longest_loss_gap(records, INTERVAL) is None
    assert probes.loss_runs([], sent=5) == [probes.LossRun(0, 4, None, None)]


def test_duplicates_are_counted_apart_from_reordering():
    records = stream(count=10)
    records.insert(5, records[3])
    swapped = [*records[:7], records[8], records[7], *records[9:]]
    assert probes.duplicates(swapped) == 1
    assert probes.reordered(swapped) == 1
    assert probes.lost(swapped, sent=10) == 0


def test_summarize_reports_in_microseconds():
    records = stream(lost=range(1003, 1015))
    assert probes.summarize(records, INTERVAL, sent=3000, after_ns=CUT) == {
        "received": 2988, "lost": 12, "reordered": 0, "duplicates": 0, "longest_gap_us": 6000.0,
        "longest_loss_gap_us": 6000.0, "longest_loss_run": 12}
    empty = probes.summarize([], INTERVAL, sent=4)
    assert empty["lost"] == 4 and empty["longest_gap_us"] is None and empty["longest_loss_gap_us"] is None
    assert probes.send_interval_ns(stream(count=1)) is None


def test_pace_sends_every_sequence_number_in_order_and_counts_failed_sends():
    sent = []
    started = []

    def send(seq: int, now: int) -> None:
        sent.append((seq, now))
        if seq == 3:
            raise OSError("no buffer space")

    report = probes.pace(20, 100_000, 50_000, send, started.append)
    assert [seq for seq, _ in sent] == list(range(20))
    assert started and all(now >= started[0] + seq * 100_000 for seq, now in sent)  # never early
    assert report.sent == 20 and report.send_errors == 1
    assert report.interval_us == 100 and report.achieved_interval_us is not None


@pytest.mark.parametrize(("args", "named"), [
    (["send", "--to", "nope:9", "--count", "1"], "--to"),
    (["send", "--to", "127.0.0.1:70000", "--count", "1"], "--to"),
    (["send", "--to", "127.0.0.1:9", "--count", "0"], "--count"),
    (["send", "--to", "127.0.0.1:9", "--count", "1", "--priority", "100"], "--priority"),
    (["receive", "--listen", "127.0.0.1", "--out", "x.json"], "--listen"),
    (["receive", "--listen", "127.0.0.1:0", "--out", "/no/such/dir/x.json"], "--out"),
])
def test_bad_arguments_are_refused_naming_the_option(args, named, capsys):
    with pytest.raises(SystemExit) as exited:
        probes.main(args)
    assert exited.value.code == 2
    assert named in capsys.readouterr().err


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "benchmarks.probes", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def first_line(process: subprocess.Popen) -> dict:
    ready, _, _ = select.select([process.stdout], [], [], 30)
    assert ready, f"no line from {process.args} within 30 s"
    return json.loads(process.stdout.readline())


def test_probes_over_loopback_arrive_in_order_and_are_written_when_the_stream_stops(tmp_path):
    out = tmp_path / "probes.json"
    receiver = start("receive", "--listen", "127.0.0.1:0", "--out", str(out), "--idle-timeout", "0.5")
    sender = None
    try:
        host, port = first_line(receiver)["listening"].split(":")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stray:
            stray.sendto(b"not a probe", (host, int(port)))
        sender = start("send", "--to", f"{host}:{port}", "--count", "200", "--interval-us", "500")
        out_text, err = sender.communicate(timeout=60)
        assert sender.returncode == 0, err
        lines = [json.loads(line) for line in out_text.splitlines()]
        assert receiver.wait(timeout=60) == 0  # stopped by itself once the probes stopped
    finally:
        for process in (receiver, sender):
            if process is not None and process.poll() is None:
                process.kill()
    assert "started" in lines[0]
    report = lines[-1]
    assert report["sent"] == 200 and report["send_errors"] == 0 and report["interval_us"] == 500
    assert report["achieved_interval_us"] > 0 and report["longest_send_gap_us"] > 0
    records, document = probes.load(out)
    assert document["stopped"] == "idle" and document["ignored"] == 1
    assert document["receive_clock"] in {"kernel", "process"}
    assert [r.seq for r in records] == list(range(200))
    # One clock for both ends: every probe arrives after it was sent (within a clock read's error).
    assert all(r.received_ns > r.sent_ns - 1_000_000 for r in records)
    assert all(r.sent_ns >= lines[0]["started"] for r in records)
    summary = document["summary"]
    assert summary["received"] == 200 and summary["lost"] == summary["reordered"] == summary["duplicates"] == 0
    assert summary["send_interval_us"] > 0


def test_the_receiver_writes_its_file_on_sigterm_and_stops_when_nothing_comes(tmp_path):
    signalled = tmp_path / "signalled.json"
    receiver = start("receive", "--listen", "127.0.0.1:0", "--out", str(signalled))
    try:
        first_line(receiver)
        receiver.send_signal(signal.SIGTERM)
        assert receiver.wait(timeout=30) == 0
    finally:
        if receiver.poll() is None:
            receiver.kill()
    records, document = probes.load(signalled)
    assert records == [] and document["stopped"] == "signal"

    waited = tmp_path / "waited.json"
    receiver = start("receive", "--listen", "127.0.0.1:0", "--out", str(waited), "--wait", "0.2")
    try:
        assert receiver.wait(timeout=30) == 0
    finally:
        if receiver.poll() is None:
            receiver.kill()
    assert probes.load(waited)[1]["stopped"] == "nothing"
