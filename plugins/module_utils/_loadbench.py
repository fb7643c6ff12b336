# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-bench: load benchmark of an OpenAI-compatible chat completions endpoint.

    llm-bench --url URL [--model M] [--requests N] [--concurrency C] [--rate R]
        [--arrival poisson|constant] [--stream|--no-stream] [--prompt-tokens P]
        [--max-tokens T] [--api-key-file F] [--ca-file F] [--insecure] [--timeout S]
        [--duration-limit S] [--warmup K] [--processes K] [--seed S] [--ignore-eos]
        [--threshold KEY=VALUE ...] [--baseline FILE] [--tolerance-pct X]
        [--json OUT] [--quiet]

The entry points: the command line (main) and the llm_benchmark module's work
(benchmark_from_params, ARGUMENT_SPEC). Exit codes: 0 all good, 1 thresholds
or baseline missed (or no request completed), 2 usage or setup error.

Standard library only, in four files, one job each: this one, the load
generator (_loadbench_client: requests, HTTP client, schedule, processes),
the statistics and verdicts (_loadbench_stats: results, thresholds,
baseline) and the human report (_loadbench_report). They are the
module_utils of the llm_benchmark module and, carried by the host programs'
wheel as llm_server_host.collection (host/pyproject.toml), the command
llm-bench (host/llm_server_host/bench.py); so they import each other
relatively, which works in both packages.

The API key (--api-key-file, or the environment variable LLM_BENCH_API_KEY) is
sent as "Authorization: Bearer KEY" and never printed or written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from ._loadbench_client import API_KEY_ENV, DEFAULTS, run_benchmark
from ._loadbench_report import failure_summary, render_table
from ._loadbench_stats import DEFAULT_TOLERANCE_PCT, BenchError, evaluate, load_baseline, parse_thresholds


# ---------------------------------------------------------------- files

def write_json(path, data):
    """Write data as JSON to path through a temporary file in the same directory (mode 0644)."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, tmp = tempfile.mkstemp(prefix='.llm-bench-', suffix='.json', dir=directory)
    try:
        with os.fdopen(handle, 'w', encoding='utf-8') as out:
            json.dump(data, out, indent=2, sort_keys=True)
            out.write('\n')
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_api_key(path):
    """The API key from a file (first line, stripped); BenchError naming the file when unreadable."""
    try:
        with open(path, encoding='utf-8') as handle:
            key = handle.read().strip()
    except OSError as exc:
        raise BenchError('cannot read the API key file %s: %s' % (path, exc.strerror or exc)) from exc
    if not key:
        raise BenchError('the API key file %s is empty' % path)
    return key


# ---------------------------------------------------------------- command line

def _parser():
    parser = argparse.ArgumentParser(
        prog='llm-bench', description='Load benchmark of an OpenAI-compatible chat completions endpoint.',
        epilog='Exit codes: 0 all good, 1 thresholds or baseline missed (or no request completed), '
               '2 usage or setup error. The API key may also come from the environment variable %s.'
               % API_KEY_ENV)
    add = parser.add_argument
    add('--url', required=True, help='base URL, with or without /v1 (http://127.0.0.1:8000/v1)')
    add('--model', help='model name (default: the first of GET /v1/models)')
    add('--requests', type=int, default=DEFAULTS['requests'], help='requests to send (default %(default)s)')
    add('--concurrency', type=int, default=DEFAULTS['concurrency'],
        help='workers, each on its own connection; with --rate the most in flight (default %(default)s)')
    add('--rate', type=float, help='open loop: requests per second (default: closed loop)')
    add('--arrival', choices=('poisson', 'constant'), default=DEFAULTS['arrival'],
        help='arrivals with --rate (default %(default)s)')
    add('--stream', dest='stream', action='store_true', default=True, help='stream the answers (default)')
    add('--no-stream', dest='stream', action='store_false', help='whole answers; no TTFT or ITL')
    add('--prompt-tokens', type=int, default=DEFAULTS['prompt_tokens'],
        help='prompt length in words, about one token each (default %(default)s)')
    add('--max-tokens', type=int, default=DEFAULTS['max_tokens'], help='max_tokens (default %(default)s)')
    add('--ignore-eos', action='store_true', help='send "ignore_eos": true (vLLM, llama.cpp): max_tokens every time')
    add('--api-key-file', help='file holding the API key (Authorization: Bearer)')
    add('--ca-file', help='CA bundle to verify the server certificate with')
    add('--insecure', action='store_true', help='do not verify the server certificate')
    add('--timeout', type=float, default=DEFAULTS['timeout_s'], dest='timeout_s',
        help='seconds one request may take (default %(default)s)')
    add('--duration-limit', type=float, default=DEFAULTS['duration_limit_s'], dest='duration_limit_s',
        help='seconds the measured run may take; in-flight requests are then abandoned (default %(default)s)')
    add('--warmup', type=int, default=DEFAULTS['warmup'], help='requests sent first and not measured')
    add('--processes', type=int, default=DEFAULTS['processes'],
        help='client processes sharing the load, for more than one core can send (default %(default)s)')
    add('--seed', type=int, default=DEFAULTS['seed'], help='seed of the prompts and arrivals')
    add('--threshold', action='append', default=[], metavar='KEY=VALUE',
        help='e.g. ttft_ms.p95=500, e2e_ms.p99<=2000, error_rate=0, output_tokens_per_s>=50; repeat')
    add('--baseline', help='a previous --json result to compare with')
    add('--tolerance-pct', type=float, default=DEFAULT_TOLERANCE_PCT,
        help='regression tolerance against the baseline, in per cent (default %(default)s)')
    add('--json', dest='json_out', metavar='OUT', help='write the results as JSON (- for stdout)')
    add('--quiet', action='store_true', help='print only what failed')
    return parser


SETTING_KEYS = ('model', 'requests', 'concurrency', 'rate', 'arrival', 'stream', 'prompt_tokens', 'max_tokens',
                'timeout_s', 'duration_limit_s', 'warmup', 'processes', 'seed', 'ignore_eos', 'ca_file', 'insecure')


def main(argv=None):
    args = _parser().parse_args(argv)
    report = sys.stderr if args.json_out == '-' else sys.stdout
    try:
        api_key = read_api_key(args.api_key_file) if args.api_key_file else os.environ.get(API_KEY_ENV) or None
        thresholds = list(args.threshold)
        parse_thresholds(thresholds)
        baseline = load_baseline(args.baseline) if args.baseline else None
        settings = dict((key, getattr(args, key)) for key in SETTING_KEYS)
        results = run_benchmark(args.url, settings, api_key)
        evaluate(results, thresholds, baseline, args.tolerance_pct)
    except BenchError as exc:
        sys.stderr.write('llm-bench: %s\n' % exc)
        return 2
    except KeyboardInterrupt:
        sys.stderr.write('llm-bench: interrupted\n')
        return 130
    failures = results['threshold_failures'] + (results.get('baseline') or {}).get('failures', [])
    if not args.quiet:
        comparison = None
        if baseline is not None:
            comparison = (results['baseline']['rows'], results['baseline']['failures'], results['baseline']['notes'])
        report.write('\n'.join(render_table(results, results['threshold_failures'] if thresholds else None,
                                            comparison)) + '\n')
    if args.json_out == '-':
        sys.stdout.write(json.dumps(results, indent=2, sort_keys=True) + '\n')
    elif args.json_out:
        try:
            write_json(args.json_out, results)
        except OSError as exc:
            sys.stderr.write('llm-bench: cannot write %s: %s\n' % (args.json_out, exc))
            return 2
    if failures:
        sys.stderr.write('llm-bench: FAILED: %s (%s)\n' % ('; '.join(failures), failure_summary(results)))
        return 1
    return 0


# ---------------------------------------------------------------- Ansible module

ARGUMENT_SPEC = {
    'url': {'type': 'str', 'required': True},
    'model': {'type': 'str'},
    'requests': {'type': 'int', 'default': DEFAULTS['requests']},
    'concurrency': {'type': 'int', 'default': DEFAULTS['concurrency']},
    'rate': {'type': 'float'},
    'arrival': {'type': 'str', 'default': DEFAULTS['arrival'], 'choices': ['poisson', 'constant']},
    'stream': {'type': 'bool', 'default': DEFAULTS['stream']},
    'prompt_tokens': {'type': 'int', 'default': DEFAULTS['prompt_tokens'], 'no_log': False},
    'max_tokens': {'type': 'int', 'default': DEFAULTS['max_tokens'], 'no_log': False},
    'ignore_eos': {'type': 'bool', 'default': False},
    'api_key': {'type': 'str', 'no_log': True},
    'api_key_file': {'type': 'path'},
    'ca_file': {'type': 'path'},
    'validate_certs': {'type': 'bool', 'default': True},
    'timeout': {'type': 'float', 'default': DEFAULTS['timeout_s']},
    'duration_limit': {'type': 'float', 'default': DEFAULTS['duration_limit_s']},
    'warmup': {'type': 'int', 'default': DEFAULTS['warmup']},
    'processes': {'type': 'int', 'default': DEFAULTS['processes']},
    'seed': {'type': 'int', 'default': DEFAULTS['seed']},
    'thresholds': {'type': 'dict', 'default': {}},
    'baseline': {'type': 'path'},
    'tolerance_pct': {'type': 'float', 'default': DEFAULT_TOLERANCE_PCT},
    'output': {'type': 'path'},
    'fail_on_threshold': {'type': 'bool', 'default': True},
}
MUTUALLY_EXCLUSIVE = [('api_key', 'api_key_file')]


def benchmark_from_params(params, check_mode=False):
    """The module's work: run, evaluate, write the output file; a dict for exit_json (failed + msg on failure)."""
    try:
        api_key = params.get('api_key') or (read_api_key(params['api_key_file'])
                                            if params.get('api_key_file') else None)
        thresholds = params.get('thresholds') or {}
        parse_thresholds(thresholds)
        baseline = load_baseline(params['baseline']) if params.get('baseline') else None
        settings = {'model': params.get('model'), 'requests': params['requests'],
                    'concurrency': params['concurrency'], 'rate': params.get('rate'), 'arrival': params['arrival'],
                    'stream': params['stream'], 'prompt_tokens': params['prompt_tokens'],
                    'max_tokens': params['max_tokens'], 'ignore_eos': params['ignore_eos'],
                    'timeout_s': params['timeout'], 'duration_limit_s': params['duration_limit'],
                    'warmup': params['warmup'], 'processes': params['processes'], 'seed': params['seed'],
                    'ca_file': params.get('ca_file'), 'insecure': not params['validate_certs']}
        results = run_benchmark(params['url'], settings, api_key)
        evaluate(results, thresholds, baseline, params['tolerance_pct'])
    except BenchError as exc:
        return {'failed': True, 'changed': False, 'msg': str(exc)}
    baseline_info = results.get('baseline')
    comparison = None
    if baseline_info is not None:
        comparison = (baseline_info['rows'], baseline_info['failures'], baseline_info['notes'])
    outcome = {'changed': False, 'results': results, 'threshold_failures': results['threshold_failures'],
               'baseline_failures': baseline_info['failures'] if baseline_info else [],
               'passed': results['passed'],
               'table': render_table(results, results['threshold_failures'] if thresholds else None, comparison)}
    if params.get('output') and not check_mode:
        try:
            write_json(params['output'], results)
        except OSError as exc:
            return dict(outcome, failed=True, msg='cannot write the results to %s: %s' % (params['output'], exc))
    if not results['passed'] and params['fail_on_threshold']:
        parts = []
        if outcome['threshold_failures']:
            parts.append('Benchmark missed its thresholds: ' + '; '.join(outcome['threshold_failures']))
        if outcome['baseline_failures']:
            parts.append('Benchmark regressed against the baseline: ' + '; '.join(outcome['baseline_failures']))
        outcome.update(failed=True, msg='%s (%s)' % ('. '.join(parts), failure_summary(results)))
    return outcome


if __name__ == '__main__':
    sys.exit(main())  # pylint: disable=ansible-bad-function
