"""`tsdn path request|batch|list|show|modify|release|watch|availability` against a real controller process."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import TOKENS

TSDN = shutil.which("tsdn", path=str(Path(sys.executable).parent)) or "tsdn"
DEADLINE = 20.0


def _lines(stream, into: queue.Queue) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


def _wait_line(lines: queue.Queue, needle: str, deadline: float = DEADLINE) -> str:
    end = time.monotonic() + deadline
    while (left := end - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            break
        if needle in line:
            return line
    raise AssertionError(f"no line containing {needle!r} within {deadline}s")


@pytest.fixture
def running(tmp_path, tokens_file):
    """A `tsdn controller` process with tokens on a free loopback port; yields (address, env)."""
    process = subprocess.Popen(
        [TSDN, "controller", "--topology", "sc16", "--listen-grpc", "127.0.0.1:0", "--state",
         str(tmp_path / "tsdn.db"), "--tokens", str(tokens_file), "--no-openflow"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(process.stderr, lines), daemon=True).start()
    try:
        address = _wait_line(lines, "listening on").rsplit(" ", 1)[1].strip()
        token_file = tmp_path / "rucio.token"
        token_file.write_text(TOKENS["rucio"][1] + "\n")
        env = {**os.environ, "TSDN_CONTROLLER": address, "TSDN_TOKEN_FILE": str(token_file)}
        yield address, env, lines, process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


def tsdn(env, *args):
    return subprocess.run([TSDN, *args], capture_output=True, text=True, timeout=60, env=env)


def test_request_list_show_modify_release(running):
    _, env, _, _ = running
    done = tsdn(env, "path", "request", "caltech-a-dtn1", "starlight-dtn1", "-b", "300G", "--policy", "widest",
                "--protect", "--duration", "1h", "--label", "experiment=cms", "--json")
    assert done.returncode == 0, done.stderr
    created = json.loads(done.stdout)
    assert created["state"] == "ACTIVE" and created["owner"] == "rucio"
    assert created["path"]["links"] == ["tbit-rdma"] and created["backup_path"]["links"]
    rid = created["id"]

    listed = json.loads(tsdn(env, "path", "list", "--json").stdout)
    assert [r["id"] for r in listed] == [rid]
    human = tsdn(env, "path", "show", rid)
    assert human.returncode == 0 and "ACTIVE" in human.stdout and "caltech-a > starlight" in human.stdout

    modified = tsdn(env, "path", "modify", rid, "-b", "350G", "--json")
    assert modified.returncode == 0, modified.stderr
    assert json.loads(modified.stdout)["bandwidth_bps"] == str(350 * 10**9)

    released = tsdn(env, "path", "release", rid, "--json")
    assert json.loads(released.stdout)["state"] == "RELEASED"


def test_move_to_a_new_path(running):
    _, env, _, _ = running
    rid = json.loads(tsdn(env, "path", "request", "caltech-a-dtn1", "starlight-dtn1", "-b", "100G",
                          "--json").stdout)["id"]
    moved = tsdn(env, "path", "modify", rid, "--move", "--exclude", "tbit-rdma", "--json")
    assert moved.returncode == 0, moved.stderr
    after = json.loads(moved.stdout)
    assert "tbit-rdma" not in after["path"]["links"] and "path ->" in after["state_reason"]
    assert json.loads(tsdn(env, "path", "show", rid, "--json").stdout)["path"] == after["path"]
    no_move = tsdn(env, "path", "modify", rid, "--exclude", "tbit-rdma")
    assert no_move.returncode == 2 and "--move" in no_move.stderr
    unknown = tsdn(env, "path", "modify", rid, "--move", "--exclude", "no-such-switch")
    assert unknown.returncode == 2 and "no-such-switch" in unknown.stderr
    assert json.loads(tsdn(env, "path", "show", rid, "--json").stdout)["path"] == after["path"]


def test_refusals_and_exit_codes(running):
    _, env, _, _ = running
    too_much = tsdn(env, "path", "request", "caltech-a-dtn1", "starlight-dtn1", "-b", "1T")
    assert too_much.returncode == 1 and "caltech-a-dtn1->caltech-a:21" in too_much.stderr
    bad = tsdn(env, "path", "request", "caltech-a-dtn1", "starlight-dtn1", "-b", "10X")
    assert bad.returncode == 2 and "--bandwidth" in bad.stderr
    unknown = tsdn(env, "path", "show", "0" * 32)
    assert unknown.returncode == 2 and "no reservation" in unknown.stderr
    no_token = tsdn({**env, "TSDN_TOKEN_FILE": ""}, "path", "list")
    assert no_token.returncode == 3 and "authorization" in no_token.stderr
    wrong = Path(env["TSDN_TOKEN_FILE"]).with_name("wrong.token")
    wrong.write_text("not-a-valid-token-at-all\n")
    assert tsdn({**env, "TSDN_TOKEN_FILE": str(wrong)}, "path", "list").returncode == 3
    missing = tsdn({**env, "TSDN_TOKEN_FILE": str(wrong.with_name("absent"))}, "path", "list")
    assert missing.returncode == 2 and "--token-file" in missing.stderr
    down = tsdn({**env, "TSDN_CONTROLLER": "127.0.0.1:1"}, "path", "list", "--timeout", "2")
    assert down.returncode == 4


def test_availability(running):
    _, env, _, _ = running
    done = tsdn(env, "path", "availability", "caltech-b-dtn1", "starlight-dtn2", "--duration", "1h", "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["max_bandwidth_bps"] == str(400 * 10**9)
    assert len(found["paths"]) == 3


def test_watch_prints_events_as_they_happen(running):
    _, env, _, _ = running
    watcher = subprocess.Popen([TSDN, "path", "watch", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(watcher.stdout, lines), daemon=True).start()
    try:
        # The watch is subscribed once a reservation made now shows up on it; retry until then.
        end = time.monotonic() + DEADLINE
        seen = None
        while seen is None and time.monotonic() < end:
            made = tsdn(env, "path", "request", "ucsd-dtn1", "dell-dtn1", "-b", "1G", "--duration", "1h", "--json")
            rid = json.loads(made.stdout)["id"]
            try:
                seen = json.loads(_wait_line(lines, rid, deadline=2.0))
            except AssertionError:
                continue
        assert seen is not None, "the watch never showed a new reservation"
        assert seen["reservation"]["id"] == rid
        tsdn(env, "path", "release", rid)
        released = json.loads(_wait_line(lines, '"RELEASED"'))
        assert released["reservation"]["id"] == rid and released["previous_state"] == "ACTIVE"
    finally:
        watcher.send_signal(signal.SIGINT)
        watcher.wait(10)


def test_state_survives_a_controller_restart(tmp_path, tokens_file, running):
    address, env, _, process = running
    made = json.loads(tsdn(env, "path", "request", "ucsd-dtn1", "dell-dtn1", "-b", "10G", "--json").stdout)
    process.send_signal(signal.SIGKILL)  # a crash, not a clean stop
    process.wait(10)
    again = subprocess.Popen(
        [TSDN, "controller", "--topology", "sc16", "--listen-grpc", address, "--state", str(tmp_path / "tsdn.db"),
         "--tokens", str(tokens_file), "--no-openflow"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(again.stderr, lines), daemon=True).start()
    try:
        _wait_line(lines, "listening on")
        shown = tsdn(env, "path", "show", made["id"], "--json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["state"] == "ACTIVE"
    finally:
        again.send_signal(signal.SIGTERM)
        again.wait(10)


def test_batch_from_a_file(running, tmp_path):
    _, env, _, _ = running
    campaign = tmp_path / "campaign.yaml"
    campaign.write_text(yaml.safe_dump([
        {"src": "caltech-a-dtn1", "dst": "starlight-dtn1", "bandwidth": "10G", "duration": "1h",
         "labels": {"campaign": "run-1"}, "request_id": "run-1-a"},
        {"src": "ucsd-dtn1", "dst": "dell-dtn1", "bandwidth": "1P", "request_id": "run-1-b"},
        {"src": "ucsd-dtn1", "dst": "dell-dtn1", "bandwidth": 10**9, "start": "2030-01-01T00:00:00Z",
         "duration": "2h", "policy": "widest", "protect": True, "request_id": "run-1-c"},
    ]))
    aborted = tsdn(env, "path", "batch", str(campaign), "--all-or-nothing")
    assert aborted.returncode == 1, aborted.stderr
    assert "[1] refused RESOURCE_EXHAUSTED" in aborted.stdout and "[0] refused ABORTED" in aborted.stdout
    assert "3 requests: 0 admitted, 3 refused" in aborted.stdout
    assert json.loads(tsdn(env, "path", "list", "--json").stdout) == []

    done = tsdn(env, "path", "batch", str(campaign))
    assert done.returncode == 1, done.stderr  # one was refused
    lines = done.stdout.splitlines()
    assert lines[0].startswith("[0] reservations/") and "ACTIVE" in lines[0]
    assert "caltech-a-dtn1 -> starlight-dtn1 10G" in lines[0]
    assert lines[1].startswith("[1] refused RESOURCE_EXHAUSTED: ")
    assert lines[2].startswith("[2] reservations/") and "SCHEDULED" in lines[2]
    assert lines[-1] == "3 requests: 2 admitted, 1 refused"
    listed = json.loads(tsdn(env, "path", "list", "--json").stdout)
    assert sorted(r["request_id"] for r in listed) == ["run-1-a", "run-1-c"]
    assert {r["request_id"]: r.get("labels") for r in listed} == {"run-1-a": {"campaign": "run-1"}, "run-1-c": None}

    admitted = [e for e in yaml.safe_load(campaign.read_text()) if e["request_id"] != "run-1-b"]
    campaign.write_text(yaml.safe_dump(admitted))
    again = tsdn(env, "path", "batch", str(campaign), "--json")  # a rerun: the same reservations
    assert again.returncode == 0, again.stderr
    results = json.loads(again.stdout)["results"]
    assert sorted(r["reservation"]["id"] for r in results) == sorted(r["id"] for r in listed)


def test_a_bad_batch_file_sends_nothing(running, tmp_path):
    _, env, _, _ = running
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"src": "ucsd-dtn1", "dst": "dell-dtn1", "bandwidth": "10G"},
                               {"src": "ucsd-dtn1", "dst": "dell-dtn1", "bandwidth": "10X"},
                               {"src": "ucsd-dtn1", "dst": "dell-dtn1", "bandwidth": "1G", "colour": "red"}]))
    refused = tsdn(env, "path", "batch", str(bad))
    assert refused.returncode == 2 and f"{bad}: [2].colour: unknown field" in refused.stderr, refused.stderr
    bad.write_text(json.dumps([{"src": "ucsd-dtn1", "dst": "dell-dtn1", "bandwidth": "10G"},
                               {"src": "ucsd-dtn1", "dst": "dell-dtn1", "bandwidth": "10X"}]))
    refused = tsdn(env, "path", "batch", str(bad))
    assert refused.returncode == 2 and f"{bad}: [1].bandwidth: cannot read '10X'" in refused.stderr, refused.stderr
    bad.write_text(json.dumps({"src": "ucsd-dtn1"}))
    refused = tsdn(env, "path", "batch", str(bad))
    assert refused.returncode == 2 and "expected a list of requests" in refused.stderr
    bad.write_text(json.dumps([{"src": "ucsd-dtn1", "dst": "dell-dtn1", "bandwidth": "1G", "labels": {"A B": "x"}}]))
    refused = tsdn(env, "path", "batch", str(bad))  # checked by the controller: the whole batch refused
    assert refused.returncode == 2 and "requests[0]" in refused.stderr and "labels" in refused.stderr
    assert json.loads(tsdn(env, "path", "list", "--json").stdout) == []
