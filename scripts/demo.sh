#!/usr/bin/env bash
# The SC16 demo. Until the Mininet scenario runner lands, it shows the SC16 topology and the
# routes the controller would give the two terabit demos, computed offline by tsdn's core.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
tsdn=.venv/bin/tsdn
$tsdn topo validate sc16
echo
echo "== RDMA demo: 400G Caltech -> StarLight, widest path, with a link-disjoint backup"
$tsdn path compute --topology sc16 caltech-a-dtn1 starlight-dtn1 --bandwidth 400G --policy widest --protect --duration 1h
echo
echo "== TCP demo: 400G between the two Caltech booth switches"
$tsdn path compute --topology sc16 caltech-a-dtn2 caltech-b-dtn1 --bandwidth 400G --duration 1h
echo
echo "== WAN: 40G Pasadena -> Sao Paulo, three alternatives around the rings"
$tsdn path compute --topology sc16 pasadena-dtn1 saopaulo-dtn1 --bandwidth 40G --alternatives 3
