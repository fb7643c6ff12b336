# Copyright: homelab.llm_server contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-gpu-watchdog: acts on GPU heat and XID errors through NVML and systemd.

usage: llm-gpu-watchdog [--config FILE] run          the daemon (a systemd service)
       llm-gpu-watchdog [--config FILE] once         one round, then exit (0 when NVML answered)
       llm-gpu-watchdog [--config FILE] check        check the configuration and exit
       llm-gpu-watchdog [--config FILE] status       print the heat steps, held engines, GPUs to look at
       llm-gpu-watchdog [--config FILE] release [GPU]
                                                        a person fixed GPU (or all): the running
                                                        daemon restores its limits and starts what
                                                        it holds stopped on it

The configuration is the JSON the gpu_watchdog role writes (default
/etc/llm-server/watchdog.json; keys in _watchdog_daemon.DEFAULTS). The
decisions live in the collection's module_utils/_watchdog.py (the wheel
carries it as llm_server_host.collection._watchdog), the loop in
watchdog_daemon.py; NVML is read by the GPU exporter's worker
(nvml_worker.py, under nvml_supervisor.py's deadline) in a child process,
and each NVML setting is made by a child process of its own (this module
with --set), so a GPU that hangs NVML cannot hang the watchdog.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time

from llm_server_host import log as _log
from llm_server_host import nvml_supervisor as _nvml_supervisor
from llm_server_host import nvml_worker as _nvml_worker
from llm_server_host import systemd as _systemd
from llm_server_host import watchdog_daemon as _watchdog_daemon
from llm_server_host.files import read_settings

DEFAULT_CONFIG = '/etc/llm-server/watchdog.json'
LOG = logging.getLogger('llm-gpu-watchdog')


def log(message):
    """What the watchdog does and sees: the journal keeps it (warnings have their own level)."""
    LOG.info(message)


def this_program():
    return [sys.executable, '-m', __spec__.name]


def internal(argv):
    """The child processes: --worker (NVML reads and XID events), --set (one NVML setting)."""
    parser = argparse.ArgumentParser(prog='llm-gpu-watchdog (internal)')
    parser.add_argument('--worker', action='store_true')
    parser.add_argument('--skip-gpus', default='')
    parser.add_argument('--probe-gpu', type=int, default=None)
    parser.add_argument('--event-wait-ms', type=int, default=_nvml_worker.DEFAULT_EVENT_WAIT_MS)
    parser.add_argument('--set', choices=_watchdog_daemon.SET_KINDS)
    parser.add_argument('--gpu', type=int)
    parser.add_argument('--uuid')
    parser.add_argument('--value', type=float)
    args = parser.parse_args(argv)
    if args.worker:
        skip = tuple(int(part) for part in args.skip_gpus.split(',') if part.strip())
        rc = _nvml_worker.worker_main(event_wait_ms=args.event_wait_ms, skip=skip, probe=args.probe_gpu)
        sys.stdout.flush()
        os._exit(rc)  # the XID watcher may sit in nvmlEventSetWait
    return _watchdog_daemon.set_main(_nvml_worker.pynvml, args.set, args.gpu, args.uuid, args.value)


def read_config(path):
    return _watchdog_daemon.load_config(read_settings(path, _watchdog_daemon.ConfigError))


def make_watchdog(config):
    supervisor = _nvml_supervisor.Supervisor(this_program() + ['--worker'], timeout=config['nvml_timeout_s'],
                                             quarantine=config['quarantine_s'], log=log)
    actuator = _watchdog_daemon.Actuator(config, this_program())
    return supervisor, _watchdog_daemon.Watchdog(config, supervisor, actuator, log)


def run(config, once=False):
    supervisor, watchdog = make_watchdog(config)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    log('watching %s; %s%s' % (
        'GPU heat and XIDs every %g s' % config['interval_s'],
        'DRY RUN: nothing is changed; ' if config['dry_run'] else '',
        'reboots allowed (%d a day)' % config['reboots_per_day'] if config['allow_reboot'] else 'no reboots'))
    try:
        watchdog.forget_metrics()
    except OSError as err:
        LOG.warning('old metrics not removed: %s', err)
    supervisor.start()
    # Every round pings systemd's watchdog (WatchdogSec= in the unit): a
    # round that never ends gets the daemon restarted.
    _systemd.notify('READY=1', 'STATUS=watching')
    last_error = ''
    rounds = 0
    try:
        while True:
            started = time.monotonic()
            snapshot = watchdog.tick()
            rounds += 1
            error = snapshot.get('error') or ''
            if error != last_error:  # once per change, not every round
                if error:
                    LOG.warning('NVML: %s', error)
                else:
                    log('NVML: every GPU read again')
                last_error = error
            try:
                watchdog.write_metrics()
            except OSError as err:
                LOG.error('metrics not written: %s', err)
            _systemd.notify('WATCHDOG=1', 'STATUS=round %d%s' % (rounds, ', NVML: %s' % error if error else ''))
            if once:
                return 0 if snapshot.get('success') else 1
            if stop.wait(max(0.0, config['interval_s'] - (time.monotonic() - started))):
                return 0
    finally:
        _systemd.notify('STOPPING=1')
        supervisor.close()


def status(config):
    run_dir = config['run_dir']
    report = {name: _watchdog_daemon.read_json(os.path.join(run_dir, name + '.json'), {})
              for name in ('heat', 'attention')}
    # By engine name, as the watchdog names them (its file in the hold directory has their units).
    report['held'] = {unit[:-len('.service')]: holds for unit, holds in
                      _watchdog_daemon._holds.own(config['hold_dir'], _watchdog_daemon.HOLDER).items()}
    report['reboots'] = _watchdog_daemon.read_json(os.path.join(config['state_dir'], 'reboots.json'), {})
    print(json.dumps(report, indent=2, sort_keys=True))
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ('--worker', '--set'):
        return internal(argv)
    _log.setup(LOG.name)
    parser = argparse.ArgumentParser(description='Acts on GPU heat and XID errors through NVML and systemd.')
    parser.add_argument('--config', default=DEFAULT_CONFIG, help='the JSON configuration (default %(default)s)')
    parser.add_argument('command', nargs='?', default='run', choices=('run', 'once', 'check', 'status', 'release'))
    parser.add_argument('gpu', nargs='?', type=int, help='release: the GPU (NVML index); all when left out')
    args = parser.parse_args(argv)
    try:
        config = read_config(args.config)
    except _watchdog_daemon.ConfigError as err:
        LOG.error('configuration: %s', err)
        return 2
    if args.command == 'check':
        print('configuration OK')
        return 0
    if args.command == 'status':
        return status(config)
    if args.command == 'release':
        what = 'every GPU' if args.gpu is None else 'GPU %d' % args.gpu
        if _watchdog_daemon.request_release(config, args.gpu):
            log('%s released: limits restored and held engines started (see the journal)' % what)
            return 0
        LOG.error('%s: the watchdog did not take the request in time: is llm-gpu-watchdog.service running?', what)
        return 1
    return run(config, once=args.command == 'once')


if __name__ == '__main__':
    sys.exit(main())
