# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CUDA version handling: parse versions and nvcc's answer, judge a toolkit against the driver.

The driver reports the newest CUDA version it supports (NVML
nvmlSystemGetCudaDriverVersion, "12.8" in gpu_facts). A toolkit whose X.Y is
newer than that needs a newer driver: its runtime refuses to start with
cudaErrorInsufficientDriver.
"""

from __future__ import annotations

import re

_VERSION_RE = re.compile(r'^([0-9]+)\.([0-9]+)$')
# "Cuda compilation tools, release 12.8, V12.8.93"
_NVCC_RELEASE_RE = re.compile(r'\brelease ([0-9]+\.[0-9]+)\b')


def parse_version(value):
    """'12.8' -> (12, 8); raises ValueError for anything but MAJOR.MINOR."""
    text = str(value).strip() if value is not None else ''
    match = _VERSION_RE.match(text)
    if not match:
        raise ValueError('%r is not a CUDA version of the form MAJOR.MINOR such as 12.8' % (value,))
    return int(match.group(1)), int(match.group(2))


def format_version(version):
    return '%d.%d' % tuple(version)


def nvcc_release(output):
    """The X.Y release in the output of `nvcc --version`, or None."""
    match = _NVCC_RELEASE_RE.search(output or '')
    return match.group(1) if match else None


def newest_supported(versions, driver_cuda):
    """Newest of ``versions`` (iterable of 'X.Y') not newer than ``driver_cuda``, or None."""
    limit = parse_version(driver_cuda)
    fitting = [parse_version(v) for v in versions if parse_version(v) <= limit]
    return format_version(max(fitting)) if fitting else None


def compat(toolkit_version, driver_cuda_version, driver_version=None, versions=None):
    """Judge a toolkit version against the CUDA version the driver supports.

    ``versions`` maps known toolkit versions to dicts that may hold
    ``driver_branch`` (the first driver branch that supports it), used for
    the advice. Returns a dict: compatible, toolkit_version,
    driver_cuda_version, driver_version, driver_branch, suggested_version,
    message (None when compatible).
    """
    versions = versions or {}
    toolkit = parse_version(toolkit_version)
    driver_cuda = parse_version(driver_cuda_version)
    info = versions.get(format_version(toolkit)) or {}
    result = {
        'compatible': toolkit <= driver_cuda,
        'toolkit_version': format_version(toolkit),
        'driver_cuda_version': format_version(driver_cuda),
        'driver_version': driver_version,
        'driver_branch': info.get('driver_branch'),
        'suggested_version': None,
        'message': None,
    }
    if result['compatible']:
        return result
    result['suggested_version'] = newest_supported(versions, result['driver_cuda_version'])
    driver = "this host's driver %s" % driver_version if driver_version else "this host's driver"
    advice = ['upgrade the driver (nvidia_driver_branch: %s)' % result['driver_branch']
              if result['driver_branch'] else 'upgrade the driver']
    if result['suggested_version']:
        advice.append('pin cuda_toolkit_version: %s' % result['suggested_version'])
    result['message'] = (
        'cuda_toolkit_version %s needs an NVIDIA driver that supports CUDA %s; %s supports CUDA %s: %s'
        % (result['toolkit_version'], result['toolkit_version'], driver, result['driver_cuda_version'],
           ' or '.join(advice)))
    return result
