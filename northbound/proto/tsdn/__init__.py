"""Generated protobuf and gRPC modules of the tsdn northbound API (see northbound/protos.py)."""
