#!/usr/bin/env bash
# make demo: the owner's first day, as `make test` runs it (the first_day
# scenario): a fresh home server in a container (two simulated RTX PRO 6000
# Blackwell through the NVML test double, a UPS through NUT's dummy-ups,
# vLLM's CPU build as the engine), a fresh VPS and a client on the
# internet. The README's quick start runs as written against a copy of
# inventories/example; site.yml stops for the reboot, runs to the end, and
# then the scenario streams an answer from the internet through the VPS,
# cuts the power for a while, cuts the tunnel, and renders the console page.
# make test runs the same scenario with two checks more, which the demo
# leaves out to show the rest sooner (LLM_SERVER_DEMO=1): an engine
# restarted with the Hub unreachable, and run 3 (changed=0) on the
# collection installed from its tarball.
# One line per step on screen, Molecule's whole output in build/logs/demo.log,
# and what it showed at the end (from build/first-day/).
# KEEP=1 leaves the three containers running for a look around
# (podman exec -it firstday-home bash; remove them with
# molecule destroy -s first_day).
set -euo pipefail
cd "$(dirname "$0")/.."

: "${LLM_SERVER_TEST_IMAGE:?run through make demo}"
log=build/logs/demo.log
report=build/first-day
mkdir -p build/logs
destroy=always
if [ "${KEEP:-0}" = 1 ]; then destroy=never; fi

echo "The owner's first day: home (2 simulated GPUs, a UPS), a VPS and the internet, in containers"
echo "Molecule's output: $log"
set +e
# Wide lines: Molecule's console would wrap the step names at 80 columns.
COLUMNS=200 LLM_SERVER_DEMO=1 molecule test -s first_day --destroy "$destroy" 2>&1 | tee "$log" \
  | python3 tests/first_day/summary.py --progress
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
  echo "make demo: the first_day scenario failed (exit $rc); the cause is at the end of $log" >&2
  tail -n 40 "$log" | sed -e 's/\x1b\[[0-9;]*m//g' >&2
  exit "$rc"
fi
python3 tests/first_day/summary.py "$report"
if [ "$destroy" = never ]; then
  echo
  echo "The containers are still running (KEEP=1): podman exec -it firstday-home bash; molecule destroy -s first_day"
fi
