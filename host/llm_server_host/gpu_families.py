# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Prometheus exposition of an NVML snapshot: llm-gpu-exporter's metric families.

build_families turns what nvml_supervisor.Supervisor.scrape() returns into
Family objects, plain data (pure: no NVML call, no prometheus_client): gpu_exporter.py
hands them to prometheus_client. Every value gpu_facts also reports arrives
as gpu_facts' own record (nvml_worker.read_gpu) and is only turned into base
units here (MHz -> Hz, percent -> ratio). A field the GPU did not give has no
series of its own: llm_gpu_exporter_unsupported or
llm_gpu_exporter_read_errors names it instead.
"""

from __future__ import annotations

from llm_server_host import nvml_worker as _nvml_worker
from llm_server_host.collection import _nvml

PREFIX = 'llm_gpu_'

# nvmlDeviceGpuRecoveryAction_t
RECOVERY_ACTIONS = {
    0: 'none', 1: 'gpu_reset', 2: 'node_reboot', 3: 'drain_p2p', 4: 'drain_and_reset',
    5: 'recover_imex_domain', 6: 'bus_reset', 7: 'system_reboot',
}
CLOCKS = ('graphics', 'sm', 'memory')
GPU_LABELS = ('gpu', 'uuid', 'name')


class Family(object):
    """A metric family as plain data: the exporter turns it into prometheus_client's."""

    __slots__ = ('name', 'kind', 'help', 'labels', 'samples')

    def __init__(self, name, kind, help_text, labels=GPU_LABELS):
        self.name = name
        self.kind = kind
        self.help = help_text
        self.labels = tuple(labels)
        self.samples = []

    def add(self, label_values, value):
        self.samples.append((tuple('' if v is None else str(v) for v in label_values), value))

    def __repr__(self):
        return 'Family(%r, %d samples)' % (self.name, len(self.samples))


class _Families(object):
    def __init__(self):
        self._by_name = {}
        self.order = []

    def get(self, name, kind, help_text, extra_labels=()):
        family = self._by_name.get(name)
        if family is None:
            family = Family(name, kind, help_text, GPU_LABELS + tuple(extra_labels))
            self._by_name[name] = family
            self.order.append(family)
        return family


# (metric, help, getter(facts, extra), scale): facts is the gpu_facts record (nvml_worker.FACT_FIELDS),
# extra what nvml_worker.read_extra read.
_GAUGES = (
    ('temperature_celsius', 'GPU core temperature.',
     lambda f, e: f['temperature_c'], 1),
    ('temperature_slowdown_celsius', 'Temperature at which the GPU slows its clocks down (NVML slowdown threshold).',
     lambda f, e: f['temperature_slowdown_c'], 1),
    ('temperature_shutdown_celsius', 'Temperature at which the GPU shuts down (NVML shutdown threshold).',
     lambda f, e: f['temperature_shutdown_c'], 1),
    ('power_draw_watts', 'Power the board draws.', lambda f, e: f['power_draw_w'], 1),
    ('power_limit_watts', 'Power limit in force (power management limit).', lambda f, e: f['power_limit_w'], 1),
    ('power_limit_default_watts', 'Power limit the board ships with.', lambda f, e: f['power_limit_default_w'], 1),
    ('power_limit_min_watts', 'Lowest power limit that can be set.', lambda f, e: f['power_limit_min_w'], 1),
    ('power_limit_max_watts', 'Highest power limit that can be set.', lambda f, e: f['power_limit_max_w'], 1),
    ('utilization_ratio', 'Fraction of the last sample period in which a kernel ran on the GPU (0-1).',
     lambda f, e: e.get('utilization_gpu_percent'), 0.01),
    ('memory_utilization_ratio', 'Fraction of the last sample period in which device memory was read or written (0-1).',
     lambda f, e: e.get('utilization_memory_percent'), 0.01),
    ('memory_total_bytes', 'Device memory in total.', lambda f, e: f['memory_total_bytes'], 1),
    ('memory_used_bytes', 'Device memory allocated.', lambda f, e: f['memory_used_bytes'], 1),
    ('memory_free_bytes', 'Device memory free.', lambda f, e: f['memory_free_bytes'], 1),
    ('pcie_link_generation', 'PCIe generation the link runs at now (GPUs drop it at idle).',
     lambda f, e: f['pcie_link_gen_current'], 1),
    ('pcie_link_generation_max', 'Highest PCIe generation the GPU and its slot can both run.',
     lambda f, e: f['pcie_link_gen_max'], 1),
    ('pcie_link_generation_gpu_max', 'Highest PCIe generation the GPU supports.',
     lambda f, e: f['pcie_link_gen_gpu_max'], 1),
    ('pcie_link_width', 'PCIe lanes the link runs with now.', lambda f, e: f['pcie_link_width_current'], 1),
    ('pcie_link_width_max', 'Most PCIe lanes the GPU and its slot can both run.',
     lambda f, e: f['pcie_link_width_max'], 1),
    ('ecc_enabled', '1 when ECC is enabled on the device memory.', lambda f, e: f['ecc_enabled'], 1),
    ('persistence_mode', '1 when persistence mode is on.', lambda f, e: f['persistence_mode'], 1),
    ('remapped_rows_pending', '1 when a remapped row waits for a GPU reset to take effect.',
     lambda f, e: e.get('remapped_rows_pending'), 1),
    ('remapped_rows_failure', '1 when a row remapping failed (a hardware-return criterion).',
     lambda f, e: e.get('remapped_rows_failure'), 1),
    ('recovery_action', "The driver's recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION): %s." % ', '.join(
        '%d %s' % item for item in sorted(RECOVERY_ACTIONS.items())),
     lambda f, e: e.get('recovery_action'), 1),
)


def _number(value, scale=1):
    if isinstance(value, bool):
        value = int(value)
    if scale == 1:
        return value
    return round(value * scale, 6)


def _gpu_families(families, message):
    facts, extra = message['facts'], message['extra']
    labels = (facts['index'], facts['uuid'], facts['name'])
    for suffix, help_text, getter, scale in _GAUGES:
        value = getter(facts, extra)
        if value is not None:
            families.get(PREFIX + suffix, 'gauge', help_text).add(labels, _number(value, scale))
    clocks = facts.get('clocks') or {}
    for clock in CLOCKS:
        for key, name, help_text in (
                ('%s_mhz' % clock, 'clock_hertz', 'Clock frequency now.'),
                ('%s_max_mhz' % clock, 'clock_max_hertz', 'Highest clock frequency the GPU runs this clock at.')):
            if clocks.get(key) is not None:
                families.get(PREFIX + name, 'gauge', help_text, ('clock',)).add(
                    labels + (clock,), clocks[key] * 1000000)
    mask = facts.get('throttle_reasons_mask')
    if mask is not None:
        family = families.get(PREFIX + 'throttle_reason', 'gauge',
                              '1 while this reason holds the clocks down (NVML clocks event reasons).', ('reason',))
        known = 0
        for bit, reason in _nvml.THROTTLE_REASONS:
            family.add(labels + (reason,), 1 if mask & bit else 0)
            known |= bit
        for reason in _nvml.throttle_reason_names(mask & ~known) or ():
            family.add(labels + (reason,), 1)
    for name, prefix, help_text in (
            ('ecc_errors_total', 'ecc_errors', 'ECC errors since the driver loaded (volatile count).'),
            ('ecc_errors_aggregate_total', 'ecc_errors_aggregate', 'ECC errors over the life of the board (aggregate count).')):
        for kind in ('corrected', 'uncorrected'):
            value = extra.get('%s_%s' % (prefix, kind))
            if value is not None:
                families.get(PREFIX + name, 'counter', help_text, ('error_type',)).add(labels + (kind,), value)
    for kind in ('correctable', 'uncorrectable'):
        value = extra.get('remapped_rows_%s' % kind)
        if value is not None:
            families.get(PREFIX + 'remapped_rows', 'gauge',
                         'Memory rows remapped, by the kind of error that caused it.', ('cause',)).add(
                labels + (kind,), value)
    if extra.get('pcie_replay_counter') is not None:
        families.get(PREFIX + 'pcie_replays_total', 'counter',
                     'PCIe replays (link-level retransmissions) since the driver loaded.').add(
            labels, extra['pcie_replay_counter'])


def build_families(snapshot):
    """The metric families of one scrape, from Supervisor.scrape()'s snapshot (pure)."""
    families = _Families()
    up = families.get(PREFIX + 'up', 'gauge', '1 when this scrape read the GPU through NVML, 0 when it did not answer.')
    info = families.get(PREFIX + 'info', 'gauge', 'The GPU and its driver; always 1.',
                        ('pci_bus_id', 'architecture', 'driver_version'))
    unsupported = families.get(
        'llm_gpu_exporter_unsupported', 'gauge',
        '1 for each field the GPU, driver or binding does not offer (NVML answered not supported): its series is left out.',
        ('field',))
    read_errors = families.get(
        'llm_gpu_exporter_read_errors', 'gauge',
        '1 for each field NVML failed to read in this scrape, by NVML error: its series is left out.',
        ('field', 'error'))
    system = snapshot.get('system') or {}
    read = set()
    for message in sorted(snapshot.get('gpus') or (), key=lambda m: m['facts']['index']):
        facts = message['facts']
        labels = (facts['index'], facts['uuid'], facts['name'])
        read.add(facts['index'])
        up.add(labels, 1)
        info.add(labels + (facts.get('pci_bus_id'), facts.get('architecture'), system.get('driver_version')), 1)
        _gpu_families(families, message)
        for field, error in sorted(message.get('unavailable', {}).items()):
            if error in _nvml_worker.UNSUPPORTED:
                unsupported.add(labels + (field,), 1)
            else:
                read_errors.add(labels + (field, error), 1)
    events = snapshot.get('events') or {}
    for index, error in sorted(events.items(), key=lambda item: (item[0] is None, item[0])):
        identity = (snapshot.get('known_gpus') or {}).get(index) or {}
        labels = (index, identity.get('uuid'), identity.get('name'))
        if error in _nvml_worker.UNSUPPORTED:
            unsupported.add(labels + ('xid_events',), 1)
        elif error is not None:
            read_errors.add(labels + ('xid_events', error), 1)
    known = dict(snapshot.get('known_gpus') or {})
    for lost in snapshot.get('lost') or ():
        identity = known.setdefault(lost['index'], {'index': lost['index'], 'uuid': None, 'name': None})
        read_errors.add((lost['index'], identity.get('uuid'), identity.get('name'), 'device', lost['error']), 1)
    for index in sorted(i for i in known if i not in read):
        identity = known[index]
        up.add((index, identity.get('uuid'), identity.get('name')), 0)
    xid = families.get(PREFIX + 'xid_errors_total', 'counter',
                       'XID errors the driver reported for the GPU (NVML XID events), by XID.', ('xid',))
    for index, entry in sorted((snapshot.get('xids') or {}).items(), key=lambda item: (item[0] is None, item[0])):
        for number, count in sorted(entry['counts'].items()):
            xid.add((index if index is not None else 'unknown', entry.get('uuid'), entry.get('name'), number), count)
    exporter = (
        ('llm_gpu_exporter_scrape_success', 'gauge',
         '1 when every GPU was read within the deadline, 0 when NVML failed or did not answer in time.',
         1 if snapshot.get('success') else 0),
        ('llm_gpu_exporter_scrape_duration_seconds', 'gauge', 'Time this scrape took to read NVML.',
         round(snapshot.get('duration') or 0.0, 6)),
        ('llm_gpu_exporter_scrape_timeouts_total', 'counter',
         'Scrapes in which NVML did not answer within the deadline (the worker was killed and replaced).',
         snapshot.get('timeouts', 0)),
        ('llm_gpu_exporter_worker_restarts_total', 'counter', 'NVML worker processes started after the first.',
         snapshot.get('restarts', 0)),
        ('llm_gpu_exporter_probe_failures_total', 'counter',
         'Tries of a GPU left alone after a hang (a probe process of their own) that hung or failed again.',
         snapshot.get('probe_failures', 0)),
        ('llm_gpu_exporter_stuck_workers', 'gauge',
         'NVML workers and probes killed after a timeout that have not exited yet (stuck in the driver).',
         snapshot.get('stuck_workers', 0)),
    )
    result = [family for family in families.order if family.samples]
    for name, kind, help_text, value in exporter:
        family = Family(name, kind, help_text, ())
        family.add((), value)
        result.append(family)
    return result
