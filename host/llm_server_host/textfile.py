# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the host programs' metrics textfiles share: Prometheus' text format, label values escaped."""

from __future__ import annotations


def label_value(text):
    """TEXT as a label value between double quotes: backslash, double quote and line feed escaped."""
    return str(text).replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n')
