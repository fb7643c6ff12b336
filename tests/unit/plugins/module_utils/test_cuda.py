# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/_cuda.py."""

from __future__ import annotations

import importlib.util
import os

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
_spec = importlib.util.spec_from_file_location('_cuda_under_test', os.path.join(REPO, 'plugins', 'module_utils', '_cuda.py'))
cuda = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cuda)

# The same shape as roles/cuda_toolkit/vars/main.yml.
VERSIONS = {
    '12.4': {'driver_branch': 550},
    '12.6': {'driver_branch': 560},
    '12.8': {'driver_branch': 570},
    '12.9': {'driver_branch': 575},
    '13.0': {'driver_branch': 580},
}

# What nvcc 12.8 prints (the last line is the one that counts).
NVCC_12_8 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Fri_Feb_21_20:23:50_PST_2025
Cuda compilation tools, release 12.8, V12.8.93
Build cuda_12.8.r12.8/compiler.35583870_0
"""


@pytest.mark.parametrize('text, expected', [
    ('12.8', (12, 8)),
    ('13.0', (13, 0)),
    (' 12.10 ', (12, 10)),
    (12.8, (12, 8)),
])
def test_parse_version(text, expected):
    assert cuda.parse_version(text) == expected


@pytest.mark.parametrize('text', ['12', '12.8.1', 'v12.8', '', None, '12.x', '12.8-1'])
def test_parse_version_rejects(text):
    with pytest.raises(ValueError, match='MAJOR.MINOR'):
        cuda.parse_version(text)


def test_versions_compare_numerically_not_as_text():
    assert cuda.parse_version('12.10') > cuda.parse_version('12.9')


def test_nvcc_release():
    assert cuda.nvcc_release(NVCC_12_8) == '12.8'
    assert cuda.nvcc_release('Cuda compilation tools, release 13.0, V13.0.88') == '13.0'


@pytest.mark.parametrize('output', ['', None, 'bash: nvcc: command not found', 'prerelease 12.8'])
def test_nvcc_release_none(output):
    assert cuda.nvcc_release(output) is None


def test_newest_supported():
    assert cuda.newest_supported(VERSIONS, '12.8') == '12.8'
    assert cuda.newest_supported(VERSIONS, '12.7') == '12.6'
    assert cuda.newest_supported(VERSIONS, '13.1') == '13.0'
    assert cuda.newest_supported(VERSIONS, '12.2') is None


@pytest.mark.parametrize('toolkit, driver_cuda', [('12.8', '12.8'), ('12.8', '13.0'), ('12.4', '12.9')])
def test_compatible(toolkit, driver_cuda):
    result = cuda.compat(toolkit, driver_cuda, '580.95.05', VERSIONS)
    assert result['compatible'] is True
    assert result['message'] is None
    assert result['suggested_version'] is None


def test_toolkit_newer_than_driver_names_the_branch_and_the_version_to_pin():
    result = cuda.compat('13.0', '12.8', '570.172.08', VERSIONS)
    assert result['compatible'] is False
    assert result['driver_branch'] == 580
    assert result['suggested_version'] == '12.8'
    assert result['message'] == (
        "cuda_toolkit_version 13.0 needs an NVIDIA driver that supports CUDA 13.0; this host's driver "
        "570.172.08 supports CUDA 12.8: upgrade the driver (nvidia_driver_branch: 580) or pin "
        "cuda_toolkit_version: 12.8")


def test_minor_newer_than_driver():
    result = cuda.compat('12.9', '12.8', '570.172.08', VERSIONS)
    assert not result['compatible']
    assert 'nvidia_driver_branch: 575' in result['message']
    assert result['message'].endswith('pin cuda_toolkit_version: 12.8')


def test_no_known_version_fits_the_driver():
    result = cuda.compat('12.8', '12.2', None, VERSIONS)
    assert not result['compatible']
    assert result['suggested_version'] is None
    assert result['message'] == (
        "cuda_toolkit_version 12.8 needs an NVIDIA driver that supports CUDA 12.8; this host's driver "
        "supports CUDA 12.2: upgrade the driver (nvidia_driver_branch: 570)")


def test_unknown_toolkit_without_branch():
    result = cuda.compat('14.0', '13.0', '580.95.05')
    assert not result['compatible']
    assert result['message'].endswith(': upgrade the driver')


def test_compat_rejects_bad_versions():
    with pytest.raises(ValueError):
        cuda.compat('12', '12.8')
    with pytest.raises(ValueError):
        cuda.compat('12.8', None)
