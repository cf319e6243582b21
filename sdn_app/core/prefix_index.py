"""Which holders of IPv6 prefixes may overlap a new pair of prefixes, without comparing with all.

Two prefixes overlap only if one contains the other, so two prefixes of /48 or longer that
overlap share their first 48 bits. `PrefixIndex` files each holder under the /48 of each of its
prefixes (prefixes shorter than /48 under "wide", compared with everything), and `candidates`
returns the holders filed under the /48s of the new prefixes, plus the wide ones: a superset of
those that overlap, usually a handful among thousands (a Rucio campaign's /64s).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Hashable, Iterable

BUCKET_BITS = 48


@functools.lru_cache(maxsize=1 << 15)
def _bucket(prefix: str) -> int | None:
    """The /48 a prefix lies in, None for a prefix shorter than /48."""
    network = ipaddress.IPv6Network(prefix)
    if network.prefixlen < BUCKET_BITS:
        return None
    return int(network.network_address) >> (128 - BUCKET_BITS)


class PrefixIndex:
    """Holders (any hashable key) by the /48s of their IPv6 prefixes."""

    def __init__(self) -> None:
        self._buckets: dict[int, set[Hashable]] = {}
        self._wide: set[Hashable] = set()
        self._filed: dict[Hashable, tuple[int | None, ...]] = {}

    def __len__(self) -> int:
        return len(self._filed)

    def add(self, key: Hashable, prefixes: Iterable[str]) -> None:
        """File `key` under its `prefixes` (again: its earlier filing is replaced)."""
        self.discard(key)
        buckets = tuple(_bucket(p) for p in prefixes)
        for bucket in buckets:
            if bucket is None:
                self._wide.add(key)
            else:
                self._buckets.setdefault(bucket, set()).add(key)
        self._filed[key] = buckets

    def discard(self, key: Hashable) -> None:
        """Forget `key` (nothing when it is not filed)."""
        for bucket in set(self._filed.pop(key, ())):  # both prefixes may lie in one /48
            if bucket is None:
                self._wide.discard(key)
            else:
                holders = self._buckets[bucket]
                holders.discard(key)
                if not holders:
                    del self._buckets[bucket]

    def candidates(self, prefixes: Iterable[str]) -> set[Hashable]:
        """Every holder with a prefix that may overlap one of `prefixes` (a superset)."""
        found = set(self._wide)
        for prefix in prefixes:
            bucket = _bucket(prefix)
            if bucket is None:
                return set(self._filed)
            found |= self._buckets.get(bucket, set())
        return found
