# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Capture a real machine's NVML answers as a fixture for the NVML test double.

Run on a host with an NVIDIA driver and nvidia-ml-py:

    python3 tests/doubles/nvml/capture_fixture.py --description "..." > my_host.json

Every query the double answers is asked of the real library; a query that
fails with NOT_SUPPORTED is left out (the double answers NOT_SUPPORTED for
absent keys), any other error is recorded in the device's `errors` map so
the double reproduces it. Serial numbers and UUIDs are kept unless
--anonymise is given.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

import pynvml

TOPOLOGY = {0: 'internal', 10: 'single', 20: 'multiple', 30: 'hostbridge', 40: 'node', 50: 'system'}
P2P = {0: 'ok', 1: 'chipset_not_supported', 2: 'gpu_not_supported', 3: 'iohtopology_not_supported',
       4: 'disabled_by_regkey', 5: 'not_supported', 6: 'unknown'}


class Recorder:
    """Runs NVML queries, keeping values and the errors that are not NOT_SUPPORTED."""

    def __init__(self):
        self.errors = {}

    def ask(self, symbol, func, *args):
        try:
            return func(*args)
        except pynvml.NVMLError as err:
            if err.value != pynvml.NVML_ERROR_NOT_SUPPORTED:
                self.errors[symbol] = int(err.value)
            return None


def text(value):
    return value.decode() if isinstance(value, bytes) else value


def prune(mapping):
    return {k: v for k, v in mapping.items() if v is not None}


def device_record(handle, anonymise):
    rec = Recorder()
    ask = rec.ask
    uuid = text(ask('nvmlDeviceGetUUID', pynvml.nvmlDeviceGetUUID, handle))
    serial = text(ask('nvmlDeviceGetSerial', pynvml.nvmlDeviceGetSerial, handle))
    if anonymise:
        digest = hashlib.sha256((uuid or '').encode()).hexdigest()
        uuid = 'GPU-%s-%s-%s-%s-%s' % (digest[:8], digest[8:12], digest[12:16], digest[16:20], digest[20:32])
        serial = serial and '0' * len(serial)
    pci = ask('nvmlDeviceGetPciInfo', pynvml.nvmlDeviceGetPciInfo, handle)
    mem = ask('nvmlDeviceGetMemoryInfo_v2', pynvml.nvmlDeviceGetMemoryInfo, handle, pynvml.nvmlMemory_v2)
    bar1 = ask('nvmlDeviceGetBAR1MemoryInfo', pynvml.nvmlDeviceGetBAR1MemoryInfo, handle)
    cc = ask('nvmlDeviceGetCudaComputeCapability', pynvml.nvmlDeviceGetCudaComputeCapability, handle)
    constraints = ask('nvmlDeviceGetPowerManagementLimitConstraints',
                      pynvml.nvmlDeviceGetPowerManagementLimitConstraints, handle)
    ecc = ask('nvmlDeviceGetEccMode', pynvml.nvmlDeviceGetEccMode, handle)
    mig = ask('nvmlDeviceGetMigMode', pynvml.nvmlDeviceGetMigMode, handle)
    reasons = ask('nvmlDeviceGetCurrentClocksEventReasons', pynvml.nvmlDeviceGetCurrentClocksEventReasons, handle)
    # What llm-gpu-exporter reads besides gpu_facts' fields.
    util = ask('nvmlDeviceGetUtilizationRates', pynvml.nvmlDeviceGetUtilizationRates, handle)
    ecc_errors = {kind: prune({counter: ask('nvmlDeviceGetTotalEccErrors', pynvml.nvmlDeviceGetTotalEccErrors,
                                            handle, error_type, counter_type)
                               for counter, counter_type in (('volatile', 0), ('aggregate', 1))})
                  for kind, error_type in (('corrected', 0), ('uncorrected', 1))}
    rows = ask('nvmlDeviceGetRemappedRows', pynvml.nvmlDeviceGetRemappedRows, handle)
    events = ask('nvmlDeviceGetSupportedEventTypes', pynvml.nvmlDeviceGetSupportedEventTypes, handle)
    fields = ask('nvmlDeviceGetFieldValues', pynvml.nvmlDeviceGetFieldValues, handle,
                 [pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])
    field_values = {}
    if fields is not None and fields[0].nvmlReturn == 0:
        field_values['NVML_FI_DEV_GET_GPU_RECOVERY_ACTION'] = fields[0].value.uiVal
    elif fields is not None and fields[0].nvmlReturn != pynvml.NVML_ERROR_NOT_SUPPORTED:
        field_values['NVML_FI_DEV_GET_GPU_RECOVERY_ACTION'] = int(fields[0].nvmlReturn)
    device = {
        'name': text(ask('nvmlDeviceGetName', pynvml.nvmlDeviceGetName, handle)),
        'uuid': uuid,
        'serial': serial,
        'architecture': ask('nvmlDeviceGetArchitecture', pynvml.nvmlDeviceGetArchitecture, handle),
        'cuda_compute_capability': list(cc) if cc else None,
        'pci': pci and {
            'bus_id': text(pci.busId), 'domain': pci.domain, 'bus': pci.bus, 'device': pci.device,
            'pci_device_id': '0x%08X' % pci.pciDeviceId, 'pci_subsystem_id': '0x%08X' % pci.pciSubSystemId,
        },
        'memory': mem and {'total': mem.total, 'reserved': mem.reserved, 'used': mem.used, 'free': mem.free},
        'bar1': bar1 and {'total': bar1.bar1Total, 'used': bar1.bar1Used, 'free': bar1.bar1Free},
        'pcie': prune({
            'gen_current': ask('nvmlDeviceGetCurrPcieLinkGeneration', pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
            'gen_max': ask('nvmlDeviceGetMaxPcieLinkGeneration', pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
            'gen_gpu_max': ask('nvmlDeviceGetGpuMaxPcieLinkGeneration', pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration, handle),
            'width_current': ask('nvmlDeviceGetCurrPcieLinkWidth', pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
            'width_max': ask('nvmlDeviceGetMaxPcieLinkWidth', pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
            'replay_counter': ask('nvmlDeviceGetPcieReplayCounter', pynvml.nvmlDeviceGetPcieReplayCounter, handle),
        }),
        'temperature': prune({
            'gpu': ask('nvmlDeviceGetTemperature', pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
            'shutdown': ask('nvmlDeviceGetTemperatureThreshold', pynvml.nvmlDeviceGetTemperatureThreshold, handle, 0),
            'slowdown': ask('nvmlDeviceGetTemperatureThreshold', pynvml.nvmlDeviceGetTemperatureThreshold, handle, 1),
            'mem_max': ask('nvmlDeviceGetTemperatureThreshold', pynvml.nvmlDeviceGetTemperatureThreshold, handle, 2),
            'gpu_max': ask('nvmlDeviceGetTemperatureThreshold', pynvml.nvmlDeviceGetTemperatureThreshold, handle, 3),
        }),
        'power': prune({
            'usage_mw': ask('nvmlDeviceGetPowerUsage', pynvml.nvmlDeviceGetPowerUsage, handle),
            'limit_mw': ask('nvmlDeviceGetPowerManagementLimit', pynvml.nvmlDeviceGetPowerManagementLimit, handle),
            'default_limit_mw': ask('nvmlDeviceGetPowerManagementDefaultLimit',
                                    pynvml.nvmlDeviceGetPowerManagementDefaultLimit, handle),
            'min_limit_mw': constraints[0] if constraints else None,
            'max_limit_mw': constraints[1] if constraints else None,
            'enforced_limit_mw': ask('nvmlDeviceGetEnforcedPowerLimit', pynvml.nvmlDeviceGetEnforcedPowerLimit, handle),
        }),
        'persistence_mode': ask('nvmlDeviceGetPersistenceMode', pynvml.nvmlDeviceGetPersistenceMode, handle),
        'compute_mode': ask('nvmlDeviceGetComputeMode', pynvml.nvmlDeviceGetComputeMode, handle),
        'ecc': ecc and {'current': ecc[0], 'pending': ecc[1]},
        'mig': mig and {'current': mig[0], 'pending': mig[1]},
        'clocks': prune(dict(
            [(name, ask('nvmlDeviceGetClockInfo', pynvml.nvmlDeviceGetClockInfo, handle, i))
             for i, name in enumerate(('graphics', 'sm', 'mem', 'video'))]
            + [('max_' + name, ask('nvmlDeviceGetMaxClockInfo', pynvml.nvmlDeviceGetMaxClockInfo, handle, i))
               for i, name in enumerate(('graphics', 'sm', 'mem', 'video'))])),
        'clocks_event_reasons': None if reasons is None else '0x%X' % reasons,
        'utilization': util and {'gpu': util.gpu, 'memory': util.memory},
        'ecc_errors': {kind: counts for kind, counts in ecc_errors.items() if counts} or None,
        'remapped_rows': rows and {'correctable': rows[0], 'uncorrectable': rows[1],
                                   'pending': bool(rows[2]), 'failure': bool(rows[3])},
        'supported_events': None if events is None else '0x%X' % events,
        'field_values': field_values or None,
    }
    device = prune(device)
    device['errors'] = rec.errors
    return device


def capture(description, anonymise):
    pynvml.nvmlInit()
    try:
        rec = Recorder()
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        topology = []
        for a in range(count):
            for b in range(a + 1, count):
                link = Recorder()
                level = link.ask('nvmlDeviceGetTopologyCommonAncestor',
                                 pynvml.nvmlDeviceGetTopologyCommonAncestor, handles[a], handles[b])
                p2p = {name: P2P.get(link.ask('nvmlDeviceGetP2PStatus', pynvml.nvmlDeviceGetP2PStatus,
                                              handles[a], handles[b], idx), 'not_supported')
                       for idx, name in enumerate(('read', 'write', 'nvlink', 'atomics', 'prop'))}
                topology.append(prune({'gpus': [a, b], 'common_ancestor': TOPOLOGY.get(level),
                                       'p2p': p2p, 'errors': link.errors}))
        return {
            'description': description,
            'init_error': None,
            'driver_version': text(rec.ask('nvmlSystemGetDriverVersion', pynvml.nvmlSystemGetDriverVersion)),
            'nvml_version': text(rec.ask('nvmlSystemGetNVMLVersion', pynvml.nvmlSystemGetNVMLVersion)),
            'cuda_driver_version': rec.ask('nvmlSystemGetCudaDriverVersion', pynvml.nvmlSystemGetCudaDriverVersion),
            'devices': [device_record(h, anonymise) for h in handles],
            'topology': topology,
            'errors': rec.errors,
        }
    finally:
        pynvml.nvmlShutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--description', default='Captured from a real host with capture_fixture.py')
    parser.add_argument('--anonymise', action='store_true', help='replace UUIDs and serial numbers')
    opts = parser.parse_args()
    json.dump(capture(opts.description, opts.anonymise), sys.stdout, indent=2)
    sys.stdout.write('\n')


if __name__ == '__main__':
    main()
