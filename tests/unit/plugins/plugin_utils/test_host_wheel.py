# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host programs' wheel (plugin_utils/_host_wheel.py): built from host/, installed by pip as the role does."""

from __future__ import annotations

import ast
import base64
import csv
import hashlib
import importlib
import io
import json
import os
import subprocess
import sys
import tomllib
import zipfile

import pytest

from ansible_collections.homelab.llm_server.plugins.plugin_utils import _host_wheel

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
HOST_DIR = os.path.join(REPO_ROOT, 'host')


def pyproject():
    with open(os.path.join(HOST_DIR, 'pyproject.toml'), 'rb') as f:
        return tomllib.load(f)['project']


def test_the_version_is_the_collections():
    with open(os.path.join(REPO_ROOT, 'galaxy.yml'), encoding='utf-8') as f:
        galaxy = f.read()
    version = _host_wheel.collection_version(REPO_ROOT)
    assert 'version: %s\n' % version in galaxy


def test_an_installed_collection_names_its_version_in_the_manifest(tmp_path):
    (tmp_path / 'MANIFEST.json').write_text(json.dumps({'collection_info': {'version': '1.2.3'}}))
    (tmp_path / 'galaxy.yml').write_text('version: 9.9.9\n')
    assert _host_wheel.collection_version(str(tmp_path)) == '1.2.3'


def test_the_same_files_give_the_same_bytes():
    first = _host_wheel.build(HOST_DIR, '0.4.0')
    second = _host_wheel.build(HOST_DIR, '0.4.0')
    assert first == second
    assert first[0] == 'llm_server_host-0.4.0-py3-none-any.whl'


def test_the_wheel_holds_the_package_its_metadata_and_a_true_record():
    _name, data, scripts = _host_wheel.build(HOST_DIR, '0.4.0')
    project = pyproject()
    assert scripts == sorted(project['scripts'])
    with zipfile.ZipFile(io.BytesIO(data)) as wheel:
        names = wheel.namelist()
        assert 'llm_server_host/__init__.py' in names
        assert not [n for n in names if '__pycache__' in n or n.endswith('.pyc')]
        dist_info = 'llm_server_host-0.4.0.dist-info/'
        metadata = wheel.read(dist_info + 'METADATA').decode()
        assert 'Name: llm-server-host\n' in metadata and 'Version: 0.4.0\n' in metadata
        points = wheel.read(dist_info + 'entry_points.txt').decode()
        for script, target in project['scripts'].items():
            assert '%s = %s\n' % (script, target) in points
        rows = list(csv.reader(io.StringIO(wheel.read(dist_info + 'RECORD').decode())))
        assert sorted(row[0] for row in rows) == sorted(names)
        for path, digest, size in rows:
            if path.endswith('RECORD'):
                assert digest == '' and size == ''
                continue
            content = wheel.read(path)
            assert digest == 'sha256=' + base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b'=').decode()
            assert int(size) == len(content)


def test_every_console_script_names_a_main_in_the_package(monkeypatch):
    monkeypatch.syspath_prepend(HOST_DIR)
    for script, target in pyproject()['scripts'].items():
        module, function = target.split(':')
        assert callable(getattr(importlib.import_module(module), function)), script


@pytest.mark.parametrize('version', ['', 'latest', '1.0 beta'])
def test_a_version_a_wheel_cannot_carry_is_refused(version):
    with pytest.raises(_host_wheel.HostWheelError, match='not a version'):
        _host_wheel.build(HOST_DIR, version)


def test_a_project_without_a_name_is_refused(tmp_path):
    (tmp_path / 'pyproject.toml').write_text('[project]\ndescription = "x"\n')
    with pytest.raises(_host_wheel.HostWheelError, match='needs a name'):
        _host_wheel.build(str(tmp_path), '1.0')


def test_write_replaces_only_other_bytes(tmp_path):
    path, written = _host_wheel.write(str(tmp_path / 'cache'), 'a.whl', b'one')
    assert written and open(path, 'rb').read() == b'one'
    assert _host_wheel.write(str(tmp_path / 'cache'), 'a.whl', b'one') == (path, False)
    assert _host_wheel.write(str(tmp_path / 'cache'), 'a.whl', b'two') == (path, True)
    assert os.listdir(tmp_path / 'cache') == ['a.whl']


def test_pip_installs_it_without_an_index_and_its_programs_run(tmp_path):
    """What the host_programs role does: a venv of the host's python3, pip --no-index --no-deps."""
    name, data, scripts = _host_wheel.build(HOST_DIR, _host_wheel.collection_version(REPO_ROOT))
    wheel, _written = _host_wheel.write(str(tmp_path), name, data)
    venv = tmp_path / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', str(venv)], check=True, timeout=120)
    pip = [str(venv / 'bin' / 'python'), '-m', 'pip', 'install', '--quiet', '--no-index', '--no-deps',
           '--disable-pip-version-check']
    subprocess.run(pip + [wheel], check=True, timeout=120, capture_output=True)
    for script in scripts:
        result = subprocess.run([str(venv / 'bin' / script), '--help'], capture_output=True, text=True, timeout=60,
                                check=False)
        assert result.returncode == 0 and 'usage:' in result.stdout, (script, result.stderr)
    check = subprocess.run([str(venv / 'bin' / 'python'), '-m', 'pip', 'check', '--disable-pip-version-check'],
                           capture_output=True, text=True, timeout=60, check=False)
    assert check.returncode == 0, check.stdout
    version = subprocess.run([str(venv / 'bin' / 'python'), '-c',
                              'import importlib.metadata as m; print(m.version("llm-server-host"))'],
                             capture_output=True, text=True, timeout=60, check=True)
    assert version.stdout.strip() == _host_wheel.collection_version(REPO_ROOT)


def test_the_programs_import_only_what_a_host_has():
    """The standard library, the venv's pins (pynvml, prometheus_client, huggingface_hub) and the package: never Ansible."""
    _name, data, _scripts = _host_wheel.build(HOST_DIR, '0.4.0')
    allowed = {'pynvml', 'prometheus_client', 'huggingface_hub', 'llm_server_host'}
    with zipfile.ZipFile(io.BytesIO(data)) as wheel:
        sources = {name: wheel.read(name) for name in wheel.namelist() if name.endswith('.py')}
    for path, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split('.')[0]
                assert top in sys.stdlib_module_names or top in allowed, (path, name)


def test_the_wheel_runs_the_benchmark_with_only_python3(tmp_path):
    """docs/architecture.md: PYTHONPATH=THE.whl python3 -m llm_server_host.bench, nothing installed."""
    name, data, _scripts = _host_wheel.build(HOST_DIR, '0.4.0')
    wheel, _written = _host_wheel.write(str(tmp_path), name, data)
    result = subprocess.run(['/usr/bin/python3', '-I', '-c', 'import sys; sys.path.insert(0, sys.argv[1]); '
                             'import runpy; sys.argv[1:] = ["--help"]; '
                             'runpy.run_module("llm_server_host.bench", run_name="__main__")', wheel],
                            capture_output=True, text=True, timeout=60, check=False, cwd=str(tmp_path))
    assert result.returncode == 0 and result.stdout.startswith('usage: llm-bench'), result.stderr
