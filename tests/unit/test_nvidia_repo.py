# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/nvidia_repo/build.py: the local NVIDIA apt repositories the roles' tests install from.

The expected packages below are the test contract written out on their own,
not read from build.py, so a change to the script that breaks the contract
fails here. The payload scripts run from a .deb unpacked with dpkg-deb.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
BUILD_PY = os.path.join(REPO_ROOT, 'tests', 'nvidia_repo', 'build.py')
CUDA = 'cuda/debian12/x86_64'
CONTAINER = 'libnvidia-container/stable/deb/amd64'

DRIVER_PACKAGES = ['nvidia-open', 'nvidia-driver', 'nvidia-kernel-open-dkms', 'libnvidia-ml1',
                   'nvidia-persistenced', 'nvidia-smi', 'nvidia-modprobe']
DRIVER_VERSIONS = ['570.172.08-1', '580.95.05-1']
CONTAINER_PACKAGES = ['nvidia-container-toolkit', 'nvidia-container-toolkit-base',
                      'libnvidia-container-tools', 'libnvidia-container1']
CONTAINER_VERSIONS = ['1.17.7-1', '1.17.8-1']
EXPECTED = {
    CUDA: sorted([(p, v) for p in DRIVER_PACKAGES for v in DRIVER_VERSIONS] + [
        ('cuda-toolkit-12-8', '12.8.1-1'), ('cuda-toolkit-13-0', '13.0.2-1'),
        ('cudnn9-cuda-12', '9.10.2.21-1'), ('cudnn9-cuda-13', '9.13.0.50-1')]),
    CONTAINER: sorted((p, v) for p in CONTAINER_PACKAGES for v in CONTAINER_VERSIONS),
}

pytestmark = pytest.mark.skipif(shutil.which('dpkg-deb') is None, reason='dpkg-deb is needed to build .deb files')


def _run(*cmd, **kw):
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=60, check=False, **kw)


def _stanzas(path):
    """Parse a Packages or Release file into a list of {field: value} (continuation lines kept)."""
    stanzas = []
    with open(path, encoding='utf-8') as f:
        for block in f.read().strip().split('\n\n'):
            fields = {}
            key = None
            for line in block.splitlines():
                if line.startswith((' ', '\t')):
                    fields[key] += '\n' + line.strip()
                else:
                    key, value = line.split(':', 1)
                    fields[key] = value.strip()
            stanzas.append(fields)
    return stanzas


@pytest.fixture(scope='module')
def repo(tmp_path_factory):
    out = tmp_path_factory.mktemp('nvidia-repo')
    proc = _run(sys.executable, BUILD_PY, str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope='module')
def packages(repo):
    """{repo path: {(package, version): stanza}}."""
    return {r: {(s['Package'], s['Version']): s for s in _stanzas(repo / r / 'Packages')} for r in EXPECTED}


@pytest.fixture(scope='module')
def keyring(repo, tmp_path_factory):
    """The exported public key as a binary keyring for gpgv."""
    path = tmp_path_factory.mktemp('keyring') / 'nvidia-test.gpg'
    proc = _run('gpg', '--batch', '--yes', '--dearmor', '--output', str(path), str(repo / 'nvidia-test.asc'))
    assert proc.returncode == 0, proc.stderr
    return path


@pytest.fixture(scope='module')
def unpack(repo, tmp_path_factory):
    """unpack(repo, package, version) -> root of the .deb's files."""
    def extract(where, name, version):
        dest = tmp_path_factory.mktemp(name)
        proc = _run('dpkg-deb', '-x', str(repo / where / ('%s_%s_amd64.deb' % (name, version))), str(dest))
        assert proc.returncode == 0, proc.stderr
        return dest
    return extract


@pytest.mark.parametrize('where', sorted(EXPECTED))
def test_packages_index_lists_the_contract(packages, repo, where):
    assert sorted(packages[where]) == EXPECTED[where]
    for (name, version), stanza in packages[where].items():
        deb = repo / where / stanza['Filename']
        assert stanza['Filename'] == './%s_%s_amd64.deb' % (name, version)
        assert hashlib.sha256(deb.read_bytes()).hexdigest() == stanza['SHA256']
        assert int(stanza['Size']) == deb.stat().st_size
        assert stanza['Architecture'] == 'amd64'
        for field in ('Maintainer', 'Section', 'Description', 'Installed-Size'):
            assert stanza.get(field), (name, version, field)
    with open(repo / where / 'Packages', 'rb') as plain:
        proc = _run('gzip', '-dc', str(repo / where / 'Packages.gz'))
        assert proc.returncode == 0
        assert proc.stdout.encode() == plain.read()


def test_depends(packages):
    for v in DRIVER_VERSIONS:
        pin = '(= %s)' % v
        assert packages[CUDA][('nvidia-open', v)]['Depends'] == (
            'nvidia-driver %s, nvidia-kernel-open-dkms %s' % (pin, pin))
        assert packages[CUDA][('nvidia-driver', v)]['Depends'] == (
            'libnvidia-ml1 {0}, nvidia-persistenced {0}, nvidia-smi {0}, nvidia-modprobe {0}'.format(pin))
        for leaf in ('nvidia-kernel-open-dkms', 'libnvidia-ml1', 'nvidia-persistenced', 'nvidia-smi', 'nvidia-modprobe'):
            assert 'Depends' not in packages[CUDA][(leaf, v)], leaf
    for v in CONTAINER_VERSIONS:
        pin = '(= %s)' % v
        assert packages[CONTAINER][('nvidia-container-toolkit', v)]['Depends'] == (
            'nvidia-container-toolkit-base {0}, libnvidia-container-tools {0}, libnvidia-container1 {0}'.format(pin))
        assert packages[CONTAINER][('libnvidia-container-tools', v)]['Depends'] == 'libnvidia-container1 (>= %s)' % v


def test_deb_control_file(repo):
    deb = repo / CUDA / 'nvidia-persistenced_580.95.05-1_amd64.deb'
    proc = _run('dpkg-deb', '--field', str(deb), 'Package', 'Version', 'Architecture', 'Section')
    assert proc.stdout.splitlines() == ['Package: nvidia-persistenced', 'Version: 580.95.05-1',
                                        'Architecture: amd64', 'Section: utils']
    listing = _run('dpkg-deb', '--contents', str(deb)).stdout
    assert 'root/root' in listing and './usr/bin/nvidia-persistenced' in listing
    assert './lib/systemd/system/nvidia-persistenced.service' in listing
    assert _run('dpkg-deb', '--info', str(deb), 'postinst').returncode == 0


@pytest.mark.parametrize('where', sorted(EXPECTED))
def test_release_is_signed_by_the_exported_key(repo, keyring, where):
    release = _stanzas(repo / where / 'Release')[0]
    assert release['Origin'] == 'NVIDIA (test double)'
    assert release['Label'] == ('NVIDIA CUDA' if where == CUDA else 'libnvidia-container')
    # A flat repository ('/' suite) carries neither.
    assert 'Suite' not in release and 'Codename' not in release
    digest = hashlib.sha256((repo / where / 'Packages').read_bytes()).hexdigest()
    assert digest in release['SHA256']
    inrelease = _run('gpgv', '--keyring', str(keyring), str(repo / where / 'InRelease'))
    assert inrelease.returncode == 0, inrelease.stderr
    detached = _run('gpgv', '--keyring', str(keyring), str(repo / where / 'Release.gpg'), str(repo / where / 'Release'))
    assert detached.returncode == 0, detached.stderr


def test_rerun_is_a_no_op_and_rebuild_keeps_the_key(repo):
    inrelease = repo / CUDA / 'InRelease'
    before = (inrelease.stat().st_mtime_ns, (repo / 'nvidia-test.asc').read_text())
    proc = _run(sys.executable, BUILD_PY, str(repo))
    assert proc.returncode == 0 and 'up to date' in proc.stdout
    assert (inrelease.stat().st_mtime_ns, (repo / 'nvidia-test.asc').read_text()) == before
    proc = _run(sys.executable, BUILD_PY, '--force', str(repo))
    assert proc.returncode == 0, proc.stderr
    assert (repo / 'nvidia-test.asc').read_text() == before[1]


@pytest.mark.parametrize('version, text', [
    ('12.8.1-1', 'Cuda compilation tools, release 12.8, V12.8.93\nBuild cuda_12.8.r12.8/compiler.35583870_0\n'),
    ('13.0.2-1', 'Cuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n'),
])
def test_nvcc_version(unpack, version, text):
    series = version[:4]
    root = unpack(CUDA, 'cuda-toolkit-%s' % series.replace('.', '-'), version)
    proc = _run(str(root / ('usr/local/cuda-%s/bin/nvcc' % series)), '--version')
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[:2] == ['nvcc: NVIDIA (R) Cuda compiler driver', 'Copyright (c) 2005-2025 NVIDIA Corporation']
    assert lines[2].startswith('Built on ')
    assert '\n'.join(lines[3:]) + '\n' == text
    assert _run(str(root / ('usr/local/cuda-%s/bin/nvcc' % series))).returncode == 1
    version_json = (root / ('usr/local/cuda-%s/version.json' % series)).read_text()
    assert '"version" : "%s"' % version[:-2] in version_json


def test_nvidia_smi_and_persistenced_options(unpack):
    root = unpack(CUDA, 'nvidia-smi', '580.95.05-1')
    smi = str(root / 'usr/bin/nvidia-smi')
    assert 'NVIDIA-SMI 580.95.05' in _run(smi).stdout and 'Driver Version: 580.95.05' in _run(smi).stdout
    assert _run(smi, '--version').stdout.splitlines()[0] == 'NVIDIA-SMI version  : 580.95.05'
    root = unpack(CUDA, 'nvidia-persistenced', '570.172.08-1')
    daemon = str(root / 'usr/bin/nvidia-persistenced')
    assert _run(daemon, '--bogus').returncode != 0
    assert _run(daemon, '--user', 'no-such-user-here').returncode != 0
    assert '570.172.08' in _run(daemon, '--version').stdout


def test_nvidia_ctk(unpack, tmp_path):
    root = unpack(CONTAINER, 'nvidia-container-toolkit-base', '1.17.8-1')
    ctk = str(root / 'usr/bin/nvidia-ctk')
    assert _run(ctk, '--version').stdout.splitlines()[0] == 'NVIDIA Container Toolkit CLI version 1.17.8'
    configure = _run(ctk, 'runtime', 'configure', '--runtime=docker')
    assert configure.returncode == 2
    assert 'daemon.json is merged by the role' in configure.stderr
    dev_root = tmp_path / 'host'
    (dev_root / 'dev').mkdir(parents=True)
    spec = tmp_path / 'cdi' / 'nvidia.yaml'
    # No GPU: refused like the real tool, nothing written.
    empty = _run(ctk, 'cdi', 'generate', '--output=%s' % spec, '--dev-root=%s' % dev_root)
    assert empty.returncode == 1 and 'no NVIDIA devices' in empty.stderr and not spec.exists()
    for node in ('nvidia1', 'nvidia0', 'nvidiactl'):
        (dev_root / 'dev' / node).touch()
    proc = _run(ctk, 'cdi', 'generate', '--output=%s' % spec, '--dev-root=%s' % dev_root)
    assert proc.returncode == 0, proc.stderr
    text = spec.read_text()
    assert text.startswith('---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\n')
    devices = text.split('\ndevices:\n', 1)[1]
    assert [line for line in devices.splitlines() if line.startswith('- name:')] == [
        '- name: "0"', '- name: "1"', '- name: all']
    assert '  - path: /dev/nvidiactl\n    hostPath: %s/dev/nvidiactl\n' % dev_root in text
    stdout = _run(ctk, 'cdi', 'generate', '--format=json', '--dev-root=%s' % dev_root)
    assert stdout.returncode == 0, stdout.stderr
    parsed = json.loads(stdout.stdout)
    assert parsed['kind'] == 'nvidia.com/gpu' and [d['name'] for d in parsed['devices']] == ['0', '1', 'all']
