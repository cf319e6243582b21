#!/usr/bin/env bash
# The SC16 demo, end to end, as root on a fresh machine: install what is needed (Debian packages,
# Open vSwitch in userspace, the venv), then replay scenarios/sc16-terabit.yaml in Mininet with the
# real controller and DTN agents, then scenarios/sc16-nsi.yaml: the same show floor with the WAN to
# Sao Paulo and Ann Arbor booked over NSI from two neighbouring domains (real OpenNSA instances from
# ../shared/tools/opennsa, or $TSDN_OPENNSA; skipped, saying so, when that recipe is absent).
# Extra arguments go to both `tsdn demo` runs (e.g. --no-http); `--out DIR` puts each report in
# DIR/<scenario>. The exit code is the first failing run's, else 0.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh

out="" args=()
while (($#)); do
  case "$1" in
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --out=*) out="${1#--out=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

run() {  # run SCENARIO: one `tsdn demo`, its exit code returned
  local where=()
  [ -n "$out" ] && where=(--out "$out/$1")
  .venv/bin/tsdn demo "$1" ${where[@]+"${where[@]}"} ${args[@]+"${args[@]}"}
}

code=0
run sc16-terabit || code=$?
recipe="${TSDN_OPENNSA:-$(cd .. && pwd)/shared/tools/opennsa}"
if [ -f "$recipe/setup.sh" ]; then
  run sc16-nsi || { rc=$?; [ "$code" = 0 ] && code=$rc; }
else
  echo "scripts/demo.sh: sc16-nsi skipped: no OpenNSA recipe at $recipe (put ../shared beside the repository or set TSDN_OPENNSA)" >&2
fi
exit "$code"
