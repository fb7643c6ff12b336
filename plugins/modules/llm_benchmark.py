#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llm_benchmark
short_description: Load-test an OpenAI-compatible endpoint and gate on latency and throughput thresholds
version_added: 0.4.0
author: homelab.llm_server maintainers (@homelab)
description:
  - Sends O(requests) chat completions to an OpenAI-compatible endpoint (vLLM, llama.cpp's C(llama-server), or
    nginx in front of them) from the target host, streamed or not, with prompts of about O(prompt_tokens)
    tokens, and measures time to first token (TTFT), inter-token latency (ITL), time per output token (TPOT),
    end-to-end latency (mean, min, p50, p95, p99, max), requests/s, output tokens/s and errors by kind.
  - "Closed loop by default: O(concurrency) workers, each on its own keep-alive connection, send their next
    request as soon as the previous one ends. With O(rate) it is an open loop: requests are due at Poisson
    (or constant, O(arrival)) arrival times and at most O(concurrency) are in flight."
  - The run always ends after O(requests) requests or O(duration_limit) seconds; requests still in flight at
    the limit are abandoned and counted in RV(results.unfinished), not as errors.
  - "Errors are counted by kind: C(connect), C(tls), C(timeout), C(http_<status>), C(stream_cut) (a stream
    that ends without C(data: [DONE]) or a connection closed mid-answer), C(stream_error) (an SSE error event
    or an answer with C(error)), C(connection_closed) and C(bad_response)."
  - O(thresholds) and O(baseline) turn the run into a gate; by default the task fails when one is missed, with
    the figures in the message, so a deployment can roll back.
  - The same code is the command C(llm-bench) (C(plugins/module_utils/_loadbench.py) and the C(_loadbench_*)
    modules beside it in the collection, C(scripts/llm-bench) in a checkout), which prints a table, writes JSON
    and exits 1 when thresholds are missed.
options:
  url:
    description:
      - Base URL of the endpoint, with or without C(/v1), for example V(http://127.0.0.1:8000/v1) or
        V(https://llm.example.org). Credentials in the URL are refused; use O(api_key).
    type: str
    required: true
  model:
    description: Model name to request. Unset, the first id of C(GET /v1/models).
    type: str
  requests:
    description: Requests to send in the measured run.
    type: int
    default: 100
  concurrency:
    description: Workers, each on its own connection; with O(rate), the most requests in flight.
    type: int
    default: 1
  rate:
    description: Requests per second for an open loop. Unset, a closed loop at O(concurrency).
    type: float
  arrival:
    description: How requests arrive with O(rate); V(poisson) (exponential gaps, seeded by O(seed)) or V(constant).
    type: str
    default: poisson
    choices: [poisson, constant]
  stream:
    description: Stream the answers (server-sent events). TTFT, ITL and TPOT are measured only for streams.
    type: bool
    default: true
  prompt_tokens:
    description:
      - Prompt length in words of filler (about one token each). Each prompt starts with its own random tag,
        so prefix caching cannot answer it.
    type: int
    default: 128
  max_tokens:
    description: The requests' C(max_tokens).
    type: int
    default: 128
  ignore_eos:
    description: Send C("ignore_eos" true) (vLLM, llama.cpp) so that every answer is O(max_tokens) long.
    type: bool
    default: false
  api_key:
    description: API key sent as C(Authorization Bearer). Never logged, returned or written.
    type: str
  api_key_file:
    description: File on the target holding the API key. Mutually exclusive with O(api_key).
    type: path
  ca_file:
    description: CA bundle on the target to verify the server certificate with (HTTPS).
    type: path
  validate_certs:
    description: Verify the server certificate and name (HTTPS). Turn off only for a self-signed test server.
    type: bool
    default: true
  timeout:
    description: Seconds one request may take before it counts as a C(timeout) error.
    type: float
    default: 120.0
  duration_limit:
    description: Seconds the measured run may take at most.
    type: float
    default: 600.0
  warmup:
    description: Requests sent before the measured run and left out of the results.
    type: int
    default: 0
  processes:
    description:
      - Client processes that share the load, for rates one core cannot send. A C(cpu_percent) in
        RV(results.client) near 100 x O(processes) means the client, not the server, was the limit.
    type: int
    default: 1
  seed:
    description: Seed of the prompts and of Poisson arrivals.
    type: int
    default: 0
  thresholds:
    description:
      - Limits the run must meet. Keys are C(<metric>.<stat>) with metric one of C(ttft_ms), C(itl_ms),
        C(tpot_ms), C(e2e_ms) and stat one of C(mean), C(min), C(p50), C(p95), C(p99), C(max); or one of
        C(requests_per_s), C(output_tokens_per_s), C(completed), C(error_rate), C(errors), C(unfinished).
      - A plain number is a maximum for latencies, C(error_rate), C(errors) and C(unfinished), and a minimum
        for the rates and C(completed). A string with C(<=), C(>=), C(<) or C(>) in front says it explicitly,
        for example V(>=50).
      - A run in which no request completed misses its thresholds whatever they are.
    type: dict
    default: {}
  baseline:
    description:
      - A previous result (the JSON that O(output) or C(llm-bench --json) wrote) on the target. Latency
        p50/p95/p99 more than O(tolerance_pct) higher (and at least 1 ms), or a rate more than O(tolerance_pct)
        lower, is a regression and fails the task like a missed threshold.
    type: path
  tolerance_pct:
    description: Per cent a metric may be worse than the O(baseline) before it is a regression.
    type: float
    default: 10.0
  output:
    description:
      - Path on the target to write the results to as JSON (mode 0644; it holds no secret). Not written in check
        mode. Rewriting it is not reported as a change.
    type: path
  fail_on_threshold:
    description: Fail the task when a threshold is missed, the baseline regressed or no request completed.
    type: bool
    default: true
extends_documentation_fragment:
  - homelab.llm_server.attributes
  - homelab.llm_server.attributes.no_diff
attributes:
  check_mode:
    details:
      - A benchmark only reads from the server, so it runs in check mode too; O(output) is then not written.
  platform:
    platforms: posix
notes:
  - Runs on the target host with its Python's standard library only, so it measures from where it runs; use
    C(delegate_to) to measure from another host, for example the one the clients sit on.
  - C(changed) is always V(false).
  - Percentiles are linear interpolations between the closest ranks (numpy's default method).
  - The load itself is real; point it at a server that may take it.
seealso:
  - module: homelab.llm_server.capacity_plan
"""

EXAMPLES = r"""
- name: Benchmark the local engine, 50 streamed requests at concurrency 4, and fail the play below the targets
  homelab.llm_server.llm_benchmark:
    url: http://127.0.0.1:8001/v1
    requests: 50
    concurrency: 4
    prompt_tokens: 256
    max_tokens: 64
    thresholds:
      ttft_ms.p95: 2000
      e2e_ms.p99: 15000
      error_rate: 0
      output_tokens_per_s: ">=20"
    output: /var/lib/llm-server/bench/last.json
  register: bench

- name: Show the benchmark table
  ansible.builtin.debug:
    var: bench.table

- name: Through nginx over TLS with an API key, compared with the last good run
  homelab.llm_server.llm_benchmark:
    url: https://llm.example.org
    api_key: "{{ vault_llm_bench_api_key }}"
    ca_file: /etc/ssl/certs/ca-certificates.crt
    requests: 20
    concurrency: 2
    baseline: /var/lib/llm-server/bench/baseline.json
    tolerance_pct: 15

- name: Open loop at 5 requests/s, not streamed, report only
  homelab.llm_server.llm_benchmark:
    url: http://127.0.0.1:8001
    model: qwen3-32b
    rate: 5
    concurrency: 16
    requests: 100
    stream: false
    thresholds:
      e2e_ms.p95: 8000
    fail_on_threshold: false
  register: bench_open_loop
"""

RETURN = r"""
passed:
  description: Whether every threshold held, the baseline did not regress and at least one request completed.
  returned: success or a missed threshold
  type: bool
  sample: false
threshold_failures:
  description: One line per missed threshold, naming the metric, the measured value and the limit.
  returned: success or a missed threshold
  type: list
  elements: str
  sample: ["ttft_ms.p95 812.4 ms > 500 ms"]
baseline_failures:
  description: One line per metric that regressed against O(baseline) by more than O(tolerance_pct).
  returned: success or a missed threshold
  type: list
  elements: str
  sample: ["e2e_ms.p99 2412.0 ms vs baseline 1990.3 ms (+21.2 %, tolerance 10 %)"]
table:
  description: The report as aligned text lines, for ansible.builtin.debug.
  returned: success or a missed threshold
  type: list
  elements: str
results:
  description: The measurements. Latencies in milliseconds; statistics are C(count), C(mean), C(min), C(p50),
    C(p95), C(p99), C(max) (null when C(count) is 0).
  returned: success or a missed threshold
  type: dict
  contains:
    requests:
      description: Requests sent in the measured run (completed, failed and unfinished).
      type: int
      sample: 50
    completed:
      description: Requests answered in full without error.
      type: int
      sample: 50
    errors:
      description: Requests that failed.
      type: int
      sample: 0
    error_rate:
      description: errors / (completed + errors).
      type: float
      sample: 0.0
    errors_by_kind:
      description: Failed requests per kind (C(connect), C(tls), C(timeout), C(http_<status>), C(stream_cut), ...).
      type: dict
      sample: {"http_500": 2}
    unfinished:
      description: Requests still in flight when O(duration_limit) ended the run.
      type: int
      sample: 0
    duration_s:
      description: Seconds from the start of the measured run to the end of its last request.
      type: float
      sample: 12.41
    requests_per_s:
      description: Completed requests per second.
      type: float
      sample: 4.03
    output_tokens:
      description: Output tokens of the completed requests (the server's C(usage.completion_tokens) when given).
      type: int
      sample: 3200
    output_tokens_per_s:
      description: Output tokens per second over the run.
      type: float
      sample: 257.9
    ttft_ms:
      description: Time to first token of streamed requests.
      type: dict
      sample: {"count": 50, "mean": 182.3, "min": 120.1, "p50": 170.2, "p95": 301.5, "p99": 330.2, "max": 341.0}
    itl_ms:
      description: Gaps between consecutive content events of streamed requests.
      type: dict
    tpot_ms:
      description: Time per output token after the first, per streamed request.
      type: dict
    e2e_ms:
      description: End-to-end latency of completed requests.
      type: dict
    schedule_lag_ms:
      description: With O(rate), how late requests started after their due time (all workers busy, or the client).
      type: dict
      returned: when O(rate) is set
    client:
      description: The client's own CPU use (C(cpu_s), C(cpu_percent) of one core, C(processes), C(cpus), C(python)).
      type: dict
      sample: {"cpu_s": 0.41, "cpu_percent": 3.3, "processes": 1, "cpus": 2, "python": "3.11.2"}
    settings:
      description: The settings used, with the resolved C(model) and normalised C(url); C(api_key) is only V(true)
        or V(false).
      type: dict
    thresholds:
      description: The thresholds checked, each with its operator.
      type: dict
      sample: {"ttft_ms.p95": "<=500", "output_tokens_per_s": ">=20"}
    baseline:
      description: The comparison with O(baseline) (C(rows) with metric, baseline, current, change_pct, verdict;
        C(failures); C(notes) on settings that differ).
      type: dict
      returned: when O(baseline) is set
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.llm_server.plugins.module_utils._loadbench import (
    ARGUMENT_SPEC,
    MUTUALLY_EXCLUSIVE,
    benchmark_from_params,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE,
                           supports_check_mode=True)
    # Read-only against the server, so it runs in check mode too; only the output file waits.
    outcome = benchmark_from_params(module.params, check_mode=module.check_mode)
    if outcome.get('failed'):
        module.fail_json(**outcome)
    module.exit_json(**outcome)


if __name__ == '__main__':
    main()
