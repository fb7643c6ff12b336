# Copyright: homelab.llm_server contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-gpu-exporter: NVIDIA GPU metrics for Prometheus, read through NVML.

usage: llm-gpu-exporter [--listen-address ADDR] [--port PORT] [--timeout S]
                                   [--quarantine S] [--event-wait-ms MS]
                                   [--preinitialised-xids 13,31,...] [--once]

Serves /metrics (prometheus_client) on ADDR:PORT (default 127.0.0.1:9835).
Every value gpu_facts also reports comes from the same code
(the collection's module_utils/_nvml.py, which the wheel carries as
llm_server_host.collection._nvml): NVML is read in nvml_worker.py, within
nvml_supervisor.py's deadline, and gpu_families.py makes the metric families.

NVML is called only in a worker process (this module run with --worker): a
scrape that NVML does not answer within --timeout seconds is answered with
what was read and llm_gpu_exporter_scrape_success 0, the stuck worker is
killed and replaced, and the GPU it hung on is left alone for --quarantine
seconds so that the others are still read (see nvml_supervisor.py). --once prints one scrape in
the exposition format and exits (0 when the scrape succeeded, 1 when not).

Needs nvidia-ml-py (module pynvml) and prometheus-client.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from llm_server_host import gpu_families as _gpu_families
from llm_server_host import log as _log
from llm_server_host import nvml_supervisor as _nvml_supervisor
from llm_server_host import nvml_worker as _nvml_worker
from llm_server_host import systemd as _systemd

DEFAULT_LISTEN_ADDRESS = '127.0.0.1'
# The port of nvidia_gpu_exporter (utkuozdemir), the GPU exporter people run
# on a box like this one: dashboards and firewall notes written for a GPU
# exporter find this one there, and the two never run side by side.
DEFAULT_PORT = 9835
LOG = logging.getLogger('llm-gpu-exporter')


def number_list(text):
    try:
        return tuple(int(part) for part in text.split(',') if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError('a comma-separated list of numbers, not %r' % text)


def positive(text):
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError('must be greater than 0, not %r' % text)
    return value


def parse_args(argv):
    parser = argparse.ArgumentParser(description='NVIDIA GPU metrics for Prometheus, read through NVML.')
    parser.add_argument('--listen-address', default=DEFAULT_LISTEN_ADDRESS,
                        help='address to listen on (default %(default)s: loopback only)')
    parser.add_argument('--port', type=int, default=DEFAULT_PORT,
                        help='TCP port (default %(default)s, the port GPU exporters use)')
    parser.add_argument('--timeout', type=positive, default=_nvml_supervisor.DEFAULT_TIMEOUT_S,
                        help='seconds a scrape may wait for NVML (default %(default)s)')
    parser.add_argument('--quarantine', type=positive, default=_nvml_supervisor.DEFAULT_QUARANTINE_S,
                        help='seconds a GPU on which NVML hung is left alone (default %(default)s)')
    parser.add_argument('--startup-limit', type=positive, default=_nvml_supervisor.STARTUP_LIMIT_S,
                        help='seconds a worker may take to start, and a probe of a GPU left alone to read it '
                             '(nvmlInit is slow without persistence mode; default %(default)s)')
    parser.add_argument('--event-wait-ms', type=int, default=_nvml_worker.DEFAULT_EVENT_WAIT_MS,
                        help='timeout of each nvmlEventSetWait in the XID watcher (default %(default)s)')
    parser.add_argument('--preinitialised-xids', type=number_list,
                        default=_nvml_supervisor.PREINITIALISED_XIDS,
                        help='XIDs whose counters start at 0 on every GPU with XID events')
    parser.add_argument('--once', action='store_true', help='print one scrape and exit')
    parser.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--skip-gpus', type=number_list, default=(), help=argparse.SUPPRESS)
    parser.add_argument('--probe-gpu', type=int, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


class GpuCollector(object):
    """prometheus_client collector: one bounded NVML scrape per collect()."""

    def __init__(self, supervisor):
        self.supervisor = supervisor
        self.last_snapshot = None
        self._last_error = None

    def describe(self):
        return []  # no scrape when the collector is registered

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        snapshot = self.supervisor.scrape()
        self.last_snapshot = snapshot
        error = snapshot.get('error')
        if error != self._last_error:  # once per change, not every scrape
            if error:
                LOG.warning('scrape: %s', error)
            else:
                LOG.info('scrape: all GPUs read again')
            self._last_error = error
        for family in _gpu_families.build_families(snapshot):
            if family.kind == 'counter':
                metric = CounterMetricFamily(family.name[:-len('_total')] if family.name.endswith('_total')
                                             else family.name, family.help, labels=family.labels)
            else:
                metric = GaugeMetricFamily(family.name, family.help, labels=family.labels)
            for label_values, value in family.samples:
                metric.add_metric(label_values, value)
            yield metric


def worker_command():
    return [sys.executable, '-m', __spec__.name, '--worker']


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.worker:
        rc = _nvml_worker.worker_main(event_wait_ms=args.event_wait_ms, skip=args.skip_gpus, probe=args.probe_gpu)
        sys.stdout.flush()
        os._exit(rc)  # the XID watcher may sit in nvmlEventSetWait
    _log.setup(LOG.name)
    try:
        from prometheus_client import CollectorRegistry, generate_latest, start_http_server
    except ImportError:
        LOG.error('the Python library prometheus-client is not installed')
        return 2
    command = worker_command() + ['--event-wait-ms', str(args.event_wait_ms)]
    supervisor = _nvml_supervisor.Supervisor(command, timeout=args.timeout, quarantine=args.quarantine,
                                             startup_limit=args.startup_limit,
                                             preinitialised_xids=args.preinitialised_xids, log=LOG.warning)
    collector = GpuCollector(supervisor)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    supervisor.start()
    if args.once:
        try:
            sys.stdout.write(generate_latest(registry).decode('utf-8'))
        finally:
            supervisor.close()
        return 0 if collector.last_snapshot and collector.last_snapshot['success'] else 1

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        server, _thread = start_http_server(args.port, addr=args.listen_address, registry=registry)
    except OSError as err:
        LOG.error('cannot listen on %s:%d: %s', args.listen_address, args.port, err)
        supervisor.close()
        return 2
    LOG.info('listening on %s:%d, NVML deadline %.3g s', args.listen_address, args.port, args.timeout)
    _systemd.notify('READY=1', 'STATUS=listening on %s:%d' % (args.listen_address, args.port))
    while not stop.wait(3600):
        pass
    _systemd.notify('STOPPING=1')
    server.shutdown()
    supervisor.close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
