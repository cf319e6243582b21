"""PrefixIndex (sdn_app.core.prefix_index): every holder whose prefixes overlap is a candidate,
and holders in other /48s are not."""

from __future__ import annotations

import ipaddress
import random

from sdn_app.core.prefix_index import PrefixIndex


def overlaps(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    return any(ipaddress.IPv6Network(x).overlaps(ipaddress.IPv6Network(y)) for x in a for y in b)


def random_prefix(rng: random.Random) -> str:
    length = rng.choice([32, 44, 48, 56, 64, 64, 64, 80, 128])
    address = rng.choice([0x20010DB8, 0xFD010000, 0xFD020000]) << 96 | rng.getrandbits(20) << 76 | rng.getrandbits(76)
    return str(ipaddress.IPv6Network((address, length), strict=False))


def test_candidates_hold_every_overlapping_holder_and_leave_out_other_48s():
    rng = random.Random(7)
    index, held = PrefixIndex(), {}
    for n in range(400):
        held[n] = (random_prefix(rng), random_prefix(rng))
        index.add(n, held[n])
    for n in range(0, 400, 3):  # some leave
        index.discard(n)
        del held[n]
    index.discard(9999)  # never filed: nothing happens
    for _ in range(300):
        asked = (random_prefix(rng), random_prefix(rng))
        found = index.candidates(asked)
        assert {k for k, p in held.items() if overlaps(p, asked)} <= found
    a = ("2001:db8:1:100::/64", "2001:db8:3:100::/64")
    small = PrefixIndex()
    small.add("a", a)
    small.add("b", ("2001:db8:1:200::/64", "2001:db8:1:300::/64"))  # both ends in one /48
    small.add("c", ("2001:db8:99::/64", "2001:db8:98::/64"))
    assert small.candidates(("2001:db8:1:1::/64", "2001:db8:7::/64")) == {"a", "b"}
    small.discard("b")
    assert small.candidates(("2001:db8:1:1::/64", "2001:db8:7::/64")) == {"a"}
    small.add("wide", ("2001:db8::/32", "2001:db9::/64"))
    assert small.candidates(("fd00:1::/64", "fd00:2::/64")) == {"wide"}
    assert small.candidates(("2001::/16", "fd00:2::/64")) == {"a", "c", "wide"}
    assert len(small) == 3
