"""The pure-Python decision core of tsdn.

Nothing in this package imports os-ken or grpc: the topology model, path policies, the
bandwidth ledger and (later) flow plans are plain Python over networkx, testable without
threads, switches or servers.
"""
