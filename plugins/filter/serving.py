# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for the serving roles (vllm, llamacpp)."""

from __future__ import annotations

import base64
import posixpath

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.llm_server.plugins.module_utils import _registry
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


def registry_entry(instance):
    """The engine registry's entry of a serving instance (module_utils/_registry.py): what the serving role
    writes to NAME.json."""
    try:
        return _registry.entry(instance['name'], instance.get('engine', 'engine'), int(instance['port']),
                               instance['model_name'], standby=bool(instance.get('standby', False)),
                               gpus=[int(gpu) for gpu in instance.get('gpus') or []])
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError('registry_entry: %s' % exc) from exc


def registry_entries(slurped):
    """The entries of the engine registry from ansible.builtin.slurp's results (a loop over its files), each
    checked against the contract; stops naming the file and what is wrong with it."""
    entries, problems = [], []
    for result in slurped:
        path = result.get('source') or result.get('item', {}).get('path', '?')
        name = posixpath.basename(path)[:-len('.json')] if path.endswith('.json') else path
        try:
            text = base64.b64decode(result['content']).decode('utf-8')
        except (KeyError, ValueError) as exc:
            problems.append('%s: %s%s' % (path, _registry.UNREADABLE, exc))
            continue
        entry, broken = _registry.parse(text, name)
        if broken:
            problems.append('%s: %s' % (path, '; '.join(broken)))
            continue
        entries.append(entry)
    if problems:
        raise AnsibleFilterError('the engine registry breaks its contract (docs/architecture.md): %s; run the '
                                 'vllm or llamacpp role again to write it anew' % ' | '.join(problems))
    return entries


class FilterModule:
    """Serving filters."""

    def filters(self):
        return {'serving_instances': serving_instances, 'systemd_command_line': systemd_command_line,
                'registry_entry': registry_entry, 'registry_entries': registry_entries}
