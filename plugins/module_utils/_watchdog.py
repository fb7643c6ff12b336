# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The GPU watchdog's decisions: what to do about an XID, about heat, and whether a restart or reboot may happen now.

Private to this collection. Pure: no NVML, no systemd, no files, no clock.
The watchdog daemon reads NVML (in a child process, as the GPU exporter
does), passes what it read and the time to the functions and classes here,
carries out the actions they return and stores their state where told. The
host programs' wheel carries this file (llm_server_host.collection), so the
daemon decides with the code the role checks its settings with; it imports
nothing but the standard library.

Time: every call takes ``now`` in seconds. Pass ``time.monotonic()`` to
XidPolicy, HeatPolicy and RestartBudget (their state lives as long as the
daemon, or a boot when saved under /run) and ``time.time()`` to RebootBudget
(its state must survive the reboots it counts). A time earlier than one
already seen (a clock set back, an RTC lost at boot) is handled the same way
everywhere: a stored time later than ``now`` is taken as ``now``. A limit
then lasts longer than it would have, never shorter: a clock set back can
delay an action, and never lets a restart, reset or reboot through early.

XIDs
----
``xid_action(xid, recovery_action=None, repeated=False)`` returns an
XidAction: ``action`` is one of ACTIONS (mildest first), ``severity`` info,
warning or critical, ``reason`` a sentence for the log and the alert,
``source`` where the verdict came from (SOURCES).

1. The driver's verdict first. NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (drivers
   570+; codes in gpu_families.RECOVERY_ACTIONS, meanings from NVIDIA's
   "Error Recovery and Response Flags",
   https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html):
   see RECOVERY_ACTION_POLICY. ``none`` means the GPU needs no recovery: the
   table's action is kept but capped at restart_engine (a fault can still have
   killed the engine's work). ``drain_p2p`` asks for the processes that use
   peer-to-peer to stop before the field is read again: restart_engine with
   ``recheck`` set. ``recover_imex_domain`` (multi-node NVLink) does not apply
   to a PCIe box and, like a code this file does not know, falls back to the
   table.
2. Else XID_TABLE, written out with REPEAT_ESCALATION in
   docs/runbooks/gpu-watchdog.md ("The XID table"; a unit test keeps the two
   in step). Its sources, named in each row: NVIDIA's XID catalogue (names,
   mnemonics, https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html),
   NVSentinel's mapping (NVIDIA/NVSentinel
   distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv:
   recommended action and FATAL/NONFATAL), the NVIDIA device plugin for
   Kubernetes (NVIDIA/k8s-device-plugin internal/rm/health.go, which by
   default does not mark a GPU unhealthy for the application errors 13, 31,
   43, 45, 68, 109) and nvidia_gpu_exporter (utkuozdemir/nvidia_gpu_exporter
   docs/METRICS.md, whose alerting example keeps to the reset and reboot
   class 48, 62, 64, 74, 79, 95, 119, 120: "critical" in a row).
3. An XID in neither: log only (``ignore``, severity warning, source unknown).

XidPolicy adds what one event alone cannot tell: a 109 that repeats on the
same GPU within ``repeat_window_s`` (an hour) resets the GPU, and a 45 (the
driver's cleanup after an earlier error) within ``follow_window_s`` of an XID
on the same GPU whose action already restarts, resets or reboots adds nothing.

Reset and reboot (``stops_engines``): the daemon stops the engines on that
GPU first (a reset needs the GPU idle) and raises a critical alert; whether
it then resets or reboots is its call (llm_server_allow_reboot, RebootBudget,
dry-run).

Heat
----
HeatPolicy(config) is one GPU's state machine; ``step(now, reading)``
returns the HeatActions of that reading, usually none. Levels (LEVELS):

- normal -> power_lowered at ``warn_c``: the power limit goes down to
  ``power_fraction`` of the card's default limit (or to ``power_limit_w``),
  clamped within the card's min/max and never above the limit in force;
- -> clocks_locked at ``clocks_c``: graphics clocks locked at most to
  ``clock_mhz``, else ``clock_fraction`` of the card's maximum graphics clock
  (neither known: the action has no value and its message says the clock step
  is skipped; the level still advances, so the stop step follows);
- -> engines_stopped once at or above ``stop_c`` for ``stop_after_s``: drain
  and stop the engines on that GPU (the other GPU or a standby keeps serving);
- back to normal only after every reading stayed below ``warn_c -
  hysteresis_c`` for ``cool_for_s``: clocks unlocked, the power limit back to
  what it was, the engines started again, in that order.

"At" means at or above. A temperature that jumps past several thresholds in
one reading takes every step it passed, in order, in that one step. Each
step acts once per episode; every transition returns an action with a
message. Thresholds (heat_thresholds): from the card's slowdown and shutdown
temperatures as NVML reports them, ``warn_c`` = slowdown - 8, ``clocks_c`` =
slowdown - 4, ``stop_c`` = the lower of slowdown - 1 and shutdown - 5; each
can be set in the config. A card that reports no slowdown temperature gets
FALLBACK_SLOWDOWN_C; one without a shutdown temperature is judged by its
slowdown temperature alone. Thresholds are kept in order by lowering the
earlier ones (acting earlier, never later).

Storm control
-------------
RestartBudget: restarts of one engine; the first at once, each further one
after a backoff that doubles from ``backoff_initial_s`` to ``backoff_max_s``
(the doubling starts again after ``reset_after_s`` without a restart), and
never more than ``per_hour`` in a rolling hour. RebootBudget: reboots of the
host, at most ``per_day`` in a rolling 24 hours, over a JSON-serialisable
state the daemon keeps in a file: load it with ``RebootBudget(per_day,
state=...)`` and save ``state()`` after every ``allowed()`` and ``record()``.
"""

from __future__ import annotations

import collections
import dataclasses
import math

# --- actions ----------------------------------------------------------------

IGNORE = 'ignore'
RESTART_ENGINE_IF_UNHEALTHY = 'restart_engine_if_unhealthy'
RESTART_ENGINE = 'restart_engine'
RESET_GPU = 'reset_gpu'
REBOOT_HOST = 'reboot_host'
# Mildest first: the rank of an action is its position.
ACTIONS = (IGNORE, RESTART_ENGINE_IF_UNHEALTHY, RESTART_ENGINE, RESET_GPU, REBOOT_HOST)
_RANK = {action: rank for rank, action in enumerate(ACTIONS)}

INFO = 'info'
WARNING = 'warning'
CRITICAL = 'critical'
SEVERITIES = (INFO, WARNING, CRITICAL)
_SEVERITY = {IGNORE: INFO, RESTART_ENGINE_IF_UNHEALTHY: WARNING, RESTART_ENGINE: WARNING,
             RESET_GPU: CRITICAL, REBOOT_HOST: CRITICAL}

# Where a verdict came from.
SOURCE_DRIVER = 'driver'        # the driver's recovery action
SOURCE_TABLE = 'table'          # XID_TABLE
SOURCE_REPEAT = 'table_repeat'  # XID_TABLE's rule for a repeated XID
SOURCE_UNKNOWN = 'unknown'      # an XID in neither
SOURCES = (SOURCE_DRIVER, SOURCE_TABLE, SOURCE_REPEAT, SOURCE_UNKNOWN)

_WORDS = {
    IGNORE: 'log only',
    RESTART_ENGINE_IF_UNHEALTHY: "restart the engine on this GPU if its health check fails",
    RESTART_ENGINE: 'restart the engine on this GPU',
    RESET_GPU: 'stop the engines on this GPU and reset it',
    REBOOT_HOST: 'stop the engines on this GPU and reboot the host',
}


@dataclasses.dataclass(frozen=True)
class XidAction(object):
    """What to do about one XID on one GPU."""

    xid: int
    action: str
    severity: str
    reason: str
    source: str
    # The driver's recovery action as a name of RECOVERY_ACTIONS ('unknown_N'
    # for a code this file does not know), None when it was not read.
    recovery_action: str | None = None
    # Read the recovery action again once the engines are stopped and decide
    # anew (the driver asked for peer-to-peer traffic to be drained first).
    recheck: bool = False

    @property
    def rank(self):
        return _RANK[self.action]

    @property
    def stops_engines(self):
        """True for a reset or a reboot: the engines on the GPU stop first, and a critical alert goes out."""
        return self.action in (RESET_GPU, REBOOT_HOST)

    def as_dict(self):
        return dataclasses.asdict(self)


# --- XIDs: the driver's recovery action --------------------------------------

# nvmlDeviceGpuRecoveryAction_t: the same codes as gpu_families.RECOVERY_ACTIONS
# (a unit test checks that they agree; this file does not import NVML code).
RECOVERY_ACTIONS = {
    0: 'none', 1: 'gpu_reset', 2: 'node_reboot', 3: 'drain_p2p', 4: 'drain_and_reset',
    5: 'recover_imex_domain', 6: 'bus_reset', 7: 'system_reboot',
}

# Recovery action -> (action, what the driver says). None: the GPU needs no
# recovery (the table's action capped at restart_engine). Missing: not for
# this box, the table decides.
RECOVERY_ACTION_POLICY = {
    'none': (None, 'the driver reports that the GPU needs no recovery'),
    'gpu_reset': (RESET_GPU, 'the driver asks for a GPU reset'),
    'node_reboot': (REBOOT_HOST, 'the driver asks for a reboot: the fault may have left the OS inconsistent'),
    'drain_p2p': (RESTART_ENGINE, 'the driver asks for peer-to-peer traffic to be drained: stop the engines '
                                  'that use this GPU, then read the recovery action again'),
    'drain_and_reset': (RESET_GPU, 'the driver asks for peer-to-peer traffic to be drained and the GPU reset'),
    'bus_reset': (RESET_GPU, "the driver asks for a reset of the GPU's PCIe bus"),
    'system_reboot': (REBOOT_HOST, 'the driver asks for a system reboot'),
}


def recovery_action_name(value):
    """The name of a recovery action given as its NVML code or its name; None for None.

    A code this file does not know gives 'unknown_N'; a name it does not know
    raises ValueError.
    """
    if value is None:
        return None
    if isinstance(value, str):
        if value in RECOVERY_ACTIONS.values() or value.startswith('unknown_'):
            return value
        raise ValueError('unknown recovery action %r (expected one of %s or an NVML code)'
                         % (value, ', '.join(sorted(RECOVERY_ACTIONS.values()))))
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError('recovery action must be an NVML code or a name, not %r' % (value,))
    return RECOVERY_ACTIONS.get(value, 'unknown_%d' % value)


# --- XIDs: the table --------------------------------------------------------

XidRule = collections.namedtuple('XidRule', 'name action severity note sources')

_DP_IGNORED = 'k8s-device-plugin: an application error, the GPU stays healthy'

# The runbook's XID table (docs/runbooks/gpu-watchdog.md) row by row. sources:
# what each source says (NVSentinel: xiderrorsmapping.csv's recommended action
# and FATAL / NONFATAL; k8s-device-plugin: internal/rm/health.go's ignored
# XIDs; nvidia_gpu_exporter: in its reset/reboot-class alert list; names and
# mnemonics from NVIDIA's XID catalogue).
XID_TABLE = {
    13: XidRule('graphics engine exception (ROBUST_CHANNEL_GR_EXCEPTION)', RESTART_ENGINE_IF_UNHEALTHY, WARNING,
                "most often the application's own fault: the engine restarts only if its health check fails",
                ('NVSentinel: RESTART_APP, NONFATAL', _DP_IGNORED)),
    31: XidRule('GPU memory page fault (ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT)', RESTART_ENGINE_IF_UNHEALTHY, WARNING,
                "most often the application's own fault: the engine restarts only if its health check fails",
                ('NVSentinel: RESTART_APP, NONFATAL', _DP_IGNORED)),
    43: XidRule('GPU stopped processing (ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR)', RESTART_ENGINE_IF_UNHEALTHY,
                WARNING, 'the driver stopped the faulting channel: the engine restarts only if its health check fails',
                ('NVSentinel: IGNORE, NONFATAL', _DP_IGNORED)),
    45: XidRule('preemptive cleanup after an earlier error (ROBUST_CHANNEL_PREEMPTIVE_REMOVAL)',
                RESTART_ENGINE_IF_UNHEALTHY, INFO,
                "follows another error, whose action applies; alone, the engine restarts only if its health "
                "check fails", ('NVSentinel: WORKFLOW_XID_45, NONFATAL', _DP_IGNORED)),
    48: XidRule('double-bit ECC error (ROBUST_CHANNEL_GPU_ECC_DBE)', RESET_GPU, CRITICAL,
                'stop the engines on the GPU, reset it, then check its remapped rows',
                ('NVSentinel: WORKFLOW_XID_48, FATAL', 'nvidia_gpu_exporter: critical')),
    63: XidRule('row remapping recorded (INFOROM_DRAM_RETIREMENT_EVENT)', IGNORE, INFO,
                'informational: the remap takes effect at the next GPU reset, reset when convenient',
                ('NVSentinel: IGNORE, NONFATAL',)),
    64: XidRule('row remapping failure (INFOROM_DRAM_RETIREMENT_FAILURE)', RESET_GPU, CRITICAL,
                'reset the GPU; a remap failure is a hardware-return criterion',
                ('NVSentinel: RESET_GPU, FATAL', 'nvidia_gpu_exporter: critical')),
    79: XidRule('GPU has fallen off the bus (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS)', REBOOT_HOST, CRITICAL,
                'a GPU reset is impossible: reboot (rate-limited), then check power, riser and seating',
                ('NVSentinel: RESTART_BM, FATAL', 'nvidia_gpu_exporter: critical')),
    94: XidRule('contained ECC error (ROBUST_CHANNEL_CONTAINED_ERROR)', RESTART_ENGINE, WARNING,
                'the driver contained the error to the processes that used the memory: restart the engine',
                ('NVSentinel: RESTART_APP, NONFATAL',)),
    95: XidRule('uncontained ECC error (ROBUST_CHANNEL_UNCONTAINED_ERROR)', RESET_GPU, CRITICAL,
                'stop every process on the GPU and reset it',
                ('NVSentinel: RESET_GPU, FATAL', 'nvidia_gpu_exporter: critical')),
    109: XidRule('context switch timeout (ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR)', RESTART_ENGINE, WARNING,
                 'the sources disagree: restart the engine; a repeat within the repeat window resets the GPU',
                 ('NVSentinel: RESET_GPU, FATAL', _DP_IGNORED)),
    119: XidRule('GSP RPC timeout (GSP_RPC_TIMEOUT)', RESET_GPU, CRITICAL,
                 'reset the GPU; if it recurs, change the driver',
                 ('NVSentinel: RESET_GPU, FATAL', 'nvidia_gpu_exporter: critical')),
    120: XidRule('GSP error (GSP_ERROR)', RESET_GPU, CRITICAL,
                 'reset the GPU; if it recurs, change the driver',
                 ('NVSentinel: RESET_GPU, FATAL', 'nvidia_gpu_exporter: critical')),
    154: XidRule('GPU recovery action changed (GPU_RECOVERY_ACTION_CHANGED)', IGNORE, WARNING,
                 "follow the driver's recovery action; without one this watchdog can act on, only log",
                 ('NVSentinel: follow the guidance of the XID it applies to, NONFATAL',)),
}

# What a repeated XID escalates to (XidPolicy.repeat_window_s).
REPEAT_ESCALATION = {
    109: (RESET_GPU, CRITICAL, 'a second context switch timeout on this GPU within the repeat window'),
}


def _xid(value):
    if isinstance(value, bool):
        raise ValueError('XID must be a number, not %r' % (value,))
    try:
        xid = int(value)
    except (TypeError, ValueError):
        raise ValueError('XID must be a number, not %r' % (value,)) from None
    if xid < 0:
        raise ValueError('XID must not be negative: %r' % (value,))
    return xid


def _table_verdict(xid, repeated):
    """(action, severity, reason, source) from the table alone."""
    rule = XID_TABLE.get(xid)
    if rule is None:
        return (IGNORE, WARNING, 'XID %d is not in the watchdog\'s table: log only' % xid, SOURCE_UNKNOWN)
    reason = 'XID %d, %s: %s (%s)' % (xid, rule.name, rule.note, '; '.join(rule.sources))
    if repeated and xid in REPEAT_ESCALATION:
        action, severity, why = REPEAT_ESCALATION[xid]
        return (action, severity, 'XID %d, %s: %s: %s' % (xid, rule.name, why, _WORDS[action]), SOURCE_REPEAT)
    return (rule.action, rule.severity, reason, SOURCE_TABLE)


def xid_action(xid, recovery_action=None, repeated=False):
    """The action for one XID: the driver's recovery action first, else the table (see the module docstring).

    recovery_action: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION as read after the
    XID (a code or a RECOVERY_ACTIONS name), None when not read or not
    supported. repeated: the same XID came on the same GPU within the repeat
    window (XidPolicy works it out).
    """
    xid = _xid(xid)
    name = recovery_action_name(recovery_action)
    action, severity, reason, source = _table_verdict(xid, repeated)
    if name is None:
        return XidAction(xid, action, severity, reason, source)
    if name not in RECOVERY_ACTION_POLICY:
        return XidAction(xid, action, severity, '%s; the driver\'s recovery action %s is not one this watchdog '
                         'acts on, so the table decides' % (reason, name), source, recovery_action=name)
    driver_action, said = RECOVERY_ACTION_POLICY[name]
    rule = XID_TABLE.get(xid)
    what = 'XID %d, %s' % (xid, rule.name) if rule else 'XID %d' % xid
    if driver_action is None:
        capped = ACTIONS[min(_RANK[action], _RANK[RESTART_ENGINE])]
        return XidAction(xid, capped, INFO if capped == IGNORE else WARNING,
                         '%s: %s: %s' % (what, said, _WORDS[capped]), SOURCE_DRIVER, recovery_action=name)
    recheck = name == 'drain_p2p'
    reason = '%s: %s' % (what, said) if recheck else '%s: %s: %s' % (what, said, _WORDS[driver_action])
    return XidAction(xid, driver_action, _SEVERITY[driver_action], reason, SOURCE_DRIVER, recovery_action=name,
                     recheck=recheck)


class XidPolicy(object):
    """xid_action with a memory per GPU: repeated 109s escalate, a 45 after another error adds nothing.

    decide(now, gpu, xid, recovery_action) -> XidAction. gpu: any hashable
    label (index or UUID) of the GPU the event came from; None when unknown.
    """

    def __init__(self, repeat_window_s=3600.0, follow_window_s=60.0):
        self.repeat_window_s = _non_negative('repeat_window_s', repeat_window_s)
        self.follow_window_s = _non_negative('follow_window_s', follow_window_s)
        self._last_seen = {}     # (gpu, xid) -> time
        self._last_action = {}   # gpu -> (time, XidAction) of the last XID other than 45

    def decide(self, now, gpu, xid, recovery_action=None):
        now = _time(now)
        xid = _xid(xid)
        previous = self._last_seen.get((gpu, xid))
        repeated = previous is not None and now - min(previous, now) < self.repeat_window_s
        result = xid_action(xid, recovery_action, repeated=repeated)
        earlier = self._last_action.get(gpu)
        if (xid == 45 and result.source == SOURCE_TABLE and earlier is not None
                and now - min(earlier[0], now) < self.follow_window_s
                and earlier[1].rank >= _RANK[RESTART_ENGINE_IF_UNHEALTHY]):
            result = XidAction(xid, IGNORE, INFO, 'XID 45, cleanup after XID %d on this GPU: that XID\'s action '
                               '(%s) covers it' % (earlier[1].xid, earlier[1].action), SOURCE_TABLE)
        self._last_seen[(gpu, xid)] = now
        if xid != 45:
            self._last_action[gpu] = (now, result)
        return result


# --- heat -------------------------------------------------------------------

# A card that reports no slowdown temperature is treated as if it slowed down
# at this temperature: below the slowdown temperature of every card the NVML
# double's fixtures describe (RTX PRO 6000 95 C, H100 89 C), so a card of
# unknown limits is held cooler, not hotter. Gives warn 79, clocks 83, stop 86.
FALLBACK_SLOWDOWN_C = 87.0

LEVELS = ('normal', 'power_lowered', 'clocks_locked', 'engines_stopped')
NORMAL, POWER_LOWERED, CLOCKS_LOCKED, ENGINES_STOPPED = range(4)

# HeatAction kinds.
LOWER_POWER_LIMIT = 'lower_power_limit'
LOCK_CLOCKS = 'lock_clocks'
STOP_ENGINES = 'stop_engines'
UNLOCK_CLOCKS = 'unlock_clocks'
RESTORE_POWER_LIMIT = 'restore_power_limit'
START_ENGINES = 'start_engines'
HEAT_ACTIONS = (LOWER_POWER_LIMIT, LOCK_CLOCKS, STOP_ENGINES, UNLOCK_CLOCKS, RESTORE_POWER_LIMIT, START_ENGINES)


@dataclasses.dataclass(frozen=True)
class HeatConfig(object):
    """Heat thresholds and steps; every threshold None is derived from the card (see heat_thresholds)."""

    warn_c: float | None = None
    clocks_c: float | None = None
    stop_c: float | None = None
    warn_below_slowdown_c: float = 8.0
    clocks_below_slowdown_c: float = 4.0
    stop_below_slowdown_c: float = 1.0
    stop_below_shutdown_c: float = 5.0
    hysteresis_c: float = 5.0
    stop_after_s: float = 30.0
    cool_for_s: float = 300.0
    # The lowered power limit: power_limit_w if set, else this fraction of the
    # card's default limit (of the limit in force when NVML has no default).
    power_fraction: float = 0.8
    power_limit_w: float | None = None
    # The clock lock: at most clock_mhz if set, else this fraction of the
    # card's maximum graphics clock.
    clock_fraction: float = 0.7
    clock_mhz: float | None = None

    def __post_init__(self):
        for name in ('warn_below_slowdown_c', 'clocks_below_slowdown_c', 'stop_below_slowdown_c',
                     'stop_below_shutdown_c', 'hysteresis_c', 'stop_after_s', 'cool_for_s'):
            _non_negative(name, getattr(self, name))
        for name in ('warn_c', 'clocks_c', 'stop_c'):
            if getattr(self, name) is not None:
                _finite(name, getattr(self, name))
        for name in ('power_fraction', 'clock_fraction'):
            value = _finite(name, getattr(self, name))
            if not 0 < value <= 1:
                raise ValueError('%s must be above 0 and at most 1, not %r' % (name, value))
        for name in ('power_limit_w', 'clock_mhz'):
            if getattr(self, name) is not None and _finite(name, getattr(self, name)) <= 0:
                raise ValueError('%s must be above 0, not %r' % (name, getattr(self, name)))
        given = [(name, getattr(self, name)) for name in ('warn_c', 'clocks_c', 'stop_c')
                 if getattr(self, name) is not None]
        for (low_name, low), (high_name, high) in zip(given, given[1:]):
            if low > high:
                raise ValueError('%s (%s) must not be above %s (%s)' % (low_name, low, high_name, high))

    @classmethod
    def from_dict(cls, data):
        """From the daemon's configuration (JSON): unknown keys are an error."""
        data = dict(data or {})
        known = set(field.name for field in dataclasses.fields(cls))
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError('unknown heat setting(s): %s' % ', '.join(unknown))
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class HeatReading(object):
    """One reading of one GPU; every field may be None (not supported, or the read failed)."""

    temperature_c: float | None
    slowdown_c: float | None = None
    shutdown_c: float | None = None
    power_limit_w: float | None = None
    power_min_w: float | None = None
    power_max_w: float | None = None
    power_default_w: float | None = None
    clock_max_mhz: float | None = None

    @classmethod
    def from_facts(cls, facts):
        """From a gpu_facts / _nvml.read_device record."""
        clocks = facts.get('clocks') or {}
        return cls(temperature_c=facts.get('temperature_c'), slowdown_c=facts.get('temperature_slowdown_c'),
                   shutdown_c=facts.get('temperature_shutdown_c'), power_limit_w=facts.get('power_limit_w'),
                   power_min_w=facts.get('power_limit_min_w'), power_max_w=facts.get('power_limit_max_w'),
                   power_default_w=facts.get('power_limit_default_w'), clock_max_mhz=clocks.get('graphics_max_mhz'))


Thresholds = collections.namedtuple('Thresholds', 'warn_c clocks_c stop_c restore_below_c basis')


def _fmt(value, unit):
    return '%g %s' % (round(value, 1), unit)


def heat_thresholds(config, slowdown_c, shutdown_c):
    """Thresholds for a card with these slowdown and shutdown temperatures (None: not reported)."""
    config = config if isinstance(config, HeatConfig) else HeatConfig.from_dict(config)
    if slowdown_c is None:
        slowdown = FALLBACK_SLOWDOWN_C
        basis = ['no slowdown temperature reported, %s assumed' % _fmt(slowdown, 'C')]
    else:
        slowdown = float(slowdown_c)
        basis = ['slowdown %s' % _fmt(slowdown, 'C')]
    stop = slowdown - config.stop_below_slowdown_c
    if shutdown_c is None:
        basis.append('no shutdown temperature reported')
    else:
        basis.append('shutdown %s' % _fmt(shutdown_c, 'C'))
        stop = min(stop, float(shutdown_c) - config.stop_below_shutdown_c)
    stop = stop if config.stop_c is None else float(config.stop_c)
    clocks = slowdown - config.clocks_below_slowdown_c if config.clocks_c is None else float(config.clocks_c)
    warn = slowdown - config.warn_below_slowdown_c if config.warn_c is None else float(config.warn_c)
    clocks = min(clocks, stop)
    warn = min(warn, clocks)
    return Thresholds(warn, clocks, stop, warn - config.hysteresis_c, ', '.join(basis))


@dataclasses.dataclass(frozen=True)
class HeatAction(object):
    """One thing to do about heat on one GPU.

    value: watts for the power limit kinds, MHz (the highest graphics clock)
    for lock_clocks; None where there is nothing to set (the message says
    why: log it, set nothing). previous: the power limit before the change.
    """

    kind: str
    level: int
    message: str
    temperature_c: float | None = None
    value: float | None = None
    previous: float | None = None

    @property
    def level_name(self):
        return LEVELS[self.level]

    def as_dict(self):
        return dataclasses.asdict(self)


class HeatPolicy(object):
    """One GPU's heat steps (module docstring). step(now, reading) -> [HeatAction].

    gpu: a label for the messages ("GPU 0"). state: what state() returned
    before (kept under /run: the power limit and clock lock NVML holds last
    as long as the boot, and so should the policy's memory of them).
    """

    STATE_VERSION = 1

    def __init__(self, config=None, gpu=None, state=None):
        self.config = config if isinstance(config, HeatConfig) else HeatConfig.from_dict(config)
        self.gpu = gpu
        self.level = NORMAL
        self.restore_power_limit_w = None  # the limit in force before it was lowered
        self._slowdown_c = None            # last thresholds the card reported
        self._shutdown_c = None
        self._above_stop_since = None
        self._cool_since = None
        if state:
            self._load(state)

    # state ------------------------------------------------------------------

    def state(self):
        """JSON-serialisable: the level and the power limit to go back to (timers start again on load)."""
        return {'version': self.STATE_VERSION, 'level': self.level,
                'restore_power_limit_w': self.restore_power_limit_w}

    def _load(self, state):
        if not isinstance(state, dict) or state.get('version', self.STATE_VERSION) != self.STATE_VERSION:
            raise ValueError('not a heat state of version %d: %r' % (self.STATE_VERSION, state))
        level = state.get('level', NORMAL)
        if isinstance(level, bool) or not isinstance(level, int) or not NORMAL <= level <= ENGINES_STOPPED:
            raise ValueError('heat state: level must be 0-%d, not %r' % (ENGINES_STOPPED, level))
        restore = state.get('restore_power_limit_w')
        if restore is not None:
            restore = _finite('restore_power_limit_w', restore)
        self.level = level
        self.restore_power_limit_w = restore

    # thresholds ---------------------------------------------------------------

    @property
    def level_name(self):
        return LEVELS[self.level]

    def thresholds(self, reading=None):
        """The thresholds in force: from the latest slowdown/shutdown temperatures the card reported."""
        if reading is not None:
            if reading.slowdown_c is not None:
                self._slowdown_c = reading.slowdown_c
            if reading.shutdown_c is not None:
                self._shutdown_c = reading.shutdown_c
        return heat_thresholds(self.config, self._slowdown_c, self._shutdown_c)

    # the steps ----------------------------------------------------------------

    def _who(self):
        return 'GPU' if self.gpu is None else 'GPU %s' % (self.gpu,)

    def step(self, now, reading):
        """Actions for this reading (often none). reading: a HeatReading, or a dict of its fields."""
        now = _time(now)
        if not isinstance(reading, HeatReading):
            reading = HeatReading(**dict(reading))
        limits = self.thresholds(reading)
        # A stored time later than now (a clock set back) is taken as now.
        if self._above_stop_since is not None and self._above_stop_since > now:
            self._above_stop_since = now
        if self._cool_since is not None and self._cool_since > now:
            self._cool_since = now
        temp = reading.temperature_c
        if temp is None:
            self._cool_since = None  # cooling cannot be confirmed without a reading
            return []
        temp = _finite('temperature_c', temp)
        actions = []
        if temp >= limits.warn_c and self.level < POWER_LOWERED:
            actions.append(self._lower_power(temp, limits, reading))
        if temp >= limits.clocks_c and self.level < CLOCKS_LOCKED:
            actions.append(self._lock_clocks(temp, limits, reading))
        if temp >= limits.stop_c:
            if self._above_stop_since is None:
                self._above_stop_since = now
            if self.level < ENGINES_STOPPED and now - self._above_stop_since >= self.config.stop_after_s:
                actions.append(self._stop_engines(temp, limits, now - self._above_stop_since))
        else:
            self._above_stop_since = None
        if self.level > NORMAL and not actions:
            if temp < limits.restore_below_c:
                if self._cool_since is None:
                    self._cool_since = now
                if now - self._cool_since >= self.config.cool_for_s:
                    actions.extend(self._restore(temp, limits, reading, now - self._cool_since))
            else:
                self._cool_since = None
        return actions

    def _lower_power(self, temp, limits, reading):
        self.level = POWER_LOWERED
        self._cool_since = None
        current = reading.power_limit_w
        head = '%s at %s (power step at %s; %s)' % (
            self._who(), _fmt(temp, 'C'), _fmt(limits.warn_c, 'C'), limits.basis)
        target, how = self._power_target(reading)
        if target is None:
            self.restore_power_limit_w = None
            return HeatAction(LOWER_POWER_LIMIT, self.level, '%s: power limit not lowered: %s' % (head, how), temp)
        self.restore_power_limit_w = current if current is not None else reading.power_default_w
        if current is not None and target >= current:
            return HeatAction(LOWER_POWER_LIMIT, self.level, '%s: power limit stays at %s, already at or below %s'
                              % (head, _fmt(current, 'W'), how), temp, current, current)
        was = 'from %s ' % _fmt(current, 'W') if current is not None else ''
        return HeatAction(LOWER_POWER_LIMIT, self.level, '%s: power limit lowered %sto %s (%s)'
                          % (head, was, _fmt(target, 'W'), how), temp, target, current)

    def _power_target(self, reading):
        """(watts or None, how it was worked out)."""
        config = self.config
        if config.power_limit_w is not None:
            target, how = float(config.power_limit_w), 'the configured %s' % _fmt(config.power_limit_w, 'W')
        else:
            base, of = reading.power_default_w, 'the default'
            if base is None:
                base, of = reading.power_limit_w, 'the limit in force'
            if base is None:
                return None, 'NVML reports no power limit for this GPU'
            target = float(base) * config.power_fraction
            how = '%g %% of %s %s' % (round(config.power_fraction * 100, 1), of, _fmt(base, 'W'))
        low, high = reading.power_min_w, reading.power_max_w
        if low is not None and target < low:
            target, how = float(low), "the card's minimum %s; %s would be below it" % (_fmt(low, 'W'), how)
        if high is not None and target > high:
            target, how = float(high), "the card's maximum %s; %s would be above it" % (_fmt(high, 'W'), how)
        return round(target, 3), how

    def _lock_clocks(self, temp, limits, reading):
        self.level = CLOCKS_LOCKED
        self._cool_since = None
        head = '%s at %s (clock step at %s)' % (self._who(), _fmt(temp, 'C'), _fmt(limits.clocks_c, 'C'))
        if self.config.clock_mhz is not None:
            mhz, how = float(self.config.clock_mhz), 'the configured clock'
        elif reading.clock_max_mhz is not None:
            mhz = float(math.floor(reading.clock_max_mhz * self.config.clock_fraction))
            how = '%g %% of the maximum %s' % (round(self.config.clock_fraction * 100, 1),
                                               _fmt(reading.clock_max_mhz, 'MHz'))
        else:
            # Nothing to work the lock out from: the step is skipped (the daemon counts it), not guessed.
            return HeatAction(LOCK_CLOCKS, self.level, '%s: clock step skipped, graphics clocks not locked: NVML '
                              'reports no maximum graphics clock for this GPU and clock_mhz is not set (set '
                              'clock_mhz in gpu_watchdog_heat for this step to lock them)' % head, temp)
        return HeatAction(LOCK_CLOCKS, self.level, '%s: graphics clocks locked at most to %s (%s)'
                          % (head, _fmt(mhz, 'MHz'), how), temp, mhz)

    def _stop_engines(self, temp, limits, held_s):
        self.level = ENGINES_STOPPED
        self._cool_since = None
        return HeatAction(STOP_ENGINES, self.level, '%s at %s, at or above %s for %.0f s: draining and stopping the '
                          'engines on this GPU (the other GPU or a standby keeps serving)'
                          % (self._who(), _fmt(temp, 'C'), _fmt(limits.stop_c, 'C'), held_s), temp)

    def _restore(self, temp, limits, reading, cool_s):
        was = self.level
        head = '%s at %s, below %s for %.0f s' % (
            self._who(), _fmt(temp, 'C'), _fmt(limits.restore_below_c, 'C'), cool_s)
        actions = []
        if was >= CLOCKS_LOCKED:
            actions.append(HeatAction(UNLOCK_CLOCKS, NORMAL, '%s: graphics clocks unlocked' % head, temp))
        restore = self.restore_power_limit_w
        if restore is None:
            restore = reading.power_default_w
        if restore is None:
            actions.append(HeatAction(RESTORE_POWER_LIMIT, NORMAL, '%s: power limit left as it is: the limit '
                                      'before the heat step is not known' % head, temp))
        else:
            actions.append(HeatAction(RESTORE_POWER_LIMIT, NORMAL, '%s: power limit back to %s'
                                      % (head, _fmt(restore, 'W')), temp, restore, reading.power_limit_w))
        if was >= ENGINES_STOPPED:
            actions.append(HeatAction(START_ENGINES, NORMAL, '%s: starting the engines on this GPU again' % head,
                                      temp))
        self.level = NORMAL
        self.restore_power_limit_w = None
        self._cool_since = None
        self._above_stop_since = None
        return actions


# --- storm control ------------------------------------------------------------

class RestartBudget(object):
    """Whether an engine may be restarted now: backoff between restarts and a cap per rolling hour.

    The first restart may happen at once; after the n-th of a run, the next
    waits backoff_initial_s * 2**(n-1), at most backoff_max_s. A run ends
    after reset_after_s without a restart (default: the window). Never more
    than per_hour restarts within window_s (0: never restart).
    """

    def __init__(self, per_hour=3, backoff_initial_s=30.0, backoff_max_s=600.0, window_s=3600.0,
                 reset_after_s=None):
        if isinstance(per_hour, bool) or not isinstance(per_hour, int) or per_hour < 0:
            raise ValueError('per_hour must be a whole number, 0 or more, not %r' % (per_hour,))
        self.per_hour = per_hour
        self.backoff_initial_s = _non_negative('backoff_initial_s', backoff_initial_s)
        self.backoff_max_s = _non_negative('backoff_max_s', backoff_max_s)
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError('backoff_max_s (%s) must not be below backoff_initial_s (%s)'
                             % (backoff_max_s, backoff_initial_s))
        self.window_s = _positive('window_s', window_s)
        self.reset_after_s = self.window_s if reset_after_s is None else _non_negative('reset_after_s', reset_after_s)
        self._times = []    # restarts within the window, oldest first
        self._last = None   # the latest restart
        self._run = 0       # restarts in the current run

    def _normalise(self, now):
        self._times = [min(t, now) for t in self._times if min(t, now) > now - self.window_s]
        if self._last is not None and self._last > now:
            self._last = now
        if self._last is not None and now - self._last >= self.reset_after_s:
            self._run = 0

    def backoff_s(self, now):
        """The wait the next restart owes after the latest one (0 at the start of a run)."""
        now = _time(now)
        self._normalise(now)
        if self._run == 0:
            return 0.0
        return min(self.backoff_initial_s * 2.0 ** min(self._run - 1, 64), self.backoff_max_s)

    def next_allowed_at(self, now):
        """The earliest time at or after now at which a restart may happen; None: never (per_hour 0)."""
        now = _time(now)
        if self.per_hour == 0:
            return None
        wait = self.backoff_s(now)
        candidates = [now]
        if wait and self._last is not None:
            candidates.append(self._last + wait)
        if len(self._times) >= self.per_hour:
            candidates.append(self._times[-self.per_hour] + self.window_s)
        return max(candidates)

    def allowed(self, now):
        when = self.next_allowed_at(now)
        return when is not None and when <= _time(now)

    def record(self, now):
        """A restart happened at now (whether or not allowed() said so)."""
        now = _time(now)
        self._normalise(now)
        self._run += 1
        self._last = now
        self._times.append(now)

    def explain(self, now):
        """One sentence for the log: may a restart happen now, else why not and when."""
        now = _time(now)
        when = self.next_allowed_at(now)
        if when is None:
            return 'restarts are disabled (per_hour 0)'
        if when <= now:
            return 'restart allowed (%d of %d in the last %s)' % (
                len(self._times), self.per_hour, _duration(self.window_s))
        if len(self._times) >= self.per_hour and self._times[-self.per_hour] + self.window_s >= when:
            return ('no restart: %d restarts in the last %s already, the cap; next in %s'
                    % (len(self._times), _duration(self.window_s), _duration(when - now)))
        return ('no restart: backing off %s after restart %d in a row; next in %s'
                % (_duration(self.backoff_s(now)), self._run, _duration(when - now)))


class RebootBudget(object):
    """Whether the host may be rebooted now: at most per_day reboots in a rolling window_s (a day).

    Over a JSON-serialisable state ({'version': 1, 'reboots': [{'at': unix
    time, 'reason': text}, ...]}) the daemon keeps in a file that survives
    reboots: pass time.time(). Load it with state=, save state() after every
    allowed() and record(): a reboot recorded under a clock that ran ahead is
    moved back to now when seen, so it counts from now on and expires a window
    later, rather than blocking reboots until the clock catches up. An
    unreadable state raises ValueError (the daemon's call: refuse to reboot).
    """

    STATE_VERSION = 1

    def __init__(self, per_day=1, state=None, window_s=86400.0):
        if isinstance(per_day, bool) or not isinstance(per_day, int) or per_day < 0:
            raise ValueError('per_day must be a whole number, 0 or more, not %r' % (per_day,))
        self.per_day = per_day
        self.window_s = _positive('window_s', window_s)
        self._reboots = []  # [(at, reason)], oldest first
        if state:
            self._load(state)

    def _load(self, state):
        if not isinstance(state, dict) or state.get('version', self.STATE_VERSION) != self.STATE_VERSION:
            raise ValueError('not a reboot state of version %d: %r' % (self.STATE_VERSION, state))
        reboots = state.get('reboots', [])
        if not isinstance(reboots, list):
            raise ValueError('reboot state: reboots must be a list, not %r' % (reboots,))
        for entry in reboots:
            if not isinstance(entry, dict) or 'at' not in entry:
                raise ValueError('reboot state: each reboot needs an "at" time, not %r' % (entry,))
            reason = entry.get('reason')
            if reason is not None and not isinstance(reason, str):
                raise ValueError('reboot state: a reason must be text, not %r' % (reason,))
            self._reboots.append((_time(entry['at']), reason))
        self._reboots.sort(key=lambda item: item[0])

    def _normalise(self, now):
        self._reboots = [(min(at, now), reason) for at, reason in self._reboots if min(at, now) > now - self.window_s]

    def state(self):
        return {'version': self.STATE_VERSION,
                'reboots': [{'at': at, 'reason': reason} for at, reason in self._reboots]}

    def count(self, now):
        """Reboots within the window before now."""
        now = _time(now)
        self._normalise(now)
        return len(self._reboots)

    def next_allowed_at(self, now):
        """The earliest time at or after now at which a reboot may happen; None: never (per_day 0)."""
        now = _time(now)
        if self.per_day == 0:
            return None
        self._normalise(now)
        if len(self._reboots) < self.per_day:
            return now
        return self._reboots[-self.per_day][0] + self.window_s

    def allowed(self, now):
        when = self.next_allowed_at(now)
        return when is not None and when <= _time(now)

    def record(self, now, reason=None):
        """A reboot is about to happen at now: save state() before rebooting."""
        now = _time(now)
        self._normalise(now)
        self._reboots.append((now, None if reason is None else str(reason)))

    def explain(self, now):
        now = _time(now)
        when = self.next_allowed_at(now)
        if when is None:
            return 'reboots are disabled (per_day 0)'
        if when <= now:
            return 'reboot allowed (%d of %d in the last %s)' % (
                len(self._reboots), self.per_day, _duration(self.window_s))
        return ('no reboot: %d in the last %s already, the cap; next in %s'
                % (len(self._reboots), _duration(self.window_s), _duration(when - now)))


# --- helpers ------------------------------------------------------------------

def _finite(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError('%s must be a number, not %r' % (name, value))
    value = float(value)
    if not math.isfinite(value):
        raise ValueError('%s must be a finite number, not %r' % (name, value))
    return value


def _non_negative(name, value):
    value = _finite(name, value)
    if value < 0:
        raise ValueError('%s must not be negative, not %r' % (name, value))
    return value


def _positive(name, value):
    value = _finite(name, value)
    if value <= 0:
        raise ValueError('%s must be above 0, not %r' % (name, value))
    return value


def _time(now):
    return _finite('now', now)


def _duration(seconds):
    seconds = int(math.ceil(seconds))
    if seconds < 120:
        return '%d s' % seconds
    if seconds < 7200:
        return '%d min' % int(math.ceil(seconds / 60.0))
    return '%.1f h' % (seconds / 3600.0)
