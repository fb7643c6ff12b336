# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host/llm_server_host/gpu_families.py: build_families on hand-made snapshots (in process, no NVML).

Names, base units, series left out for missing fields, GPUs not read.
"""

from __future__ import annotations

from llm_server_host import gpu_families as _gpu_families
from llm_server_host.collection import _nvml


def _gpu(index=0, **facts_changes):
    facts = _nvml.blank_gpu('nvidia', index)
    facts.update(uuid='GPU-%d' % index, name='Test GPU', pci_bus_id='0000:0%d:00.0' % (index + 1),
                 architecture='blackwell', temperature_c=70, temperature_slowdown_c=95, temperature_shutdown_c=98,
                 power_draw_w=412.5, power_limit_w=600.0, memory_total_bytes=1000, memory_used_bytes=400,
                 memory_free_bytes=600, pcie_link_gen_current=5, pcie_link_gen_max=5, pcie_link_width_current=16,
                 throttle_reasons_mask=0x404)
    facts['clocks'].update(graphics_mhz=2617, memory_max_mhz=14001)
    facts.update(facts_changes)
    return {'facts': facts, 'extra': {'utilization_gpu_percent': 97, 'recovery_action': 1},
            'unavailable': {'ecc_errors': 'not_supported', 'pcie_replays': 'gpu_is_lost'}}


def _snapshot(**changes):
    snapshot = {'success': True, 'error': None, 'duration': 0.0123, 'gpus': [_gpu(0)], 'lost': [],
                'system': {'driver_version': '580.95.05'}, 'known_gpus': {0: {'index': 0, 'uuid': 'GPU-0',
                                                                              'name': 'Test GPU'}},
                'events': {0: None}, 'xids': {0: {'uuid': 'GPU-0', 'name': 'Test GPU', 'counts': {13: 0, 79: 2}}},
                'timeouts': 0, 'restarts': 0, 'stuck_workers': 0}
    snapshot.update(changes)
    return snapshot


def _samples(families):
    out = {}
    for family in families:
        for values, value in family.samples:
            out[(family.name,) + tuple(zip(family.labels, values))] = value
    return out


GPU0 = (('gpu', '0'), ('uuid', 'GPU-0'), ('name', 'Test GPU'))


def test_build_families_base_units_and_labels():
    families = _gpu_families.build_families(_snapshot())
    samples = _samples(families)
    assert all(f.name.startswith('llm_gpu_') for f in families)
    assert all(f.name.endswith('_total') == (f.kind == 'counter') for f in families)
    assert samples[('llm_gpu_temperature_celsius',) + GPU0] == 70
    assert samples[('llm_gpu_power_draw_watts',) + GPU0] == 412.5
    assert samples[('llm_gpu_utilization_ratio',) + GPU0] == 0.97
    assert samples[('llm_gpu_clock_hertz',) + GPU0 + (('clock', 'graphics'),)] == 2617000000
    assert samples[('llm_gpu_clock_max_hertz',) + GPU0 + (('clock', 'memory'),)] == 14001000000
    assert samples[('llm_gpu_memory_used_bytes',) + GPU0] == 400
    assert samples[('llm_gpu_recovery_action',) + GPU0] == 1
    assert samples[('llm_gpu_throttle_reason',) + GPU0 + (('reason', 'sw_power_cap'),)] == 1
    assert samples[('llm_gpu_throttle_reason',) + GPU0 + (('reason', 'gpu_idle'),)] == 0
    assert samples[('llm_gpu_throttle_reason',) + GPU0 + (('reason', 'unknown_0x400'),)] == 1
    assert samples[('llm_gpu_xid_errors_total',) + GPU0 + (('xid', '79'),)] == 2
    assert samples[('llm_gpu_xid_errors_total',) + GPU0 + (('xid', '13'),)] == 0
    assert samples[('llm_gpu_up',) + GPU0] == 1
    assert samples[('llm_gpu_info',) + GPU0 + (('pci_bus_id', '0000:01:00.0'), ('architecture', 'blackwell'),
                                               ('driver_version', '580.95.05'))] == 1
    assert samples[('llm_gpu_exporter_scrape_success',)] == 1
    assert samples[('llm_gpu_exporter_scrape_duration_seconds',)] == 0.0123


def test_build_families_leaves_missing_fields_out():
    samples = _samples(_gpu_families.build_families(_snapshot()))
    names = {key[0] for key in samples}
    # None in the record (power limit min/max, width max...) and unreadable extras: no series.
    for name in ('llm_gpu_power_limit_min_watts', 'llm_gpu_pcie_link_width_max', 'llm_gpu_ecc_errors_total',
                 'llm_gpu_pcie_replays_total', 'llm_gpu_remapped_rows', 'llm_gpu_memory_utilization_ratio'):
        assert name not in names
    assert samples[('llm_gpu_exporter_unsupported',) + GPU0 + (('field', 'ecc_errors'),)] == 1
    read_error = ('llm_gpu_exporter_read_errors',) + GPU0 + (('field', 'pcie_replays'), ('error', 'gpu_is_lost'))
    assert samples[read_error] == 1


def test_build_families_gpus_not_read_are_down():
    snapshot = _snapshot(success=False, gpus=[], known_gpus={0: {'index': 0, 'uuid': 'GPU-0', 'name': 'Test GPU'},
                                                             1: {'index': 1, 'uuid': 'GPU-1', 'name': 'Other'}},
                         lost=[{'index': 1, 'error': 'quarantined'}], events={0: None, 1: 'not_supported'})
    samples = _samples(_gpu_families.build_families(snapshot))
    assert samples[('llm_gpu_up',) + GPU0] == 0
    gpu1 = (('gpu', '1'), ('uuid', 'GPU-1'), ('name', 'Other'))
    assert samples[('llm_gpu_up',) + gpu1] == 0
    assert samples[('llm_gpu_exporter_read_errors',) + gpu1 + (('field', 'device'), ('error', 'quarantined'))] == 1
    assert samples[('llm_gpu_exporter_unsupported',) + gpu1 + (('field', 'xid_events'),)] == 1
    assert samples[('llm_gpu_exporter_scrape_success',)] == 0
    assert ('llm_gpu_temperature_celsius',) + GPU0 not in samples
