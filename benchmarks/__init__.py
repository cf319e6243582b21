"""Benchmarks run by `tsdn bench ...`; each prints one JSON object as its last line."""
