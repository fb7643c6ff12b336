# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""NVIDIA GPU facts read through NVML with nvidia-ml-py (module pynvml).

Private to this collection (leading underscore): the layout of the returned
records is the contract of the gpu_facts module, not of this file.

Every device query is isolated: an NVMLError (NOT_SUPPORTED on consumer
boards, FUNCTION_NOT_FOUND on older drivers, ...) leaves that one field None.
One NVML session per call: nvmlInit once, nvmlShutdown in a finally block.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import time
import traceback

try:
    import pynvml
except ImportError:
    pynvml = None
    HAS_PYNVML = False
    PYNVML_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_PYNVML = True
    PYNVML_IMPORT_ERROR = None


# Keys of every GPU record, NVIDIA and AMD alike (see gpu_facts RETURN).
GPU_KEYS = (
    'vendor', 'index', 'name', 'uuid', 'serial', 'pci_bus_id', 'architecture',
    'cuda_compute_capability',
    'memory_total_bytes', 'memory_used_bytes', 'memory_free_bytes', 'bar1_total_bytes',
    'pcie_link_gen_current', 'pcie_link_gen_max', 'pcie_link_gen_gpu_max',
    'pcie_link_width_current', 'pcie_link_width_max',
    'temperature_c', 'temperature_slowdown_c', 'temperature_shutdown_c',
    'power_draw_w', 'power_limit_w', 'power_limit_default_w', 'power_limit_min_w', 'power_limit_max_w',
    'persistence_mode', 'compute_mode', 'ecc_enabled', 'ecc_pending', 'mig_enabled', 'mig_pending',
    'clocks', 'throttle_reasons', 'throttle_reasons_mask',
)
CLOCK_KEYS = ('graphics_mhz', 'sm_mhz', 'memory_mhz', 'graphics_max_mhz', 'sm_max_mhz', 'memory_max_mhz')

# nvmlDeviceArchitecture_t
ARCHITECTURES = {
    2: 'kepler', 3: 'maxwell', 4: 'pascal', 5: 'volta', 6: 'turing',
    7: 'ampere', 8: 'ada', 9: 'hopper', 10: 'blackwell', 13: 'rubin',
}
# nvmlComputeMode_t
COMPUTE_MODES = {0: 'default', 1: 'exclusive_thread', 2: 'prohibited', 3: 'exclusive_process'}
# nvmlClocksEventReason* bits
THROTTLE_REASONS = (
    (0x001, 'gpu_idle'),
    (0x002, 'applications_clocks_setting'),
    (0x004, 'sw_power_cap'),
    (0x008, 'hw_slowdown'),
    (0x010, 'sync_boost'),
    (0x020, 'sw_thermal_slowdown'),
    (0x040, 'hw_thermal_slowdown'),
    (0x080, 'hw_power_brake_slowdown'),
    (0x100, 'display_clock_setting'),
)
# nvmlGpuTopologyLevel_t
TOPOLOGY_LEVELS = {0: 'internal', 10: 'single', 20: 'multiple', 30: 'hostbridge', 40: 'node', 50: 'system'}
# nvmlGpuP2PStatus_t
P2P_STATUSES = {
    0: 'ok', 1: 'chipset_not_supported', 2: 'gpu_not_supported', 3: 'iohtopology_not_supported',
    4: 'disabled_by_regkey', 5: 'not_supported', 6: 'unknown',
}
# nvmlGpuP2PCapsIndex_t. Plain ints on purpose: pynvml defines
# NVML_P2P_CAPS_INDEX_READ as the tuple (0,) (stray comma), which ctypes rejects.
P2P_CAPS = (('read', 0), ('write', 1), ('nvlink', 2), ('atomics', 3))

# Hints appended to "NVML could not initialise: <NVML's own words>."
_INIT_HINTS = {
    'NVML_ERROR_DRIVER_NOT_LOADED': (
        'The NVIDIA kernel module is not loaded: install the driver '
        '(homelab.llm_server.nvidia_driver) or reboot after installing it.'),
    'NVML_ERROR_LIBRARY_NOT_FOUND': (
        'libnvidia-ml.so.1 was not found, so the NVIDIA driver is not installed: '
        'install it (homelab.llm_server.nvidia_driver).'),
    'NVML_ERROR_NO_PERMISSION': (
        'The user running the module may not open /dev/nvidia*: run it with become: true.'),
    'NVML_ERROR_LIB_RM_VERSION_MISMATCH': (
        'The NVML library and the loaded kernel module come from different driver versions: '
        'reboot (or reload the nvidia kernel modules) after the driver upgrade.'),
    'NVML_ERROR_INSUFFICIENT_POWER': (
        'A GPU reports insufficient external power: check its power connectors.'),
    'NVML_ERROR_GPU_IS_LOST': (
        'A GPU fell off the bus: check dmesg for Xid errors, the slot and the riser, then reboot.'),
    'NVML_ERROR_IRQ_ISSUE': (
        'The driver sees interrupt problems: check dmesg and the PCIe slot, then reboot.'),
}

_BUS_ID_RE = re.compile(
    r'^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):'
    r'(?P<device>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])$')


def blank_gpu(vendor, index):
    """A GPU record with every key present and unknown values None."""
    gpu = dict.fromkeys(GPU_KEYS)
    gpu['vendor'] = vendor
    gpu['index'] = index
    gpu['clocks'] = dict.fromkeys(CLOCK_KEYS)
    return gpu


def normalise_pci_bus_id(value):
    """'00000000:01:00.0' (NVML) -> '0000:01:00.0' (sysfs form, lower case)."""
    text = _text(value)
    if not text:
        return None
    match = _BUS_ID_RE.match(text)
    if not match:
        return text.lower()
    return '%04x:%02x:%02x.%x' % (
        int(match.group('domain') or '0', 16), int(match.group('bus'), 16),
        int(match.group('device'), 16), int(match.group('function'), 16))


def format_cuda_version(value):
    """13000 -> '13.0', 12080 -> '12.8' (NVML encodes major * 1000 + minor * 10)."""
    if not isinstance(value, int) or value <= 0:
        return None
    return '%d.%d' % (value // 1000, (value % 1000) // 10)


def throttle_reason_names(mask):
    if mask is None:
        return None
    names = [name for bit, name in THROTTLE_REASONS if mask & bit]
    extra = mask & ~sum(bit for bit, _name in THROTTLE_REASONS)
    bit = 1
    while extra:
        if extra & bit:
            names.append('unknown_0x%x' % bit)
            extra &= ~bit
        bit <<= 1
    return names


def init_error_message(err):
    """A sentence a human can act on, from the NVMLError nvmlInit raised."""
    hint = None
    value = getattr(err, 'value', None)
    if pynvml is not None:
        for name, text in _INIT_HINTS.items():
            if value is not None and getattr(pynvml, name, object()) == value:
                hint = text
                break
    message = 'NVML could not initialise: %s.' % (str(err).rstrip('.') or type(err).__name__)
    if hint:
        message = '%s %s' % (message, hint)
    return message


def _text(value):
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode('utf-8', 'replace')
    value = str(value).strip().rstrip('\x00')
    return value or None


def _query(func, *args):
    """Call one NVML wrapper; any failure means "unknown" (None)."""
    try:
        return func(*args)
    except Exception:  # NVMLError, ctypes.ArgumentError, AttributeError on old pynvml
        return None


def _first(*calls):
    """The first non-None result of the given (func, args...) tuples."""
    for call in calls:
        func = getattr(pynvml, call[0], None)
        if func is None:
            continue
        value = _query(func, *call[1:])
        if value is not None:
            return value
    return None


def _watts(milliwatts):
    if milliwatts is None:
        return None
    return round(milliwatts / 1000.0, 3)


def _flag(value):
    if value is None:
        return None
    return bool(value)


def _memory_info(handle):
    version = getattr(pynvml, 'nvmlMemory_v2', None)
    if version is not None:
        mem = _query(pynvml.nvmlDeviceGetMemoryInfo, handle, version)
        if mem is not None:
            return mem
    return _query(pynvml.nvmlDeviceGetMemoryInfo, handle)


def read_device(handle, fallback_index):
    """The GPU record for one NVML device handle."""
    nv = pynvml
    gpu = blank_gpu('nvidia', fallback_index)
    index = _query(nv.nvmlDeviceGetIndex, handle)
    if index is not None:
        gpu['index'] = index

    gpu['name'] = _text(_query(nv.nvmlDeviceGetName, handle))
    gpu['uuid'] = _text(_query(nv.nvmlDeviceGetUUID, handle))
    gpu['serial'] = _text(_query(nv.nvmlDeviceGetSerial, handle))
    pci = _query(nv.nvmlDeviceGetPciInfo, handle)
    if pci is not None:
        gpu['pci_bus_id'] = normalise_pci_bus_id(_text(pci.busId) or _text(pci.busIdLegacy))
    gpu['architecture'] = ARCHITECTURES.get(_query(nv.nvmlDeviceGetArchitecture, handle))
    capability = _query(nv.nvmlDeviceGetCudaComputeCapability, handle)
    if capability:
        gpu['cuda_compute_capability'] = '%d.%d' % tuple(capability)

    mem = _memory_info(handle)
    if mem is not None:
        gpu['memory_total_bytes'] = mem.total
        gpu['memory_used_bytes'] = mem.used
        gpu['memory_free_bytes'] = mem.free
    bar1 = _query(nv.nvmlDeviceGetBAR1MemoryInfo, handle)
    if bar1 is not None:
        gpu['bar1_total_bytes'] = bar1.bar1Total

    gpu['pcie_link_gen_current'] = _query(nv.nvmlDeviceGetCurrPcieLinkGeneration, handle)
    gpu['pcie_link_gen_max'] = _query(nv.nvmlDeviceGetMaxPcieLinkGeneration, handle)
    gpu['pcie_link_gen_gpu_max'] = _first(('nvmlDeviceGetGpuMaxPcieLinkGeneration', handle))
    gpu['pcie_link_width_current'] = _query(nv.nvmlDeviceGetCurrPcieLinkWidth, handle)
    gpu['pcie_link_width_max'] = _query(nv.nvmlDeviceGetMaxPcieLinkWidth, handle)

    sensor = getattr(nv, 'NVML_TEMPERATURE_GPU', 0)
    gpu['temperature_c'] = _first(('nvmlDeviceGetTemperatureV', handle, sensor),
                                  ('nvmlDeviceGetTemperature', handle, sensor))
    gpu['temperature_slowdown_c'] = _query(nv.nvmlDeviceGetTemperatureThreshold, handle,
                                           nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
    gpu['temperature_shutdown_c'] = _query(nv.nvmlDeviceGetTemperatureThreshold, handle,
                                           nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)

    gpu['power_draw_w'] = _watts(_query(nv.nvmlDeviceGetPowerUsage, handle))
    gpu['power_limit_w'] = _watts(_first(('nvmlDeviceGetPowerManagementLimit', handle),
                                         ('nvmlDeviceGetEnforcedPowerLimit', handle)))
    gpu['power_limit_default_w'] = _watts(_query(nv.nvmlDeviceGetPowerManagementDefaultLimit, handle))
    constraints = _query(nv.nvmlDeviceGetPowerManagementLimitConstraints, handle)
    if constraints:
        gpu['power_limit_min_w'] = _watts(constraints[0])
        gpu['power_limit_max_w'] = _watts(constraints[1])

    gpu['persistence_mode'] = _flag(_query(nv.nvmlDeviceGetPersistenceMode, handle))
    mode = _query(nv.nvmlDeviceGetComputeMode, handle)
    gpu['compute_mode'] = COMPUTE_MODES.get(mode, None if mode is None else str(mode))
    ecc = _query(nv.nvmlDeviceGetEccMode, handle)
    if ecc:
        gpu['ecc_enabled'], gpu['ecc_pending'] = _flag(ecc[0]), _flag(ecc[1])
    mig = _first(('nvmlDeviceGetMigMode', handle))
    if mig:
        gpu['mig_enabled'], gpu['mig_pending'] = _flag(mig[0]), _flag(mig[1])

    clocks = gpu['clocks']
    for key, clock in (('graphics', nv.NVML_CLOCK_GRAPHICS), ('sm', nv.NVML_CLOCK_SM),
                       ('memory', nv.NVML_CLOCK_MEM)):
        clocks['%s_mhz' % key] = _query(nv.nvmlDeviceGetClockInfo, handle, clock)
        clocks['%s_max_mhz' % key] = _query(nv.nvmlDeviceGetMaxClockInfo, handle, clock)

    mask = _first(('nvmlDeviceGetCurrentClocksEventReasons', handle),
                  ('nvmlDeviceGetCurrentClocksThrottleReasons', handle))
    gpu['throttle_reasons_mask'] = mask
    gpu['throttle_reasons'] = throttle_reason_names(mask)
    return gpu


def read_topology(handles):
    """One entry per pair of NVIDIA GPUs: common PCIe ancestor and P2P support."""
    pairs = []
    for pos, (index_a, handle_a) in enumerate(handles):
        for index_b, handle_b in handles[pos + 1:]:
            level = _query(pynvml.nvmlDeviceGetTopologyCommonAncestor, handle_a, handle_b)
            p2p = {}
            for key, cap in P2P_CAPS:
                status = _query(pynvml.nvmlDeviceGetP2PStatus, handle_a, handle_b, cap)
                p2p[key] = None if status is None else P2P_STATUSES.get(status, 'unknown')
            pairs.append({
                'gpus': [index_a, index_b],
                'common_ancestor': None if level is None else TOPOLOGY_LEVELS.get(level, str(level)),
                'p2p': p2p,
            })
    return pairs


def _collect(result):
    nv = pynvml
    result['driver_version'] = _text(_query(nv.nvmlSystemGetDriverVersion))
    result['nvml_version'] = _text(_query(nv.nvmlSystemGetNVMLVersion))
    result['cuda_driver_version'] = format_cuda_version(
        _first(('nvmlSystemGetCudaDriverVersion_v2',), ('nvmlSystemGetCudaDriverVersion',)))
    try:
        count = nv.nvmlDeviceGetCount()
    except nv.NVMLError as err:
        result['error'] = 'NVML could not count the GPUs: %s.' % err
        return
    problems = []
    handles = []
    for position in range(count):
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(position)
        except nv.NVMLError as err:
            result['gpus'].append(blank_gpu('nvidia', position))
            problems.append('NVML could not open GPU %d: %s.' % (position, err))
            continue
        gpu = read_device(handle, position)
        result['gpus'].append(gpu)
        handles.append((gpu['index'], handle))
    result['gpus'].sort(key=lambda gpu: gpu['index'])
    handles.sort(key=lambda item: item[0])
    result['topology'] = read_topology(handles)
    if problems:
        result['error'] = ' '.join(problems)


def bindings_version():
    """Version of the installed nvidia-ml-py distribution, or None."""
    if pynvml is None:
        return None
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # Python < 3.8 on an old target
        return None
    try:
        return version('nvidia-ml-py')
    except PackageNotFoundError:
        return None


def collect_nvidia():
    """Everything NVML says, as a dict.

    Keys: gpus (list of records), driver_version, nvml_version,
    cuda_driver_version ('13.0'), topology (list), error (None or a sentence).
    Never raises.
    """
    result = {
        'gpus': [], 'driver_version': None, 'nvml_version': None,
        'cuda_driver_version': None, 'topology': [], 'error': None,
    }
    if pynvml is None:
        result['error'] = 'The Python library nvidia-ml-py (module pynvml) is not installed.'
        return result
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        result['error'] = init_error_message(err)
        return result
    except Exception as err:
        result['error'] = 'NVML could not initialise: %s' % (err,)
        return result
    try:
        _collect(result)
    except Exception as err:
        result['error'] = 'Unexpected error while reading NVML: %s: %s' % (type(err).__name__, err)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return result


# A call to a GPU that fell off the bus can sleep in the driver for good
# (uninterruptible: not even SIGKILL ends it before the driver lets go).
DEFAULT_TIMEOUT_S = 60.0


def collect_nvidia_within(timeout_s=DEFAULT_TIMEOUT_S):
    """collect_nvidia() in a child process, abandoned after TIMEOUT_S seconds.

    The caller (gpu_facts, so every play that reads the GPUs) never waits
    longer than that for a hung GPU: past the deadline the child is killed
    and left to the driver, and the result says so in 'error'. The host
    programs give their NVML calls deadlines the same way
    (llm_server_host.nvml_supervisor). Never raises.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: read, answer in JSON, exit without cleanup
        os.close(read_end)
        try:
            payload = json.dumps(collect_nvidia()).encode('utf-8')
            view = memoryview(payload)
            while view:
                view = view[os.write(write_end, view):]
        finally:
            os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + timeout_s
    chunks = []
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                break
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                os.waitpid(pid, 0)
                try:
                    return json.loads(b''.join(chunks).decode('utf-8'))
                except ValueError:
                    break  # the child died before it answered whole
            chunks.append(chunk)
    finally:
        os.close(read_end)
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, os.WNOHANG)  # a child stuck in the driver stays a zombie until it lets go
    except OSError:
        pass
    return {
        'gpus': [], 'driver_version': None, 'nvml_version': None, 'cuda_driver_version': None, 'topology': [],
        'error': 'NVML did not answer within %g s: a GPU may hang the driver (look for XID 79 in the kernel log); '
                 'the read was abandoned' % timeout_s,
    }
