# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that turn gpu_facts output into what people read."""

from __future__ import annotations

_GIB = 1024 ** 3
_MIB = 1024 ** 2


def _size(value, unit, digits=1):
    if value is None:
        return None
    return round(value / unit, digits) if digits else int(round(value / unit))


def gpu_summary(gpu):
    """Compact view of one GPU from gpu_facts: the figures that matter for serving."""
    return {
        'vendor': gpu.get('vendor'),
        'index': gpu.get('index'),
        'name': gpu.get('name'),
        'pci_bus_id': gpu.get('pci_bus_id'),
        'memory_total_gib': _size(gpu.get('memory_total_bytes'), _GIB),
        'bar1_total_mib': _size(gpu.get('bar1_total_bytes'), _MIB, 0),
        'pcie': _link(gpu),
        'power_limit_w': gpu.get('power_limit_w'),
        'temperature_c': gpu.get('temperature_c'),
    }


def _link(gpu):
    gen, width = gpu.get('pcie_link_gen_max'), gpu.get('pcie_link_width_current')
    gpu_gen, gpu_width = gpu.get('pcie_link_gen_gpu_max'), gpu.get('pcie_link_width_max')
    if gen is None or width is None:
        return None
    text = 'Gen%s x%s' % (gen, width)
    if gpu_gen and gpu_width and (gpu_gen, gpu_width) != (gen, width):
        text += ' (GPU supports Gen%s x%s)' % (gpu_gen, gpu_width)
    return text


def gpu_inventory_lines(gpus):
    """One aligned line per GPU, for play output and the demo."""
    if not gpus:
        return ['no GPU found']
    rows = [('GPU', 'vendor', 'name', 'bus id', 'VRAM', 'BAR1', 'PCIe (slot max)', 'power limit')]
    for gpu in gpus:
        summary = gpu_summary(gpu)
        rows.append((
            str(summary['index']),
            summary['vendor'] or '?',
            summary['name'] or '?',
            summary['pci_bus_id'] or '?',
            '%s GiB' % summary['memory_total_gib'] if summary['memory_total_gib'] is not None else '?',
            '%d MiB' % summary['bar1_total_mib'] if summary['bar1_total_mib'] is not None else '?',
            summary['pcie'] or '?',
            '%g W' % summary['power_limit_w'] if summary['power_limit_w'] is not None else '?',
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ['  '.join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


class FilterModule:
    """GPU presentation filters."""

    def filters(self):
        return {
            'gpu_summary': gpu_summary,
            'gpu_inventory_lines': gpu_inventory_lines,
        }
