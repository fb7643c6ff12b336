# Copyright: homelab.llm_server contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-proxy-metrics: the front door's request metrics for Prometheus, from nginx's JSON access log.

usage: llm-proxy-metrics [--log PATH] [--listen-address ADDR] [--port PORT]
                         [--poll-interval S]

Follows PATH (the nginx role's nginx_access_log, format llm_access: one JSON
object per request) as `tail -F` does and serves /metrics (prometheus_client)
on ADDR:PORT (default 127.0.0.1:9836):

  llm_proxy_requests_total{status, upstream_group}        counter
  llm_proxy_request_duration_seconds{upstream_group}      histogram (request_time)
  llm_proxy_upstream_header_seconds{upstream_group}       histogram (upstream_header_time)
  llm_proxy_response_bytes_total{upstream_group}          counter (bytes_sent)
  llm_proxy_log_lines_total                               counter, every complete line read
  llm_proxy_log_lines_invalid_total                       counter, lines that are no llm_access entry
  llm_proxy_log_last_line_timestamp_seconds               gauge, msec of the last entry (absent before one)
  llm_proxy_log_readable                                  gauge, 0 while PATH is missing or unreadable

Labels are bounded: `status` is the three digits nginx answered (100 to 999),
else "other"; `upstream_group` is the upstream nginx proxied to ($llm_upstream,
or llm_health for /healthz), "" for a request nginx answered itself (no
upstream address: 401, 403, 429, its own 404), "other" for a name that is no
nginx upstream name or past the first 64 groups. Never the key, the client
address, the URI or the model. When a group is first seen its 5xx series
(502, 503, 504) start at 0, so that rate() and increase() see the first
failure of each.

The log is read from where it ends when the exporter starts: history is not
counted, so every counter starts at 0 on a (re)start, which Prometheus'
rate() and increase() take as a counter reset. A file that appears later (it
was missing at the start, or logrotate made a new one) is read from its
beginning. Rotation by rename (logrotate's create) is seen as a new inode at
PATH: the old file is read to its end for a while longer, since nginx writes
there until it reopens its logs; copytruncate is seen as the file shrinking
below the position read, and the file is read again from its beginning. A
line is counted only once its newline is written; a line that is no JSON
object with a status is counted as invalid, never an error. (A truncated
file that grows past the position read within one poll interval looks
unchanged: what it holds up to that position is not counted.)

The file is read in a thread every --poll-interval seconds (0.5), all that
was written since at once; a scrape reads counters kept in memory (under a
lock held only to merge or copy them) and never waits for the file.

Needs prometheus-client.
"""

from __future__ import annotations

import argparse
import bisect
import json
import logging
import os
import re
import signal
import sys
import threading
import time

from llm_server_host import log as _log
from llm_server_host import systemd as _systemd

LOG = logging.getLogger('llm-proxy-metrics')

DEFAULT_LOG = '/var/log/nginx/llm-access.log'
DEFAULT_LISTEN_ADDRESS = '127.0.0.1'
DEFAULT_PORT = 9836
DEFAULT_POLL_INTERVAL_S = 0.5

# Seconds for an LLM request: a cached short answer to a five-minute stream
# (nginx_read_timeout_s is 300 by default).
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
# Series that start at 0 for every new upstream group (the alerts' 5xx).
SEEDED_STATUSES = ('502', '503', '504')
MAX_GROUPS = 64
GROUP_PATTERN = re.compile(r'^[A-Za-z0-9_.-]{1,128}$')
# /healthz is proxied to the upstream llm_health, whatever $llm_upstream says.
HEALTH_URI = '/healthz'
HEALTH_GROUP = 'llm_health'
OTHER = 'other'
# Reads per poll, and the longest line kept waiting for its newline.
CHUNK = 1 << 20
MAX_LINE = 1 << 20
# Seconds a file renamed away is still read: nginx writes to it until
# logrotate's postrotate makes it reopen its logs.
ROTATED_GRACE_S = 10.0
INVALID_WARNING_INTERVAL_S = 60.0


def number(value):
    """A JSON number or numeric string as a float >= 0, else None (bools, '-', '', NaN)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        result = float(value)
    elif isinstance(value, str):
        try:
            result = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return result if 0 <= result < float('inf') else None


def last_try(value):
    """The last of nginx's upstream values: "a, b" (next upstream) or "a : b" (internal redirect)."""
    if not isinstance(value, str):
        return number(value)
    return number(re.split(r'[,:]', value)[-1])


def status_label(value):
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 999:
        return str(value)
    if isinstance(value, str) and len(value) == 3 and value.isdigit() and value[0] != '0':
        return value
    return OTHER


class Batch(object):
    """What one read of the file adds, gathered without the lock and merged under it."""

    __slots__ = ('lines', 'invalid', 'last_timestamp', 'requests', 'bytes', 'duration', 'header')

    def __init__(self):
        self.lines = 0
        self.invalid = 0
        self.last_timestamp = None
        self.requests = {}  # (status, raw group) -> count
        self.bytes = {}  # raw group -> bytes
        self.duration = {}  # raw group -> [bucket counts..., count, sum]
        self.header = {}

    def add_line(self, line):
        self.lines += 1
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            self.invalid += 1
            return False
        if not isinstance(entry, dict) or 'status' not in entry:
            self.invalid += 1
            return False
        status = status_label(entry['status'])
        upstream_addr = entry.get('upstream_addr')
        if not isinstance(upstream_addr, str) or upstream_addr in ('', '-'):
            group = ''  # nginx answered itself
        elif entry.get('uri') == HEALTH_URI:
            group = HEALTH_GROUP
        else:
            group = entry.get('upstream_group')
            group = group if isinstance(group, str) and GROUP_PATTERN.match(group) else OTHER
        key = (status, group)
        self.requests[key] = self.requests.get(key, 0) + 1
        sent = number(entry.get('bytes_sent'))
        if sent is not None:
            self.bytes[group] = self.bytes.get(group, 0) + sent
        observe(self.duration, group, number(entry.get('request_time')))
        observe(self.header, group, last_try(entry.get('upstream_header_time')))
        timestamp = number(entry.get('msec'))
        if timestamp is not None:
            self.last_timestamp = timestamp
        return True


def observe(histograms, group, value):
    if value is None:
        return
    counts = histograms.get(group)
    if counts is None:
        counts = histograms[group] = [0] * (len(BUCKETS) + 1) + [0.0]
    counts[bisect.bisect_left(BUCKETS, value)] += 1  # le: value <= bound
    counts[-1] += value


class Metrics(object):
    """The counters, updated by the reader a batch at a time and read by scrapes, under one short lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.lines = 0
        self.invalid = 0
        self.last_timestamp = None
        self.readable = 0
        self.groups = {}  # the upstream groups that have series of their own
        self.requests = {}  # (status, group label) -> count
        self.bytes = {}
        self.duration = {}
        self.header = {}

    def _group(self, raw):
        if raw in ('', OTHER) or raw in self.groups:
            return raw
        if len(self.groups) >= MAX_GROUPS:
            return OTHER
        self.groups[raw] = True
        for status in SEEDED_STATUSES:
            self.requests.setdefault((status, raw), 0)
        return raw

    def merge(self, batch):
        with self.lock:
            self.lines += batch.lines
            self.invalid += batch.invalid
            if batch.last_timestamp is not None:
                self.last_timestamp = batch.last_timestamp
            for (status, raw), count in batch.requests.items():
                key = (status, self._group(raw))
                self.requests[key] = self.requests.get(key, 0) + count
            for raw, sent in batch.bytes.items():
                group = self._group(raw)
                self.bytes[group] = self.bytes.get(group, 0) + sent
            for mine, theirs in ((self.duration, batch.duration), (self.header, batch.header)):
                for raw, counts in theirs.items():
                    group = self._group(raw)
                    total = mine.get(group)
                    if total is None:
                        mine[group] = list(counts)
                    else:
                        for index, value in enumerate(counts):
                            total[index] += value

    def set_readable(self, readable):
        with self.lock:
            self.readable = 1 if readable else 0

    def snapshot(self):
        with self.lock:
            return {
                'lines': self.lines, 'invalid': self.invalid, 'last_timestamp': self.last_timestamp,
                'readable': self.readable, 'requests': dict(self.requests), 'bytes': dict(self.bytes),
                'duration': {group: list(counts) for group, counts in self.duration.items()},
                'header': {group: list(counts) for group, counts in self.header.items()},
            }


class _Reader(object):
    """One open file: its descriptor, the position read and the unfinished line."""

    def __init__(self, fd, ident, offset, skip_first_line=False):
        self.fd = fd
        self.ident = ident
        self.offset = offset
        self.pending = b''
        self.skipping = skip_first_line  # drop everything up to the next newline
        self.retired_at = None

    def close(self):
        try:
            os.close(self.fd)
        except OSError:
            pass


class LogFollower(object):
    """Reads the lines appended to a path, across rotations (tail -F), into Metrics."""

    def __init__(self, path, metrics, from_end=True):
        self.path = path
        self.metrics = metrics
        self.current = None
        self.retired = []
        self._from_end = from_end  # only for the file found at the start
        self._last_problem = None
        self._last_invalid_warning = 0.0
        self._invalid_seen = 0

    def _problem(self, message):
        if message != self._last_problem:  # once per change, not every poll
            if message:
                LOG.warning('%s', message)
            elif self._last_problem is not None:
                LOG.info('reading %s again', self.path)
            self._last_problem = message
        self.metrics.set_readable(not message)

    def _open(self):
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError as err:
            self._problem('cannot open %s: %s' % (self.path, err.strerror or err))
            return None
        try:
            stat = os.fstat(fd)
            skip = False
            if self._from_end:
                offset = stat.st_size
                # Started in the middle of a line being written: that line is not ours.
                skip = offset > 0 and os.pread(fd, 1, offset - 1) != b'\n'
            else:
                offset = 0
            # A read of a directory fails here, not at open.
            os.pread(fd, 0, offset)
        except OSError as err:
            os.close(fd)
            self._problem('cannot read %s: %s' % (self.path, err.strerror or err))
            return None
        self._from_end = False
        return _Reader(fd, (stat.st_dev, stat.st_ino), offset, skip)

    def _retire(self, now):
        LOG.info('%s was rotated: reading the new file from its beginning', self.path)
        self.current.retired_at = now
        self.retired.append(self.current)
        self.current = None

    def poll(self):
        """Read what was appended since the last poll; returns the number of lines read."""
        now = time.monotonic()
        lines = 0
        for reader in list(self.retired):
            lines += self._read(reader)
            if now - reader.retired_at > ROTATED_GRACE_S:
                reader.close()
                self.retired.remove(reader)
        try:
            stat = os.stat(self.path)
        except OSError as err:
            self._from_end = False  # what appears later is new
            if self.current is not None:
                lines += self._read(self.current)
                self._retire(now)
            self._problem('cannot read %s: %s' % (self.path, err.strerror or err))
            return lines
        if self.current is not None and (stat.st_dev, stat.st_ino) != self.current.ident:
            lines += self._read(self.current)  # what nginx wrote before the rename
            self._retire(now)
        if self.current is None:
            self.current = self._open()
            if self.current is None:
                return lines
        try:
            size = os.fstat(self.current.fd).st_size
        except OSError as err:
            self._problem('cannot read %s: %s' % (self.path, err.strerror or err))
            return lines
        if size < self.current.offset:
            LOG.info('%s was truncated (copytruncate): reading it from its beginning', self.path)
            self.current.offset = 0
            self.current.pending = b''
            self.current.skipping = False
        lines += self._read(self.current)
        self._problem(None)
        return lines

    def _read(self, reader):
        lines = 0
        while True:
            try:
                data = os.pread(reader.fd, CHUNK, reader.offset)
            except OSError as err:
                LOG.warning('reading %s: %s', self.path, err.strerror or err)
                return lines
            if not data:
                return lines
            reader.offset += len(data)
            lines += self._feed(reader, data)

    def _feed(self, reader, data):
        batch = Batch()
        start = 0
        if reader.skipping:
            newline = data.find(b'\n')
            if newline < 0:
                return 0
            reader.skipping = False
            start = newline + 1
        end = data.rfind(b'\n')
        if end < start:  # no complete line in this read
            reader.pending += data[start:]
        else:
            head = reader.pending + data[start:end]
            reader.pending = data[end + 1:]
            for line in head.split(b'\n'):
                batch.add_line(line)
        if len(reader.pending) > MAX_LINE:
            # No nginx line is this long: count it once and drop it up to its newline.
            batch.lines += 1
            batch.invalid += 1
            reader.pending = b''
            reader.skipping = True
        self.metrics.merge(batch)
        self._warn_invalid(batch.invalid)
        return batch.lines

    def _warn_invalid(self, count):
        self._invalid_seen += count
        now = time.monotonic()
        if self._invalid_seen and now - self._last_invalid_warning >= INVALID_WARNING_INTERVAL_S:
            LOG.warning('%d lines of %s were no llm_access entry (llm_proxy_log_lines_invalid_total)',
                        self._invalid_seen, self.path)
            self._invalid_seen = 0
            self._last_invalid_warning = now

    def run(self, stop, interval):
        while not stop.wait(interval):
            try:
                self.poll()
            except Exception:  # pylint: disable=broad-exception-caught  # the thread must go on
                LOG.exception('reading %s', self.path)

    def close(self):
        for reader in self.retired + ([self.current] if self.current else []):
            reader.close()
        self.retired = []
        self.current = None


class ProxyCollector(object):
    """prometheus_client collector: the counters as they are now."""

    def __init__(self, metrics):
        self.metrics = metrics

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
        from prometheus_client.utils import floatToGoString
        snap = self.metrics.snapshot()
        bounds = [floatToGoString(bound) for bound in BUCKETS] + ['+Inf']
        requests = CounterMetricFamily(
            'llm_proxy_requests', 'Requests nginx answered, by HTTP status and upstream group '
            '("" when nginx answered itself), counted from the access log since the exporter started.',
            labels=['status', 'upstream_group'])
        for (status, group), count in sorted(snap['requests'].items()):
            requests.add_metric([status, group], count)
        yield requests
        for name, key, text in (
                ('llm_proxy_request_duration_seconds', 'duration',
                 'Seconds from the first byte of the request to the last byte of the answer (request_time).'),
                ('llm_proxy_upstream_header_seconds', 'header',
                 "Seconds until the engine's first byte (upstream_header_time, its last try).")):
            family = HistogramMetricFamily(name, text, labels=['upstream_group'])
            for group, counts in sorted(snap[key].items()):
                cumulative, buckets = 0, []
                for bound, count in zip(bounds, counts[:-1]):
                    cumulative += count
                    buckets.append((bound, cumulative))
                family.add_metric([group], buckets, counts[-1])
            yield family
        sent = CounterMetricFamily('llm_proxy_response_bytes', 'Bytes sent to clients (bytes_sent).',
                                   labels=['upstream_group'])
        for group, count in sorted(snap['bytes'].items()):
            sent.add_metric([group], count)
        yield sent
        yield CounterMetricFamily('llm_proxy_log_lines', 'Complete lines read from the access log.',
                                  value=snap['lines'])
        yield CounterMetricFamily('llm_proxy_log_lines_invalid',
                                  'Lines of the access log that are no JSON object with a status.',
                                  value=snap['invalid'])
        if snap['last_timestamp'] is not None:
            yield GaugeMetricFamily('llm_proxy_log_last_line_timestamp_seconds',
                                    'Time of the last request read (msec), seconds since the epoch.',
                                    value=snap['last_timestamp'])
        yield GaugeMetricFamily('llm_proxy_log_readable', '1 while the access log can be read, 0 otherwise.',
                                value=snap['readable'])


def positive(text):
    value = float(text)
    if not 0 < value <= 60:
        raise argparse.ArgumentTypeError('must be more than 0 and at most 60, not %r' % text)
    return value


def parse_args(argv):
    parser = argparse.ArgumentParser(description="The front door's request metrics, from nginx's JSON access log.")
    parser.add_argument('--log', default=DEFAULT_LOG, help='the access log (format llm_access; default %(default)s)')
    parser.add_argument('--listen-address', default=DEFAULT_LISTEN_ADDRESS,
                        help='address to listen on (default %(default)s: loopback only)')
    parser.add_argument('--port', type=int, default=DEFAULT_PORT, help='TCP port (default %(default)s)')
    parser.add_argument('--poll-interval', type=positive, default=DEFAULT_POLL_INTERVAL_S,
                        help='seconds between two reads of the log (default %(default)s)')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    _log.setup(LOG.name)
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        LOG.error('the Python library prometheus-client is not installed')
        return 2
    # A scrape while the reader parses a backlog waits for the GIL: handed
    # over every 1 ms instead of 5, such a scrape takes about 10 ms instead
    # of 30, at no cost to the parse rate (benchmarks/proxy_metrics.py).
    sys.setswitchinterval(0.001)
    # SIGTERM and SIGINT wait for sigwait() below, in every thread (threads
    # inherit the mask): no handler runs in the middle of the main thread,
    # and one that comes during the start is taken once it is done.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    metrics = Metrics()
    follower = LogFollower(args.log, metrics)
    # Where the log ends now is known before the first scrape can come.
    follower.poll()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProxyCollector(metrics))
    try:
        server, _thread = start_http_server(args.port, addr=args.listen_address, registry=registry)
    except OSError as err:
        LOG.error('cannot listen on %s:%d: %s', args.listen_address, args.port, err)
        follower.close()
        return 2
    stop = threading.Event()
    reader = threading.Thread(target=follower.run, args=(stop, args.poll_interval), name='reader', daemon=True)
    reader.start()
    LOG.info('listening on %s:%d, following %s', args.listen_address, args.port, args.log)
    _systemd.notify('READY=1', 'STATUS=listening on %s:%d' % (args.listen_address, args.port))
    signal.sigwait(stop_signals)
    _systemd.notify('STOPPING=1')
    stop.set()
    server.shutdown()
    reader.join(timeout=5)
    follower.close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
