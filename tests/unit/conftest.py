# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared pytest fixtures for the unit tests.

Keep additions small and self-contained: several test modules share this file.

Importing this file makes ``ansible_collections.homelab.llm_server`` importable
(a temporary directory on sys.path in which it is a symlink to this repository),
so test modules and the module_utils they load can use the collection imports,
and puts tests/sysfs on sys.path for ``sysfs_tree``, the writer of simulated
sysfs/procfs trees (shared with the tree generators in tests/sysfs/*/make_trees.py).

GPU fixtures (gpu_facts, _nvml, _amd_sysfs):
  fake_nvml_libdir  session: tests/doubles/nvml/fake_nvml.c compiled into a tmp dir
  collection_root   session: a tmp dir whose ansible_collections/homelab/llm_server
                    is a symlink to this repository (for subprocess PYTHONPATH)
  nvml_env          factory: environment for a subprocess that uses the double
  run_gpu_facts     factory: runs plugins/modules/gpu_facts.py the way Ansible does
pynvml caches the loaded library per process and the dynamic loader reads
LD_LIBRARY_PATH at start-up, so every NVML scenario runs in its own process.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

# `make unit` builds every input the tests read and runs as root on Debian:
# there, a test that skips tests nothing, so it fails instead, with its reason.
NO_SKIPS = os.environ.get('LLM_SERVER_UNIT_NO_SKIPS') == '1'


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if NO_SKIPS and report.skipped and not hasattr(report, 'wasxfail'):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = 'failed'
        report.longrepr = 'skipped under `make unit`, where every input is built: %s' % reason


REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
NVML_DOUBLE_DIR = os.path.join(REPO_ROOT, 'tests', 'doubles', 'nvml')
NVML_FIXTURES_DIR = os.path.join(NVML_DOUBLE_DIR, 'fixtures')
SYSFS_TREES_DIR = os.path.join(REPO_ROOT, 'tests', 'sysfs')
# The host programs' package (llm_server_host), for a subprocess's PYTHONPATH.
HOST_DIR = os.path.join(REPO_ROOT, 'host')


def _make_collection_importable():
    """Put ansible_collections.homelab.llm_server (this repository) on sys.path unless it is there."""
    try:
        import ansible_collections.homelab.llm_server.plugins.module_utils  # noqa: F401 pylint: disable=unused-import
        return
    except ImportError:
        pass
    tmp = tempfile.mkdtemp(prefix='llm_server_coll_')
    namespace = os.path.join(tmp, 'ansible_collections', 'homelab')
    os.makedirs(namespace)
    os.symlink(REPO_ROOT, os.path.join(namespace, 'llm_server'))
    sys.path.insert(0, tmp)
    atexit.register(shutil.rmtree, tmp, True)


_make_collection_importable()
if SYSFS_TREES_DIR not in sys.path:
    sys.path.append(SYSFS_TREES_DIR)

# Variables a test subprocess must not inherit from the developer's shell.
_SCRUBBED_ENV = ('LD_LIBRARY_PATH', 'LD_PRELOAD', 'PYTHONPATH', 'FAKE_NVML_FIXTURE', 'FAKE_NVML_DEBUG')


def nvml_fixture(name):
    """Absolute path of a fixture in tests/doubles/nvml/fixtures (name without .json ok)."""
    if not name.endswith('.json'):
        name += '.json'
    return os.path.join(NVML_FIXTURES_DIR, name)


@pytest.fixture(scope='session')
def fake_nvml_libdir(tmp_path_factory):
    """Directory holding libnvidia-ml.so.1 built from the NVML test double."""
    compiler = shutil.which('gcc') or shutil.which('cc')
    if not compiler:
        pytest.skip('gcc is needed to build the NVML test double (tests/doubles/nvml)')
    out = tmp_path_factory.mktemp('fake_nvml')
    cmd = [compiler, '-shared', '-fPIC', '-O2', '-Wall', '-Wextra', '-Werror',
           '-o', str(out / 'libnvidia-ml.so.1'), os.path.join(NVML_DOUBLE_DIR, 'fake_nvml.c')]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, 'building the NVML double failed:\n%s' % proc.stderr
    return str(out)


@pytest.fixture(scope='session')
def collection_root(tmp_path_factory):
    """A directory for PYTHONPATH in which ansible_collections.homelab.llm_server is this repo."""
    root = tmp_path_factory.mktemp('collections')
    namespace = root / 'ansible_collections' / 'homelab'
    namespace.mkdir(parents=True)
    (namespace / 'llm_server').symlink_to(REPO_ROOT, target_is_directory=True)
    return str(root)


@pytest.fixture
def nvml_env(fake_nvml_libdir, collection_root):
    """env(fixture=None, libdir=True, pythonpath=()) -> dict for subprocess.run.

    fixture: a fixture name/path for FAKE_NVML_FIXTURE (None leaves it unset).
    libdir: True for the double, False for no LD_LIBRARY_PATH at all.
    pythonpath: extra entries placed before the collection root and the host programs' package.
    """
    def make(fixture=None, libdir=True, pythonpath=()):
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
        if libdir:
            env['LD_LIBRARY_PATH'] = fake_nvml_libdir
        if fixture is not None:
            env['FAKE_NVML_FIXTURE'] = fixture if os.path.isabs(fixture) else nvml_fixture(fixture)
        env['PYTHONPATH'] = os.pathsep.join(list(pythonpath) + [collection_root, HOST_DIR])
        env['PYTHONDONTWRITEBYTECODE'] = '1'
        return env
    return make


@pytest.fixture
def run_gpu_facts(nvml_env, tmp_path):
    """run(args=None, fixture=None, libdir=True, pythonpath=()) -> (rc, result dict, stderr)."""
    module = os.path.join(REPO_ROOT, 'plugins', 'modules', 'gpu_facts.py')

    def run(args=None, fixture=None, libdir=True, pythonpath=()):
        args_file = tmp_path / 'args.json'
        args_file.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': args or {}}))
        proc = subprocess.run([sys.executable, module, str(args_file)], cwd=str(tmp_path),
                              env=nvml_env(fixture=fixture, libdir=libdir, pythonpath=pythonpath),
                              capture_output=True, text=True, timeout=60, check=False)
        try:
            result = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError('module printed no JSON (rc %d)\nstdout:\n%s\nstderr:\n%s'
                                 % (proc.returncode, proc.stdout, proc.stderr))
        return proc.returncode, result, proc.stderr
    return run


# Runs a (trusted) template through Ansible's own Templar with the collection loaded
# from this checkout, in a subprocess so the plugin loader starts clean.
_RENDER = r'''
import json, sys
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
    """render(template, **variables) -> {'value': ...} or {'error': message}, through Ansible's Templar."""
    def run(template, **variables):
        proc = subprocess.run([sys.executable, '-c', _RENDER, collection_root, template, json.dumps(variables)],
                              capture_output=True, text=True, timeout=60, check=False, cwd=REPO_ROOT)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])
    return run


@pytest.fixture
def module_runner(collection_root, tmp_path):
    """module_runner(name, args, check_mode=False, diff=False) -> (rc, result): plugins/modules/<name>.py run as Ansible does."""
    def run(name, args, check_mode=False, diff=False):
        module_args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff, _ansible_tmpdir=str(tmp_path))
        args_file = tmp_path / 'args.json'
        args_file.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': module_args}))
        env = dict(os.environ)
        env['PYTHONPATH'] = os.pathsep.join(filter(None, [collection_root, env.get('PYTHONPATH')]))
        module = os.path.join(REPO_ROOT, 'plugins', 'modules', name + '.py')
        proc = subprocess.run([sys.executable, module, str(args_file)], cwd=str(tmp_path), env=env,
                              capture_output=True, text=True, check=False, timeout=120)
        assert proc.stdout, 'no output, stderr: %s' % proc.stderr
        try:
            return proc.returncode, json.loads(proc.stdout)
        except ValueError as exc:
            raise AssertionError('not JSON: %r / stderr %r' % (proc.stdout, proc.stderr)) from exc
    return run


@pytest.fixture
def nft_check(tmp_path):
    """Checks an nftables ruleset with `nft -c` in a throwaway network namespace; nothing is applied here."""
    if not shutil.which('nft') or not shutil.which('unshare'):
        pytest.skip('nft and unshare are needed (scripts/setup-test-host.sh installs nftables)')

    def check(ruleset):
        path = tmp_path / 'rules.nft'
        path.write_text(ruleset)
        return subprocess.run(['unshare', '-n', 'nft', '-c', '-f', str(path)], capture_output=True, text=True,
                              check=False, timeout=30)
    return check


@pytest.fixture
def stuck_file(tmp_path):
    """.path: a file whose read never returns and cannot be killed (tests/fuse/stuck_fs.py).

    A reader sits in uninterruptible sleep, as a call stuck in the GPU driver
    does. .release() (and the end of the test) kills the file system's daemon:
    its connection goes away and every stuck reader gets ENOTCONN and exits.
    Needs root, /dev/fuse and libfuse2 (scripts/setup-test-host.sh).
    """
    import time
    if os.geteuid() != 0:
        pytest.skip('mounting a FUSE file system needs root here')
    mountpoint = tmp_path / 'stuck-fs'
    mountpoint.mkdir()
    log = open(str(tmp_path / 'stuck-fs.log'), 'w')
    daemon = subprocess.Popen([sys.executable, os.path.join(REPO_ROOT, 'tests', 'fuse', 'stuck_fs.py'),
                               str(mountpoint)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while not os.path.ismount(str(mountpoint)):
        if daemon.poll() is not None or time.monotonic() > deadline:
            daemon.kill()
            log.close()
            raise AssertionError('the stuck FUSE file system did not mount: %s'
                                 % (tmp_path / 'stuck-fs.log').read_text())
        time.sleep(0.05)

    class StuckFile(object):
        path = str(mountpoint / 'stuck')

        @staticmethod
        def release():
            daemon.kill()
            daemon.wait(timeout=30)

    try:
        yield StuckFile
    finally:
        StuckFile.release()
        log.close()
        subprocess.run(['umount', '-l', str(mountpoint)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(autouse=True, scope='session')
def _no_test_writes_the_real_hold_dir():
    """The watchdog, the UPS and llm-server write holds where their settings say,
    by default the host's own directory: a test must give them its own."""
    from ansible_collections.homelab.llm_server.plugins.module_utils import _contracts
    real = _contracts.DIRS['hold']
    there = os.path.exists(real)
    yield
    assert there or not os.path.exists(real), 'a test wrote holds into %s: give it hold_dir' % real
