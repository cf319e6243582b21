"""The pure-Python decision core of tsdn.

Nothing in this package imports os-ken, grpc or any other framework, starts a thread or opens a
socket (import-linter holds it in CI): the topology model, path policies, the time-aware bandwidth
ledger, reservations and their lifecycle, rerouting, and flow plans are plain Python over
networkx and SQLite, testable without threads, switches or servers.
"""
