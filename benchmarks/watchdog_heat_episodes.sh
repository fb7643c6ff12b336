# shellcheck shell=bash
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# The gpu_watchdog scenario's heat episode, N times on a kept host: 80
# requests through the front door, 4 a second, while GPU 0 heats to 96 C
# (its engine stopped, the standby serving) and cools back. Prints each
# episode's failed requests and how long the stop took. Load the machine
# beside it (other scenarios, or busy loops) to see a stop under load:
#
#   molecule converge -s gpu_watchdog
#   podman cp benchmarks/watchdog_heat_episodes.sh watchdog-host:/root/
#   podman exec watchdog-host bash /root/watchdog_heat_episodes.sh 8
set -euo pipefail
episodes=${1:-5}
react=(python3 /usr/local/lib/react.py)
state=/run/fake-nvml/state.json
engine0=$(python3 -c 'import glob, json
for path in glob.glob("/etc/llm-server/instances/*.json"):
    entry = json.load(open(path))
    if entry["gpus"] == [0]:
        print(entry["name"], entry["port"])')
read -r engine0 port0 <<<"$engine0"
key=$(mktemp) && result=$(mktemp) && trap 'rm -f "$key" "$result"' EXIT
printf 'sk-watchdog-test-4e1b7d20c9a85f36\n' > "$key"
for episode in $(seq 1 "$episodes"); do
  /usr/local/bin/llm-bench --url https://127.0.0.1 --model tiny-chat --requests 80 --rate 4 --arrival constant \
    --concurrency 4 --no-stream --prompt-tokens 16 --max-tokens 32 --ignore-eos --api-key-file "$key" \
    --ca-file /etc/llm-server/tls/proxy.crt --timeout 60 --json "$result" > /dev/null 2>&1 &
  load=$!
  "${react[@]}" --set devices.0.temperature.gpu=92 --until "json:$state:0.locked_clocks_mhz=[2163, 2163]" \
    --timeout 30 > /dev/null
  stop=$("${react[@]}" --set devices.0.temperature.gpu=96 --until "unit:$engine0=inactive|failed" --timeout 130)
  wait "$load" || true
  python3 -c 'import json, sys
bench, stop = json.load(open(sys.argv[2])), json.loads(sys.argv[3])
print("episode %s: %d of %d failed %s, slowest %.1f ms, engine stopped %.2f s after 96 C" % (
    sys.argv[1], bench["errors"], bench["requests"], bench["errors_by_kind"], bench["e2e_ms"]["max"] or 0,
    stop["seconds"]))' "$episode" "$result" "$stop"
  # The unit allows 6 starts in 10 minutes: the episodes are the test's, not a crash loop.
  systemctl reset-failed "$engine0.service" 2>/dev/null || true
  "${react[@]}" --set devices.0.temperature.gpu=60 --until "json:$state:0.locked_clocks_mhz=" \
    --until "json:$state:0.power_limit_mw=600000" --until "unit:$engine0=active" --timeout 40 > /dev/null
  timeout 60 sh -c "until python3 -c 'import urllib.request; urllib.request.urlopen(\"http://127.0.0.1:$port0/health\", timeout=2)' 2>/dev/null; do sleep 0.5; done"
done
