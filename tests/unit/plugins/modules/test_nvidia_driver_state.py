# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run plugins/modules/nvidia_driver_state.py as a subprocess, the way Ansible runs a module."""

from __future__ import annotations

import os

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
MODULE = os.path.join(REPO, 'plugins', 'modules', 'nvidia_driver_state.py')
TREES = os.path.join(REPO, 'tests', 'sysfs', 'driver')


@pytest.fixture
def run_module(module_runner):
    return lambda args, **kwargs: module_runner('nvidia_driver_state', args, **kwargs)


def tree_args(case, **extra):
    base = os.path.join(TREES, case)
    args = {
        'sysfs_root': os.path.join(base, 'sys'),
        'procfs_root': os.path.join(base, 'proc'),
        'modules_root': os.path.join(base, 'lib', 'modules'),
        'dpkg_status': os.path.join(base, 'var', 'lib', 'dpkg', 'status'),
        'mok_certificate': os.path.join(base, 'var', 'lib', 'dkms', 'mok.pub'),
    }
    args.update(extra)
    return args


@pytest.mark.parametrize('case, secure_boot, mok_state, reasons, mismatch', [
    ('sb_off', 'disabled', 'not_needed', [], False),
    ('sb_on_not_enrolled', 'enabled', 'not_enrolled', [], False),
    ('sb_on_enrolled', 'enabled', 'enrolled', [], False),
    ('sb_on_pending', 'enabled', 'pending_enrollment', ['driver_not_loaded', 'mok_enrollment_pending'], False),
    ('mismatch', 'disabled', 'not_needed', ['version_mismatch'], True),
    ('nouveau_loaded', 'not_uefi', 'not_needed', ['driver_not_loaded', 'nouveau_loaded'], False),
    ('not_loaded', 'disabled', 'not_needed', ['driver_not_loaded'], False),
])
def test_cases(run_module, case, secure_boot, mok_state, reasons, mismatch):
    rc, result = run_module(tree_args(case))
    assert rc == 0, result
    assert result['changed'] is False
    assert result['secure_boot'] == secure_boot
    assert result['mok_state'] == mok_state
    assert result['reboot_reason_ids'] == reasons
    assert result['reboot_required'] is bool(reasons)
    assert len(result['reboot_reasons']) == len(reasons)
    assert result['mismatch'] is mismatch
    assert result['kernel_release'] == '6.1.0-28-amd64'
    assert all(isinstance(m, str) and m.endswith('.') for m in result['messages'])


def test_check_mode_reads_the_same(run_module):
    rc, result = run_module(tree_args('mismatch'), check_mode=True)
    assert rc == 0 and result['changed'] is False and result['mismatch'] is True


def test_kernel_release_option(run_module):
    rc, result = run_module(tree_args('not_loaded', kernel_release='6.1.0-30-amd64'))
    assert rc == 0
    assert result['kernel_release'] == '6.1.0-30-amd64'
    assert result['dkms_module']['present'] is False
    assert result['kernel_headers_package'] == 'linux-headers-6.1.0-30-amd64'
    assert result['dkms_rebuild_required'] is True


def test_unknown_option_fails(run_module):
    rc, result = run_module({'sysfs_root': '/sys', 'secureboot': True})
    assert rc != 0 and result['failed']
    assert 'secureboot' in result['msg']


def test_documentation_matches_argument_spec():
    """DOCUMENTATION options equal the argument_spec keys (ansible-test validate-modules checks the rest)."""
    import ast
    import yaml
    with open(MODULE) as handle:
        source = handle.read()
    tree = ast.parse(source)
    doc = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
               and getattr(node.targets[0], 'id', None) == 'DOCUMENTATION')
    documented = set(yaml.safe_load(doc)['options'])
    spec_call = next(node for node in ast.walk(tree) if isinstance(node, ast.keyword)
                     and node.arg == 'argument_spec')
    declared = set(kw.arg for kw in spec_call.value.keywords)
    assert documented == declared


def test_return_documentation_lists_every_key(run_module):
    import ast
    import yaml
    with open(MODULE) as handle:
        tree = ast.parse(handle.read())
    ret = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
               and getattr(node.targets[0], 'id', None) == 'RETURN')
    rc, result = run_module(tree_args('sb_on_pending'))
    assert rc == 0
    returned = set(result) - {'changed', 'invocation'}
    assert set(yaml.safe_load(ret)) == returned
