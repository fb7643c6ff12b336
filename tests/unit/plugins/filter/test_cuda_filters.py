# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/cuda.py through Ansible's templating, the way a role uses it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))

# Runs a (trusted) template through Ansible's own Templar with the collection loaded
# from this checkout, in a subprocess so the plugin loader starts clean.
_RENDER = r'''
import json, sys
from ansible import constants as C
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible.errors import AnsibleError
variables = json.loads(sys.argv[3])
try:
    value = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(sys.argv[2]))
    print(json.dumps({'value': value}))
except AnsibleError as exc:
    print(json.dumps({'error': str(exc)}))
'''


@pytest.fixture
def render(collection_root):
    def run(template, **variables):
        proc = subprocess.run([sys.executable, '-c', _RENDER, collection_root, template, json.dumps(variables)],
                              capture_output=True, text=True, timeout=60, check=False, cwd=REPO)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])
    return run


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
