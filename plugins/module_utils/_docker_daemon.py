# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Merge settings into Docker's daemon.json without clobbering what the user set there.

The existing file is parsed, the wanted settings are deep-merged into it
(objects merge key by key, anything else is replaced), and the result is
written back only when it differs from what the file says, as JSON with
sorted keys so that the same settings always give the same bytes.
"""

from __future__ import annotations

import json

# Options dockerd refuses in daemon.json when the unit already passes them as
# flags (docker.service runs `dockerd -H fd://` on Debian and Ubuntu).
_FLAG_CONFLICTS = {
    'hosts': 'docker.service already passes -H fd://, and dockerd refuses to start when hosts is '
             'given both ways; set the listen addresses in a systemd drop-in for docker.service instead',
}


class DaemonConfigError(Exception):
    """A problem with the existing file or the wanted settings, worded for the user."""


def parse_config(text, path):
    """The JSON object in ``text`` (the content of ``path``); an empty file is an empty object."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DaemonConfigError(
            '%s is not valid JSON (%s), so dockerd cannot start with it either. Fix the file (check it '
            'with `python3 -m json.tool %s`) or move it away; its settings are merged with the wanted ones, '
            'never replaced' % (path, exc, path))
    if not isinstance(data, dict):
        raise DaemonConfigError(
            '%s holds a JSON %s, but dockerd expects an object ({"key": value, ...}). Fix the file or move '
            'it away' % (path, type(data).__name__ if not isinstance(data, list) else 'array'))
    return data


def validate_settings(settings, name='settings'):
    """Problems with ``settings`` that dockerd would only report by failing to start."""
    if not isinstance(settings, dict):
        return ['%s must be a dict of daemon.json keys, got %s' % (name, type(settings).__name__)]
    errors = []
    for key in sorted(settings, key=str):
        if key in _FLAG_CONFLICTS:
            errors.append('%s sets %s: %s' % (name, key, _FLAG_CONFLICTS[key]))
    log_opts = settings.get('log-opts')
    if log_opts is not None:
        if not isinstance(log_opts, dict):
            errors.append('%s: log-opts must be a dict, got %s' % (name, type(log_opts).__name__))
        else:
            wrong = sorted(k for k, v in log_opts.items() if not isinstance(v, str))
            if wrong:
                errors.append('%s: log-opts values must be strings (dockerd refuses to start otherwise); '
                              'quote %s, for example max-file: "5"' % (name, ', '.join(wrong)))
    runtimes = settings.get('runtimes')
    if runtimes is not None:
        if not isinstance(runtimes, dict):
            errors.append('%s: runtimes must be a dict of runtime name to {path: ...}, got %s'
                          % (name, type(runtimes).__name__))
        else:
            for runtime, spec in sorted(runtimes.items()):
                if not isinstance(spec, dict) or not isinstance(spec.get('path'), str) or not spec['path']:
                    errors.append('%s: runtimes.%s must be a dict with a path to the runtime binary'
                                  % (name, runtime))
    try:
        json.dumps(settings)
    except (TypeError, ValueError) as exc:
        errors.append('%s cannot be written as JSON: %s' % (name, exc))
    return errors


def deep_merge(base, overlay):
    """A new dict: ``base`` with ``overlay`` merged in; nested dicts merge, other values are replaced."""
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def unset_matching(config, unset):
    """A new dict without the top-level keys of ``unset`` whose value in ``config`` equals the given one."""
    return {k: v for k, v in config.items() if not (k in unset and unset[k] == v)}


def changed_keys(before, after, prefix=''):
    """Dotted paths of the keys that differ between two configs, sorted."""
    paths = []
    for key in sorted(set(before) | set(after), key=str):
        path = '%s%s' % (prefix, key)
        old, new = before.get(key), after.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            paths.extend(changed_keys(old, new, path + '.'))
        elif key not in before or key not in after or old != new:
            paths.append(path)
    return paths


def render(config):
    """The file content for ``config``: two-space indented JSON, sorted keys, final newline."""
    return json.dumps(config, indent=2, sort_keys=True) + '\n'


def plan(existing_text, settings, path, unset=None):
    """What to do with the file at ``path`` holding ``existing_text`` (None: no file).

    Returns a dict: changed, config (the merged settings), changed_keys,
    before and after (texts for a diff; after is None when nothing changes).
    Raises DaemonConfigError for an unreadable file or wrong settings.
    """
    errors = validate_settings(settings)
    if unset is not None and not isinstance(unset, dict):
        errors.append('unset must be a dict of top-level key to value')
    if errors:
        raise DaemonConfigError('; '.join(errors))
    current = parse_config(existing_text, path)
    wanted = unset_matching(deep_merge(current, settings), unset or {})
    # Compare the parsed settings, not the text: a file the user formatted
    # differently but that says the same is left alone. Canonical JSON tells
    # true from 1, which Python's == does not.
    changed = existing_text is None or render(wanted) != render(current)
    return {
        'changed': changed,
        'config': wanted,
        'changed_keys': changed_keys(current, wanted),
        'before': existing_text if existing_text is not None else '',
        'after': render(wanted) if changed else None,
    }
