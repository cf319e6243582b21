"""Suite-wide: in CI (env CI set) every dependency is installed by scripts/bootstrap.sh, so a
test skipped for a missing tool (iperf3, numactl, Chromium, Mininet) is a broken machine, and
it fails instead of passing silently.

Fixtures of the whole suite (tests/ and mininet_tests/): `etcd` and `etcd_cluster`, real etcd."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from benchmarks.etcd_cluster import EtcdCluster


def _fail_skips_in_ci(report) -> None:
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where bootstrap installs everything: {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test skipped in CI fails."""
    outcome = yield
    _fail_skips_in_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A module skipped at import in CI (importorskip) fails."""
    outcome = yield
    _fail_skips_in_ci(outcome.get_result())


def _etcd_cluster(size: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    from benchmarks.etcd_cluster import EtcdCluster, etcd_binary

    binary, why_not = etcd_binary()
    if binary is None:
        pytest.skip(why_not)  # a failure in CI, by the hooks above
    cluster = EtcdCluster(size, tmp_path_factory.mktemp(f"etcd{size}"), binary=binary)
    try:
        yield cluster
    finally:
        cluster.close()


# Function scope: tests kill and restart members and leave keys behind; a start takes about a second.
@pytest.fixture
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    """One real etcd member on loopback ports in a temp dir of its own (`.url` for --store)."""
    yield from _etcd_cluster(1, tmp_path_factory)


@pytest.fixture
def etcd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    """Three real etcd members on loopback ports in a temp dir of their own (benchmarks/etcd_cluster.py)."""
    yield from _etcd_cluster(3, tmp_path_factory)
