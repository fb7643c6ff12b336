# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the host programs' metrics textfiles share: Prometheus' text format.

Every textfile goes through Exposition (one HELP and TYPE line per family,
its samples after, label values escaped, numbers written one way) and
files.write_atomically. Not prometheus_client's write_to_textfile: the
VPS's programs run from a venv with no index to install it from, and these
files are written once a tick by short-lived programs, where a registry of
collectors buys nothing.
"""

from __future__ import annotations

import math


def label_value(text):
    """TEXT as a label value between double quotes: backslash, double quote and line feed escaped."""
    return str(text).replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n')


def labels(pairs):
    """'{name="value",...}' from a dict or (name, value) pairs, in their order; '' for none."""
    items = pairs.items() if isinstance(pairs, dict) else pairs
    inner = ','.join('%s="%s"' % (name, label_value(value)) for name, value in items)
    return '{%s}' % inner if inner else ''


def number(value):
    """A sample value: whole numbers without a fraction (30, not 30.0), others as Python writes them.

    True and False are 1 and 0; NaN and the infinities as the format spells them.
    """
    if isinstance(value, bool):
        return '1' if value else '0'
    if isinstance(value, int):
        return str(value)
    value = float(value)
    if math.isnan(value):
        return 'NaN'
    if math.isinf(value):
        return '+Inf' if value > 0 else '-Inf'
    if value.is_integer() and abs(value) < 1e15:
        return '%d' % value
    return repr(value)


class Exposition:
    """A textfile's text: family() per metric family, in the order given, then text()."""

    def __init__(self):
        self.lines = []

    def family(self, name, kind, help_text, samples):
        """SAMPLES: (labels as for labels(), value) pairs; a family without samples still says what it is."""
        self.lines.append('# HELP %s %s' % (name, help_text.replace('\\', '\\\\').replace('\n', '\\n')))
        self.lines.append('# TYPE %s %s' % (name, kind))
        for pairs, value in samples:
            self.lines.append('%s%s %s' % (name, labels(pairs), number(value)))
        return self

    def text(self):
        return '\n'.join(self.lines) + '\n'
