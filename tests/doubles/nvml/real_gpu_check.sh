#!/usr/bin/env bash
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# The checks that need a real NVIDIA GPU, in one run (read-only: nothing is
# set on the GPU). Run from the repository root on a GPU host that has
# python3 with nvidia-ml-py and prometheus-client (ansible-core for gpu_facts
# may come through PYTHONPATH):
#
#   OUT=build/real-gpu bash tests/doubles/nvml/real_gpu_check.sh
#
# It writes to $OUT:
#   nvidia-smi.txt            what the driver's own tool says, for reference
#   captured_fixture.json     this host's NVML answers as a fixture of the double
#   gpu_facts_real.json       gpu_facts against the real NVML
#   gpu_facts_double.json     gpu_facts against the double loaded with the capture
#   exporter_real.prom        one llm-gpu-exporter scrape against the real NVML
#   checks.txt                the round trip's verdict, NVML events, the scrape
#                             timing against the real NVML, CUDA context size
#   watchdog_dry_run.txt      llm-gpu-watchdog in dry run: the heat steps it takes
#                             from the card, then steps forced below the card's
#                             temperature (tests/doubles/nvml/real/watchdog_*.json),
#                             and the clocks and power limit unchanged after it
set -uo pipefail
OUT=${OUT:-build/real-gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT" build/nvml
OUT=$(cd "$OUT" && pwd)
exec 3>"$OUT/checks.txt"
say() { echo "== $*" >&3; }

nvidia-smi -q >"$OUT/nvidia-smi.txt" 2>&1

say "build the NVML double"
make -s -C tests/doubles/nvml OUT="$PWD/build/nvml" >&3 2>&1

say "round trip: capture, gpu_facts real vs double"
$PY tests/doubles/nvml/roundtrip.py --double-dir build/nvml --out "$OUT" >&3 2>&1
echo "rc=$?" >&3

say "llm-gpu-exporter --once against the real NVML"
coll=$(mktemp -d)
mkdir -p "$coll/ansible_collections/homelab" && ln -s "$PWD" "$coll/ansible_collections/homelab/llm_server"
start=$(date +%s%N)
PYTHONPATH="$coll:$PWD/host${PYTHONPATH:+:$PYTHONPATH}" timeout 60 "$PY" -m llm_server_host.gpu_exporter --once \
  >"$OUT/exporter_real.prom" 2>>"$OUT/checks.txt"
echo "rc=$? wall=$(( ($(date +%s%N) - start) / 1000000 )) ms" >&3
grep -E '^llm_gpu_exporter_(scrape_success|unsupported|read_errors)' "$OUT/exporter_real.prom" >&3

say "scrape timing against the real NVML"
timeout 240 "$PY" benchmarks/gpu_exporter_scrape.py --real --scrapes 300 >&3 2>&1
echo "rc=$?" >&3

say "NVML events and CUDA context"
timeout 120 "$PY" - >&3 2>&1 <<'EOF'
import time
import pynvml
pynvml.nvmlInit()
print('nvml-ml-py', getattr(pynvml, '__version__', '?'), 'driver', pynvml.nvmlSystemGetDriverVersion())
names = {v: k for k, v in vars(pynvml).items() if k.startswith('nvmlEventType') and isinstance(v, int)}
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    try:
        mask = pynvml.nvmlDeviceGetSupportedEventTypes(h)
        print('GPU', i, 'supported event types 0x%x' % mask, sorted(n for v, n in names.items() if v and mask & v == v))
    except pynvml.NVMLError as err:
        print('GPU', i, 'supported event types:', err)
    es = pynvml.nvmlEventSetCreate()
    try:
        pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
        t = time.monotonic()
        try:
            pynvml.nvmlEventSetWait_v2(es, 100)
            print('an event arrived')
        except pynvml.NVMLError as err:
            print('XID registration ok; wait 100 ms ->', err, '%.0f ms' % ((time.monotonic() - t) * 1e3))
    except pynvml.NVMLError as err:
        print('XID registration:', err)
    pynvml.nvmlEventSetFree(es)
    for call in ('nvmlDeviceGetCurrentClocksEventReasons', 'nvmlDeviceGetRemappedRows', 'nvmlDeviceGetPcieReplayCounter',
                 'nvmlDeviceGetTotalEccErrors'):
        func = getattr(pynvml, call, None)
        args = (h,) if call != 'nvmlDeviceGetTotalEccErrors' else (h, 0, 1)
        try:
            print(call, func(*args) if func else 'absent in these bindings')
        except pynvml.NVMLError as err:
            print(call, err)
    used0 = pynvml.nvmlDeviceGetMemoryInfo(h).used
    try:
        import torch
        torch.zeros(1, device='cuda:%d' % i)
        torch.cuda.synchronize()
        time.sleep(0.5)
        used1 = pynvml.nvmlDeviceGetMemoryInfo(h).used
        print('CUDA context + torch init: %.0f MiB (NVML used %d -> %d)' % ((used1 - used0) / 2**20, used0, used1))
    except Exception as err:  # torch is optional here
        print('torch:', err)
EOF
echo "rc=$?" >&3
say "the GPU watchdog in dry run"
watchdog() {  # watchdog CONFIG COMMAND
  PYTHONPATH="$coll:$PWD/host${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m llm_server_host.gpu_watchdog \
    --config "tests/doubles/nvml/real/$1" "$2"
}
Q="nvidia-smi --query-gpu=temperature.gpu,power.limit,clocks.sm,clocks_event_reasons.active --format=csv"
rm -rf /tmp/llm-real-gpu-watchdog && mkdir -p /tmp/llm-real-gpu-watchdog/instances
{
  $Q
  echo "--- thresholds from the card (defaults)"
  watchdog watchdog_defaults.json once; echo "once rc=$?"
  grep -h threshold /tmp/llm-real-gpu-watchdog/metrics0/*
  echo "--- forced below the card's temperature, dry run"
  for _ in 1 2 3; do
    watchdog watchdog_forced.json once; echo "once rc=$?"
  done
  watchdog watchdog_forced.json status
  grep -hv '^#' /tmp/llm-real-gpu-watchdog/metrics/*
  echo "--- after: unchanged"
  $Q
} >"$OUT/watchdog_dry_run.txt" 2>&1
echo "rc=$?" >&3

cp build/bench-reports/gpu-exporter-scrape.json "$OUT/scrape_real.json" 2>/dev/null
say "done"
