"""System tests on real Open vSwitch and Mininet (root only; see README.md)."""
