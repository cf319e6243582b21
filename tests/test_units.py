"""Units people type: bandwidths, durations, times."""

import math

import pytest

from sdn_app.core.errors import InvalidArgument
from sdn_app.core.units import (
    format_bandwidth,
    format_time,
    parse_bandwidth,
    parse_duration,
    parse_time,
)


@pytest.mark.parametrize(("text", "bps"), [
    ("100G", 100 * 10**9), ("1.5T", 1_500 * 10**9), ("400M", 400 * 10**6), ("10k", 10_000),
    ("100Gbps", 100 * 10**9), ("25 G", 25 * 10**9), ("40Gb/s", 40 * 10**9), ("1e9", 10**9),
    ("123", 123), (100, 100), ("0.5G", 500_000_000),
])
def test_bandwidths_people_type(text, bps):
    assert parse_bandwidth(text) == bps


@pytest.mark.parametrize("text", ["10X", "", "G", "0", "0G", "-5G", "1.5", "100GG", "1e999999G", "2000P", True, -3])
def test_bad_bandwidths_name_the_field(text):
    with pytest.raises(InvalidArgument, match=r"^--bandwidth: "):
        parse_bandwidth(text, "--bandwidth")


@pytest.mark.parametrize("bps", [1, 999, 10**6, 25 * 10**9, 1_500 * 10**9, 10**12, 123_456_789_000])
def test_formatted_bandwidth_reads_back_close(bps):
    assert parse_bandwidth(format_bandwidth(bps)) == pytest.approx(bps, rel=1e-3)


def test_format_bandwidth_is_short():
    assert format_bandwidth(10**12) == "1T"
    assert format_bandwidth(1_500 * 10**9) == "1.5T"
    assert format_bandwidth(0) == "0"


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("30m", 1800), ("1h30m", 5400), ("2d", 172800), ("1w", 604800), ("45", 45), ("250ms", 0.25),
])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "1x", "0s", "-1h", "h", "1h30", "inf", "nan"])
def test_bad_durations(text):
    with pytest.raises(InvalidArgument, match=r"^--duration: "):
        parse_duration(text, "--duration")


def test_times():
    now = 1_479_081_600.0
    assert parse_time("now", now) == now
    assert parse_time("+1h", now) == now + 3600
    assert parse_time("2016-11-14T00:00:00Z", now) == now
    assert parse_time("2016-11-14T01:00:00+01:00", now) == now
    assert parse_time("2016-11-14 00:00", now) == now  # no zone means UTC
    assert parse_time(str(now), now) == now
    assert format_time(now) == "2016-11-14T00:00:00Z"
    assert format_time(math.inf) == "never"


@pytest.mark.parametrize("text", ["tomorrow", "2016-13-01", "+", "+x", "-5", "nan", "inf"])
def test_bad_times(text):
    with pytest.raises(InvalidArgument, match=r"^--start: "):
        parse_time(text, 0.0, "--start")
