"""Calibration on a busy machine: with one core kept busy by an unrelated process, `tsdn demo` plays a
scenario whose heaviest moment (two 100G transfers on ring8 at 0.004: 800 Mbit/s of TCP through
userspace switches) no machine of this kind carries, measures what arrives, chooses a smaller scale
of the ladder, says why, and the timeline then carries what it booked (aggregate_rate >= 0.75)."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from tsdn.demo.calibration import FIT

BOUND = 0.004
HEAVY = {
    "name": "heavy",
    "description": "two 100G transfers at 1/250: more than the emulation carries",
    "topology": "ring8",
    "emulation_scale": BOUND,
    "agents": ["dtn1", "dtn3", "dtn5", "dtn7"],
    "duration": 15,
    "timeline": [
        {"at": 0, "action": "transfer", "name": "east", "src": "dtn1", "dst": "dtn3", "bandwidth": "100G",
         "streams": 2, "until": "release"},
        {"at": 0, "action": "transfer", "name": "west", "src": "dtn5", "dst": "dtn7", "bandwidth": "100G",
         "streams": 2, "until": "release"},
        {"at": 13, "action": "release", "name": "east"},
        {"at": 13, "action": "release", "name": "west"},
    ],
    "expectations": {"aggregate_rate": 0.75},
}
RUN_LIMIT = 600  # seconds: a few calibration attempts (each a controller, Mininet and agents), then 15 s


def test_a_busy_machine_gets_a_smaller_scale_and_carries_what_it_booked(clean_mininet, tmp_path):
    scenario = tmp_path / "heavy.yaml"
    scenario.write_text(yaml.safe_dump(HEAVY, sort_keys=False))
    out = tmp_path / "report"
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # an unrelated process on one core
    try:
        run = subprocess.run([sys.executable, "-m", "tsdn", "demo", str(scenario), "--out", str(out), "--no-http",
                              "--plain"], capture_output=True, text=True, timeout=RUN_LIMIT)
    finally:
        busy.kill()
        busy.wait(10)
    said = run.stdout[-6000:] + run.stderr[-3000:]
    assert run.returncode == 0, said
    assert "PASS aggregate_rate:" in run.stdout, said

    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    attempts = [e["details"] for e in events if e["kind"] == "calibration" and "fits" in e["details"]]
    chosen = [e["details"] for e in events if e["kind"] == "calibration" and e["details"].get("chosen")]
    assert attempts and len(chosen) == 1, said
    first, last = attempts[0], attempts[-1]
    assert first["scale"] == BOUND and not first["fits"] and first["transfers_share"] < FIT, first
    assert last["fits"] and last["transfers_share"] >= FIT and last["scale"] == chosen[0]["scale"] < BOUND, attempts
    print("\n".join(e["details"]["message"] for e in events if e["kind"] == "calibration"))

    setup = [e["details"]["message"] for e in events if e["kind"] == "setup" and "Mininet:" in e["details"]["message"]]
    assert f" at scale {chosen[0]['scale']:g} (" in setup[-1], setup  # the timeline's network ran at it
    page = (out / "report.html").read_text()
    assert "<h2>Calibration</h2>" in page and f"emulation scale {chosen[0]['scale']:g}" in page
