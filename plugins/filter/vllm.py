# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for vLLM engine arguments: a dict checked against the real `vllm serve` CLI, rendered to argv."""

from __future__ import annotations

import os

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.llm_server.plugins.module_utils import _vllm_args

# data/vllm/cli-<version>.json, written by scripts/vllm_cli_table.py from the real parser.
TABLE_DIR = os.path.join(os.path.dirname(__file__), '..', '..', 'data', 'vllm')


def _table(filter_name, version):
    try:
        return _vllm_args.load_table(TABLE_DIR, version)
    except ValueError as exc:
        raise AnsibleFilterError('%s: %s' % (filter_name, exc)) from None


def _reserved(filter_name, reserved):
    if reserved is None or isinstance(reserved, (list, tuple, dict)):
        return reserved
    if isinstance(reserved, str):
        return [reserved]
    raise AnsibleFilterError('%s: reserved must be a list of option names or a dict of option name: the variable '
                             'to set instead, got %s' % (filter_name, type(reserved).__name__))


def vllm_engine_args(options, version=None, reserved=None):
    """The `vllm serve` argv for a dict of engine options; fails naming every bad key and its fix."""
    table = _table('vllm_engine_args', version)
    reserved = _reserved('vllm_engine_args', reserved)
    errors = _vllm_args.validate_engine_args(options, table, reserved)
    if errors:
        raise AnsibleFilterError('vllm_engine_args: %d problem%s with the engine arguments for vLLM %s:\n- %s'
                                 % (len(errors), '' if len(errors) == 1 else 's', table['vllm_version'],
                                    '\n- '.join(errors)))
    return _vllm_args.render_engine_args(options, table, reserved)


def vllm_engine_args_errors(options, version=None, reserved=None):
    """Every problem with a dict of engine options, one message each; empty when all is well."""
    table = _table('vllm_engine_args_errors', version)
    return _vllm_args.validate_engine_args(options, table, _reserved('vllm_engine_args_errors', reserved))


def vllm_engine_args_warnings(options, version=None, reserved=None):
    """Notes that do not stop rendering: deprecated flags, values outside the ones vLLM lists."""
    table = _table('vllm_engine_args_warnings', version)
    return _vllm_args.engine_args_warnings(options, table, _reserved('vllm_engine_args_warnings', reserved))


class FilterModule:
    """vLLM filters."""

    def filters(self):
        return {
            'vllm_engine_args': vllm_engine_args,
            'vllm_engine_args_errors': vllm_engine_args_errors,
            'vllm_engine_args_warnings': vllm_engine_args_warnings,
        }
