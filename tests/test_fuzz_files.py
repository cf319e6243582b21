"""Fuzzing the topology and tokens file loaders, in process and through the real command line.

Hypothesis starts from valid documents (a small topology, a tokens file) and mutates them: values
replaced by huge or negative integers (up to 5,000 digits), NaN and infinities, other types,
unicode and very long text, lists and mappings nested up to 1,000 deep; fields removed, unknown
ones added, list entries duplicated. The YAML text is then mutated too: cut short, a line
repeated (keys given twice), junk inserted, replaced by random bytes, padded beyond the size
limit. For every example the outcome is one of two:

- accepted, and then valid all the way: the model builds, GetTopology's message serializes, the
  file's dump loads back to the same topology (tokens: an authenticator with tokens);
- refused with `InvalidArgument` naming the file (the CLI: exit 2, `tsdn: error: FILE...`).

Never a traceback or any other exception. Bounded for CI: derandomized (the same examples in
every run), no example database: 3,000 loader calls and 20 processes, under a minute on 2 busy cores.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from northbound.auth import MAX_TOKENS_FILE_BYTES, Authenticator
from northbound.convert import topology_out
from sdn_app.core.clock import SystemClock
from sdn_app.core.errors import InvalidArgument
from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import MAX_TOPOLOGY_BYTES, dump_topology_spec, load_topology_spec
from topologies import TOPOLOGY_DIR

IN_PROCESS = settings(max_examples=1500, derandomize=True, database=None, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                             HealthCheck.function_scoped_fixture])
THROUGH_CLI = settings(IN_PROCESS, max_examples=16)

TOPOLOGY: dict[str, Any] = {
    "name": "fuzz",
    "description": "a small WAN",
    "switches": [
        {"name": "s1", "dpid": 1, "ports": ["1-4"]},
        {"name": "s2", "dpid": "00:00:00:00:00:00:00:02", "ports": [1, 2, 3]},
        {"name": "s3", "dpid": "0x3", "ports": [1, 2, 3], "description": "third"},
    ],
    "links": [
        {"a": "s1", "a_port": 1, "b": "s2", "b_port": 1, "capacity": "100G", "kind": "wan"},
        {"name": "l2", "a": "s2", "a_port": 2, "b": "s3", "b_port": 1, "capacity_ab": "40G", "capacity_ba": "10G",
         "latency_ms": 2.5},
    ],
    "dtns": [
        {"name": "d1", "switch": "s1", "port": 4, "ipv4": "10.0.0.1", "mac": "02:00:00:00:00:01", "nic_speed": "100G",
         "numa_node": 0},
        {"name": "d3", "switch": "s3", "port": 3, "ipv4": "10.0.0.3", "mac": "02:00:00:00:00:03", "nic_speed": 25e9},
    ],
    "sites": [{"name": "Salt Lake", "lat": 40.76, "lon": -111.89, "kind": "booth", "switches": ["s1", "s2"]}],
}
TOKENS: dict[str, Any] = {"tokens": [
    {"principal": "rucio", "role": "service", "token": "rucio-token-0123456789abcdef"},
    {"principal": "noc", "role": "admin", "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"},
    {"principal": "dtn-1", "role": "agent", "token": "agent-token-0123456789abcdef", "dtn": "d1"},
]}

# Placeholders for what yaml.safe_dump cannot write (a 5,000-digit int, 1,000 nested lists): they
# are put into the document as text and replaced in the dumped YAML.
_PLACEHOLDER = re.compile(r"""['"]?@@(INT|DEEP|DEEPMAP):(\d+)@@['"]?""")


def _expand(match: re.Match) -> str:
    kind, n = match[1], int(match[2])
    if kind == "INT":
        return "9" * n
    if kind == "DEEP":
        return "[" * n + "]" * n
    return "{a: " * n + "1" + "}" * n


huge_ints = st.sampled_from([41, 4301, 5000]).map(lambda n: f"@@INT:{n}@@")
deep = st.sampled_from(["DEEP", "DEEPMAP"]).flatmap(
    lambda kind: st.sampled_from([31, 33, 600, 1000]).map(lambda n: f"@@{kind}:{n}@@"))
edge_ints = st.sampled_from([0, -1, 1, 2**31, 2**32, 0xFFFFFF00, 0xFFFFFF01, 2**63, 2**64 - 1, 2**64, 10**18,
                             10**18 + 1, -(2**64), 10**40])
tricky_text = st.sampled_from([
    "", " ", "100G", "-5G", "0", "1e999999G", "1.5T", "400Mbps", "fast", "9" * 5000, "1-" + "9" * 5000,
    "0x" + "f" * 5000, "4-1", "1-5000", "10:00:00:00:00:00:00:01", "02:00:00:00:00:01", "01:00:00:00:00:01",
    "10.0.0.300", "255.255.255.255", "224.0.0.1", "s1", "d1", "l2", "wan", "agent", "admin", "service", "x" * 100_000,
    "\x00", "\u202e", "é", "東京", "😀", "${HOME}", "*alias", "&anchor", "!!python/object", "null", "~", "yes",
])
scalars = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), edge_ints, huge_ints, st.booleans(), st.none(),
    st.floats(allow_nan=True, allow_infinity=True), tricky_text, st.text(max_size=40),
)
values = st.one_of(
    scalars, deep,
    st.lists(scalars, max_size=4),
    st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), scalars, max_size=3),
)


def _paths(node: Any, path: tuple = ()) -> list[tuple]:
    found = [path]
    if isinstance(node, dict):
        for key, child in node.items():
            found += _paths(child, (*path, key))
    elif isinstance(node, list):
        for i, child in enumerate(node):
            found += _paths(child, (*path, i))
    return found


@st.composite
def mutated_documents(draw, base: dict[str, Any]) -> dict[str, Any] | list | Any:
    """`base` with one to three structural mutations."""
    document: Any = copy.deepcopy(base)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(document)
        path = draw(st.sampled_from(paths))
        operation = draw(st.sampled_from(["replace", "replace", "delete", "duplicate", "add"]))
        if not path:
            if operation == "replace":
                document = draw(values)
            continue
        parent = document
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        if operation == "replace":
            parent[last] = draw(values)
        elif operation == "delete":
            del parent[last]
        elif operation == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[last]))
        elif operation == "add" and isinstance(parent[last], dict):
            parent[last][draw(st.sampled_from(["extra", "name", "capacity", "1", "tokens", "x" * 300]))] = draw(values)
    return document


@st.composite
def file_texts(draw, base: dict[str, Any], limit: int) -> bytes:
    """A mutated document as YAML, then perhaps mutated as text or bytes."""
    document = draw(mutated_documents(base))
    text = yaml.safe_dump(document, allow_unicode=True, sort_keys=False,
                          default_flow_style=draw(st.sampled_from([False, None, True])))
    text = _PLACEHOLDER.sub(_expand, text)
    data = text.encode("utf-8", errors="surrogatepass")
    how = draw(st.sampled_from(["as is", "as is", "as is", "cut", "repeat a line", "insert", "bytes", "pad"]))
    if how == "cut":
        data = data[:draw(st.integers(min_value=0, max_value=len(data)))]
    elif how == "repeat a line":
        lines = data.splitlines(keepends=True)
        i = draw(st.integers(min_value=0, max_value=max(len(lines) - 1, 0)))
        data = b"".join(lines[:i + 1] + lines[i:])
    elif how == "insert":
        at = draw(st.integers(min_value=0, max_value=len(data)))
        junk = draw(st.one_of(st.binary(max_size=16), st.sampled_from(
            [b"\t", b"{", b"]", b": ", b"- ", b"&a ", b"*a", b"!!int ", b"!!binary ", b"? ", b"%YAML 1.1\n---\n",
             b"---\n", b"\xef\xbb\xbf", b"\xff", b"<<: *a\n"])))
        data = data[:at] + junk + data[at:]
    elif how == "bytes":
        data = draw(st.binary(max_size=200))
    elif how == "pad":
        data += b"\n#" + b"x" * (limit + 1 - len(data))
    return data


def stub_book(topology: Topology) -> SimpleNamespace:
    return SimpleNamespace(topology=topology, clock=SystemClock(), booked_now=lambda direction: 0)


def check_topology_file(path: Path) -> None:
    """Accepted and valid all the way, or refused naming the file; anything else fails."""
    try:
        spec = load_topology_spec(path)
    except InvalidArgument as exc:
        assert str(path) in str(exc), exc
        event("refused")
        return
    event("accepted")
    topology = Topology(spec, str(path))
    topology_out(stub_book(topology)).SerializeToString()
    assert all(isinstance(w, str) for w in topology.unreachable_dtn_warnings())
    again = path.with_suffix(".again.yaml")
    again.write_text(dump_topology_spec(spec), encoding="utf-8")
    assert load_topology_spec(again) == spec


@IN_PROCESS
@given(data=file_texts(TOPOLOGY, MAX_TOPOLOGY_BYTES))
def test_topology_loader_accepts_or_refuses_cleanly(tmp_path, data):
    path = tmp_path / "topology.yaml"
    path.write_bytes(data)
    check_topology_file(path)


@IN_PROCESS
@given(data=file_texts(TOKENS, MAX_TOKENS_FILE_BYTES))
def test_tokens_loader_accepts_or_refuses_cleanly(tmp_path, data):
    path = tmp_path / "tokens.yaml"
    path.write_bytes(data)
    path.chmod(0o600)
    try:
        auth = Authenticator.from_file(path)
    except InvalidArgument as exc:
        assert str(path) in str(exc), exc
        event("refused")
        return
    event("accepted")
    assert not auth.development_mode


def tsdn(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tsdn", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(TOPOLOGY_DIR.parent)})


@THROUGH_CLI
@given(data=file_texts(TOPOLOGY, MAX_TOPOLOGY_BYTES))
def test_topo_validate_exits_0_or_2_without_a_traceback(tmp_path, data):
    path = tmp_path / "topology.yaml"
    path.write_bytes(data)
    done = tsdn("topo", "validate", str(path))
    assert "Traceback" not in done.stderr, done.stderr
    if done.returncode == 0:
        assert done.stdout.startswith(f"ok: {path}: "), done.stdout
    else:
        assert done.returncode == 2, done.stderr
        named = done.stderr.startswith(f"tsdn: error: {path}: ")  # or in each problem's line:
        listed = done.stderr.startswith("tsdn: error: invalid topology") and f"\n  {path}: " in done.stderr
        assert named or listed, done.stderr


TOKEN_SAMPLES = [
    f"tokens:\n  - principal: a\n    role: admin\n    token: {'9' * 5000}\n".encode(),
    b"tokens: " + b"[" * 1000 + b"]" * 1000 + b"\n",
    b"\xff\xfe junk \x00",
    yaml.safe_dump(TOKENS).encode(),
]


@pytest.mark.parametrize("data", TOKEN_SAMPLES, ids=["huge-int", "deep", "bytes", "valid"])
def test_controller_refuses_a_hostile_tokens_file_with_exit_2(tmp_path, data):
    """`tsdn controller --tokens` on hostile files; an invalid --emulation-scale (checked after the
    tokens) makes the valid one exit 2 too, so no controller is left running."""
    path = tmp_path / "tokens.yaml"
    path.write_bytes(data)
    path.chmod(0o600)
    done = tsdn("controller", "--topology", "ring8", "--tokens", str(path), "--no-openflow", "--no-http",
                "--state", str(tmp_path / "s.db"), "--listen-grpc", "127.0.0.1:0", "--emulation-scale", "5")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("tsdn: error: ")
    assert str(path) in done.stderr or "--emulation-scale" in done.stderr, done.stderr
