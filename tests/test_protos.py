"""The committed generated modules are exactly what the protos generate."""

from northbound.protos import PACKAGE_DIR, generated_text


def test_generated_modules_match_the_protos():
    fresh = generated_text()
    assert set(fresh) == {"agent_pb2.py", "agent_pb2.pyi", "agent_pb2_grpc.py",
                          "bandwidth_pb2.py", "bandwidth_pb2.pyi", "bandwidth_pb2_grpc.py",
                          "topology_pb2.py", "topology_pb2.pyi", "topology_pb2_grpc.py",
                          "transfer_pb2.py", "transfer_pb2.pyi", "transfer_pb2_grpc.py"}
    stale = [name for name, text in fresh.items() if (PACKAGE_DIR / name).read_text() != text]
    assert not stale, f"regenerate with `python -m northbound.protos`: {stale} differ from the protos"
