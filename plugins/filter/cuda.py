# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for CUDA versions: toolkit/driver compatibility and nvcc's release."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.llm_server.plugins.module_utils import _cuda


def cuda_compat(toolkit_version, driver_cuda_version, driver_version=None, versions=None):
    """Whether a CUDA toolkit X.Y runs on a driver that supports CUDA ``driver_cuda_version``."""
    if versions is not None and not isinstance(versions, dict):
        raise AnsibleFilterError('cuda_compat: versions must be a dict of known toolkit versions')
    try:
        return _cuda.compat(toolkit_version, driver_cuda_version, driver_version=driver_version,
                            versions=versions)
    except ValueError as exc:
        raise AnsibleFilterError('cuda_compat: %s' % exc)


def nvcc_release(output):
    """'12.8' from the output of `nvcc --version`; None when it names no release."""
    if isinstance(output, dict):
        output = output.get('stdout', '')
    return _cuda.nvcc_release(output)


class FilterModule(object):
    """CUDA filters."""

    def filters(self):
        return {
            'cuda_compat': cuda_compat,
            'nvcc_release': nvcc_release,
        }
