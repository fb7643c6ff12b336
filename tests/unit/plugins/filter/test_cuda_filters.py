# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/cuda.py through Ansible's templating, the way a role uses it."""

from __future__ import annotations


VERSIONS = {'12.8': {'driver_branch': 570}, '13.0': {'driver_branch': 580}}


def test_cuda_compat_incompatible(render):
    out = render("{{ '13.0' | homelab.llm_server.cuda_compat(cuda, driver, versions) }}",
                 cuda='12.8', driver='570.172.08', versions=VERSIONS)
    assert out['value']['compatible'] is False
    assert out['value']['message'].endswith('upgrade the driver (nvidia_driver_branch: 580) or pin '
                                            'cuda_toolkit_version: 12.8')


def test_cuda_compat_compatible(render):
    out = render("{{ ('12.8' | homelab.llm_server.cuda_compat('13.0')).compatible }}")
    assert out['value'] is True


def test_cuda_compat_bad_version(render):
    out = render("{{ '12' | homelab.llm_server.cuda_compat('12.8') }}")
    assert 'cuda_compat' in out['error'] and 'MAJOR.MINOR' in out['error']


def test_cuda_compat_versions_must_be_a_dict(render):
    out = render("{{ '12.8' | homelab.llm_server.cuda_compat('12.8', none, ['12.8']) }}")
    assert 'versions must be a dict' in out['error']


def test_nvcc_release_from_text_and_registered_result(render):
    text = 'Cuda compilation tools, release 12.8, V12.8.93'
    assert render('{{ out | homelab.llm_server.nvcc_release }}', out=text)['value'] == '12.8'
    assert render('{{ out | homelab.llm_server.nvcc_release }}', out={'stdout': text, 'rc': 0})['value'] == '12.8'
    assert render('{{ out | homelab.llm_server.nvcc_release is none }}', out='no such file')['value'] is True
