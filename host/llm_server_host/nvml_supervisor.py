# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every NVML call with a deadline: the parent side of the NVML worker (nvml_worker.py).

The library through which the host programs read NVML: llm-gpu-exporter
(gpu_exporter.py) and llm-gpu-watchdog (gpu_watchdog.py, watchdog_daemon.py)
each run a Supervisor, and their own process never loads NVML (the
watchdog's NVML settings are child processes of their own too,
watchdog_daemon.Actuator).

A lost GPU can hang an NVML call for good (uninterruptible sleep in the
driver), and a thread stuck in a C call can be neither cancelled nor
replaced: NVML's own locks then hold every other caller in that process. So
NVML is called in a child process only (the worker: the program with
``--worker``, which hands it to nvml_worker.worker_main; the messages
between the two are nvml_worker's):

- the worker answers a scrape request with one message per GPU as each GPU
  is read, then ``done``; the parent waits for them up to a deadline;
- the worker says which GPU it is about to touch; past the deadline the
  parent answers with what arrived and ``success`` False (in the exporter:
  the GPUs not read are ``llm_gpu_up 0``, and
  ``llm_gpu_exporter_scrape_success 0``), SIGKILLs the worker and
  quarantines the GPU it was stuck on: the next worker (started at once, or
  once the old one has exited; ``--skip-gpus``) leaves that GPU alone for
  ``quarantine`` seconds, so one hung GPU does not blind the caller to the
  others; after the quarantine a probe, a process of its own that reads that
  GPU once (``--probe-gpu``), tries it while the worker goes on reading the
  others: only a probe that reads it within the start-up limit lets a new
  worker take it back, and a probe that hangs or fails starts another
  quarantine. So a GPU that is still lost never blinds the others again (a
  new worker that hung at start-up on it would leave every GPU unread for
  the start-up limit);
- a process stuck inside the driver cannot be killed until the driver lets
  go; at most MAX_STUCK_WORKERS such processes are left behind, after that
  no worker is started until one exits, and scrapes answer at once with
  ``success`` False and ``stuck_workers`` (``llm_gpu_exporter_stuck_workers``);
- XIDs arrive through an NVML event set that a thread of the worker waits on
  with a short timeout; each event is passed to the parent at once and
  counted there, so the counts survive a worker's replacement.

Supervisor.scrape() returns a snapshot (a dict): gpu_families.build_families
turns it into the exporter's metric families, watchdog_daemon decides on it.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

# Far below Prometheus' default scrape timeout (10 s): Prometheus gets an
# answer with scrape_success 0 and the GPUs that did answer, rather than
# timing out itself and losing every series; 40 times the target scrape time.
DEFAULT_TIMEOUT_S = 2.0
# A worker may take this long to start (import, nvmlInit, event registration)
# before it is taken as stuck in NVML; scrapes meanwhile answer scrape_success 0.
STARTUP_LIMIT_S = 30.0
# A worker that exited on its own (NVML would not initialise) is started again
# at most this often.
RESPAWN_INTERVAL_S = 5.0
# A GPU on which NVML hung is left alone this long, then tried again by a probe.
DEFAULT_QUARANTINE_S = 300.0
# Workers killed after a timeout that may still sit in the driver before no
# new worker is started: each further one would likely hang the same way.
MAX_STUCK_WORKERS = 2

# XIDs whose counter exists at 0 from the start on every GPU that reports
# events, so that increase() sees their first occurrence (a series that
# appears with the value 1 has no increase): the XIDs of
# the GPU watchdog's XID table (docs/runbooks/gpu-watchdog.md) and nvidia_gpu_exporter's
# critical list. Any other XID gets its series when it first happens.
PREINITIALISED_XIDS = (13, 31, 43, 45, 48, 62, 63, 64, 74, 79, 94, 95, 109, 119, 120, 154)


def _identity(facts):
    return {'index': facts['index'], 'uuid': facts['uuid'], 'name': facts['name']}


class _Worker(object):
    def __init__(self, proc, started):
        self.proc = proc
        self.started = started
        self.skip = frozenset()
        self.position = None  # the GPU the worker is touching now
        self.ready = False
        self.alive = True
        self.fatal = None
        self.scrapes = {}


class Supervisor(object):
    """Runs the NVML worker and answers each scrape within the deadline.

    command: how to start a worker (a program with --worker that hands it to
    nvml_worker.worker_main: gpu_exporter.py, gpu_watchdog.py).
    scrape() returns a snapshot dict (for gpu_families.build_families(), the
    watchdog's rounds); it never raises and never takes longer than timeout
    (plus the time to start a process).
    """

    def __init__(self, command, timeout=DEFAULT_TIMEOUT_S, preinitialised_xids=PREINITIALISED_XIDS,
                 env=None, startup_limit=STARTUP_LIMIT_S, respawn_interval=RESPAWN_INTERVAL_S,
                 quarantine=DEFAULT_QUARANTINE_S, max_stuck=MAX_STUCK_WORKERS, log=None):
        self.command = list(command)
        self.timeout = float(timeout)
        self.preinitialised_xids = tuple(preinitialised_xids)
        self.env = env
        self.startup_limit = max(float(startup_limit), self.timeout)
        self.respawn_interval = float(respawn_interval)
        self.quarantine_s = float(quarantine)
        self.max_stuck = int(max_stuck)
        self.log = log or (lambda message: None)
        self._cond = threading.Condition()
        self._scrape_lock = threading.Lock()
        self._worker = None
        self._stuck = []
        self._next_id = 0
        self._spawns = 0
        self._last_spawn = None
        self._closed = False
        # Kept across workers.
        self.system = {}
        self.known_gpus = {}   # index -> identity
        self.events = {}       # index -> None (XID events registered) or the error
        self.xids = {}         # index -> {'uuid', 'name', 'counts': {xid: n}}
        self.quarantine = {}   # position -> monotonic time it ends (then a probe tries it)
        self.timeouts = 0
        self.probe_failures = 0
        self._probes = {}      # position -> the probe's process (None while it starts)
        self._stuck_probes = 0

    # -- worker life -----------------------------------------------------------

    def start(self):
        with self._scrape_lock:
            if self._worker is None:
                self._spawn()

    def close(self):
        with self._cond:
            self._closed = True
            worker, self._worker = self._worker, None
            probes = [proc for proc in self._probes.values() if proc is not None]
        if worker is not None:
            self._kill(worker)
        for proc in probes:
            try:
                proc.kill()
            except OSError:
                pass

    def _quarantined(self):
        """The GPUs the worker leaves alone: until a probe has read them again, not until a time."""
        with self._cond:
            return frozenset(self.quarantine)

    def _start_due_probes(self):
        """A probe for each GPU whose quarantine has run out and that no probe is trying now."""
        now = time.monotonic()
        with self._cond:
            if self._closed:
                return
            due = [p for p, until in self.quarantine.items() if until <= now and p not in self._probes]
            for position in due:
                self._probes[position] = None
        for position in due:
            thread = threading.Thread(target=self._probe, args=(position,), name='gpu-probe-%d' % position)
            thread.daemon = True
            thread.start()

    def _probe(self, position):
        """Read a quarantined GPU in a process of its own, within the start-up limit."""
        error = None
        try:
            proc = subprocess.Popen(self.command + ['--probe-gpu', str(position)], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, env=self.env, close_fds=True, universal_newlines=True)
        except OSError as err:
            proc, error = None, 'could not start a probe: %s' % err
        if proc is not None:
            with self._cond:
                self._probes[position] = proc
            try:
                output = proc.communicate(timeout=self.startup_limit)[0]
            except subprocess.TimeoutExpired:
                error = 'NVML did not answer within %.0f s' % self.startup_limit
                proc.kill()
                try:
                    proc.wait(timeout=0.05)
                except subprocess.TimeoutExpired:
                    with self._cond:
                        self._stuck_probes += 1
                    proc.wait()  # as long as the driver holds it; no other probe of this GPU meanwhile
                    with self._cond:
                        self._stuck_probes -= 1
            else:
                answers = []
                for line in output.splitlines():
                    try:
                        answers.append(json.loads(line))
                    except ValueError:
                        pass
                if proc.returncode != 0 or not answers:
                    error = (answers[-1].get('error') if answers else None) or 'the probe exited %s' % proc.returncode
        with self._cond:
            del self._probes[position]
            if error is None:
                self.quarantine.pop(position, None)  # the next scrape hands it to a new worker
            else:
                self.probe_failures += 1
                self.quarantine[position] = time.monotonic() + self.quarantine_s
        if error is None:
            self.log('GPU %d answered NVML again: a new worker reads it' % position)
        else:
            self.log('GPU %d tried again: %s; leaving it alone for %.0f s more' % (position, error, self.quarantine_s))

    def _spawn(self):
        skip = self._quarantined()
        command = self.command + (['--skip-gpus', ','.join(str(p) for p in sorted(skip))] if skip else [])
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                env=self.env, close_fds=True, universal_newlines=True, bufsize=1)
        worker = _Worker(proc, time.monotonic())
        worker.skip = skip
        reader = threading.Thread(target=self._read, args=(worker,), name='worker-reader')
        reader.daemon = True
        reader.start()
        with self._cond:
            self._worker = worker
            self._spawns += 1
            self._last_spawn = worker.started
        return worker

    @staticmethod
    def _kill(worker):
        try:
            worker.proc.kill()
        except OSError:
            pass

    def _abandon(self, worker, why):
        """Kill a worker stuck in NVML and quarantine the GPU it was stuck on.

        Called with _scrape_lock held. A fresh worker starts at once while
        fewer than max_stuck killed ones have not exited, else when one exits.
        """
        with self._cond:
            position = worker.position
            if position is not None:
                self.quarantine[position] = time.monotonic() + self.quarantine_s
            if self._worker is worker:
                self._worker = None
        self.log('%s: killing NVML worker %d%s' % (
            why, worker.proc.pid, '' if position is None else
            ' and leaving GPU %d alone for %.0f s' % (position, self.quarantine_s)))
        self._kill(worker)
        try:
            worker.proc.wait(timeout=0.05)  # a process in a plain sleep dies at once
        except subprocess.TimeoutExpired:
            with self._cond:
                self._stuck.append(worker)
            reaper = threading.Thread(target=self._reap, args=(worker,), name='worker-reaper')
            reaper.daemon = True
            reaper.start()
        else:
            self._close_stdin(worker)
        if len(self._stuck) < self.max_stuck and not self._closed:
            self._spawn()  # ready for the next scrape, leaving the quarantined GPU alone

    @staticmethod
    def _close_stdin(worker):
        try:
            worker.proc.stdin.close()
        except (OSError, ValueError):
            pass

    def _reap(self, worker):
        """Wait for a killed worker stuck in the driver to exit; start a new one if none runs."""
        worker.proc.wait()  # as long as the driver holds it
        self._close_stdin(worker)
        with self._scrape_lock:
            with self._cond:
                self._stuck.remove(worker)
                replace = self._worker is None and not self._closed
            if replace:
                self._spawn()

    def _retire(self, worker):
        """Stop an idle worker (its quarantine list is out of date): close its stdin, then kill it."""
        with self._cond:
            if self._worker is worker:
                self._worker = None
        self._close_stdin(worker)
        self._kill(worker)

    def _read(self, worker):
        for line in worker.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                self._handle(worker, message)
                self._cond.notify_all()
        worker.proc.stdout.close()
        with self._cond:
            worker.alive = False
            self._cond.notify_all()
        if worker.fatal:
            self.log('NVML worker %d: %s' % (worker.proc.pid, worker.fatal))
        try:
            worker.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def _handle(self, worker, message):
        kind = message.get('type')
        if kind == 'reading':
            worker.position = message.get('position')
            return
        if kind in ('gpu', 'lost', 'events'):
            worker.position = None
        if kind in ('gpu', 'lost', 'done'):
            scrape = worker.scrapes.get(message.get('id'))
            if scrape is None:
                return
            if kind == 'gpu':
                scrape['gpus'].append(message)
                self.known_gpus[message['facts']['index']] = _identity(message['facts'])
            elif kind == 'lost':
                scrape['lost'].append(message)
            else:
                scrape['done'] = True
                scrape['error'] = message.get('error')
        elif kind == 'xid':
            entry = self.xids.setdefault(message.get('index'), {'counts': {}})
            entry.update(uuid=message.get('uuid'), name=message.get('name'))
            xid = int(message['xid'])
            entry['counts'][xid] = entry['counts'].get(xid, 0) + 1
        elif kind == 'events':
            index = message.get('index')
            self.events[index] = message.get('error')
            if message.get('error') is None:
                entry = self.xids.setdefault(index, {'counts': {}})
                entry.update(uuid=message.get('uuid'), name=message.get('name'))
                for xid in self.preinitialised_xids:
                    entry['counts'].setdefault(xid, 0)
        elif kind == 'ready':
            worker.ready = True
            self.system = message.get('system') or {}
            for identity in message.get('gpus') or ():
                self.known_gpus[identity['index']] = identity
        elif kind == 'fatal':
            worker.fatal = message.get('error')
        elif kind == 'event_error':
            self.log('NVML event wait failed: %s' % message.get('error'))

    # -- scrapes ---------------------------------------------------------------

    def scrape(self):
        """Everything gpu_families.build_families needs, read within self.timeout seconds."""
        start = time.monotonic()
        deadline = start + self.timeout
        snapshot = {'success': False, 'error': None, 'gpus': [], 'lost': []}
        if self._scrape_lock.acquire(timeout=self.timeout):
            try:
                self._scrape_locked(snapshot, deadline)
            finally:
                self._scrape_lock.release()
        else:
            snapshot['error'] = 'another scrape still holds the NVML worker'
        with self._cond:
            snapshot.update(
                system=dict(self.system), known_gpus=dict(self.known_gpus), events=dict(self.events),
                xids={index: {'uuid': entry.get('uuid'), 'name': entry.get('name'),
                              'counts': dict(entry['counts'])} for index, entry in self.xids.items()},
                timeouts=self.timeouts, restarts=max(0, self._spawns - 1), probe_failures=self.probe_failures,
                stuck_workers=len(self._stuck) + self._stuck_probes)
        snapshot['duration'] = time.monotonic() - start
        return snapshot

    def _scrape_locked(self, snapshot, deadline):
        self._start_due_probes()
        with self._cond:
            worker, stuck = self._worker, len(self._stuck)
        if worker is not None and worker.alive and worker.skip - self._quarantined():
            self._retire(worker)  # a probe read a quarantined GPU: a new worker takes it back
            worker = None
        if worker is None or not worker.alive:
            if stuck >= self.max_stuck:
                snapshot['error'] = ('%d NVML workers killed after a timeout have not exited (stuck in the driver)'
                                     % stuck)
                return
            if (worker is not None and self._last_spawn is not None
                    and time.monotonic() - self._last_spawn < self.respawn_interval):
                snapshot['error'] = worker.fatal or 'the NVML worker exited'
                return
            worker = self._spawn()
        with self._cond:
            while not worker.ready and worker.alive and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            ready, alive, fatal = worker.ready, worker.alive, worker.fatal
        if not ready:
            if not alive:
                snapshot['error'] = fatal or 'the NVML worker exited while starting'
            else:
                snapshot['error'] = 'the NVML worker is still starting (nvmlInit or event registration)'
                if time.monotonic() - worker.started > self.startup_limit:
                    self._abandon(worker, 'NVML worker not ready after %.0f s' % self.startup_limit)
            return
        with self._cond:
            self._next_id += 1
            request_id = self._next_id
            scrape = worker.scrapes[request_id] = {'gpus': [], 'lost': [], 'done': False, 'error': None}
        try:
            worker.proc.stdin.write(json.dumps({'op': 'scrape', 'id': request_id}) + '\n')
            worker.proc.stdin.flush()
        except (OSError, ValueError):
            pass  # the worker is gone: the reader marks it not alive
        with self._cond:
            while not scrape['done'] and worker.alive and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            worker.scrapes.pop(request_id, None)
            done, alive = scrape['done'], worker.alive
            snapshot['gpus'] = list(scrape['gpus'])
            snapshot['lost'] = list(scrape['lost'])
        if done:
            snapshot['error'] = scrape['error']
            if worker.skip and not snapshot['error']:
                snapshot['error'] = 'NVML hung on GPU %s before: left alone for now' % (
                    ', '.join(str(p) for p in sorted(worker.skip)))
            elif snapshot['lost'] and not snapshot['error']:
                snapshot['error'] = 'NVML could not open %s' % ', '.join(
                    'GPU %s (%s)' % (lost['index'], lost['error']) for lost in snapshot['lost'])
            snapshot['success'] = snapshot['error'] is None
        elif not alive:
            snapshot['error'] = 'the NVML worker exited during the scrape: %s' % (worker.fatal or 'no reason given')
        else:
            with self._cond:
                self.timeouts += 1
            snapshot['error'] = 'NVML did not answer within %.3g s' % self.timeout
            self._abandon(worker, snapshot['error'])
