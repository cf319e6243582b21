#!/usr/bin/env bash
# The SC16 demo, end to end, as root on a fresh machine: install what is needed (Debian packages,
# Open vSwitch in userspace, the venv), then replay scenarios/sc16-terabit.yaml in Mininet with the
# real controller and DTN agents. Extra arguments go to `tsdn demo` (e.g. --out DIR, --no-http).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/tsdn demo sc16-terabit "$@"
