# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for the serving roles (vllm, llamacpp)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.llm_server.plugins.module_utils._serving import LayoutError
from ansible_collections.homelab.llm_server.plugins.module_utils._serving import serving_instances as _instances


def serving_instances(layout, devices, model=None, models=None, prefix='llm', port_base=8001, var_prefix='vllm'):
    """The engine instances of a layout (see module_utils/_serving.py)."""
    try:
        return _instances(layout, devices, model=model, models=models, prefix=prefix,
                          port_base=port_base, var_prefix=var_prefix)
    except LayoutError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def systemd_command_line(argv):
    """An argv list as one systemd Exec*= line: each word quoted, specifiers and variables escaped."""
    if not isinstance(argv, (list, tuple)) or not argv:
        raise AnsibleFilterError('systemd_command_line needs a non-empty list of words, not %r' % (argv,))
    words = []
    for word in argv:
        text = str(word).replace('\\', '\\\\').replace('"', '\\"').replace('%', '%%').replace('$', '$$')
        words.append('"%s"' % text if text == '' or any(c in text for c in ' \t"\'\\;') else text)
    return ' '.join(words)


class FilterModule:
    """Serving filters."""

    def filters(self):
        return {'serving_instances': serving_instances, 'systemd_command_line': systemd_command_line}
