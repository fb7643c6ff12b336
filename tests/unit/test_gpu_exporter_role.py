# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/gpu_exporter: what can be checked without a host.

- the unit as Ansible renders it (the role's defaults and vars, through
  Ansible's Templar): ExecStart's words are options llm-gpu-exporter
  accepts, the user, the hardening, the environment's quoting, and
  `systemd-analyze verify` where it is at hand;
- the files the role installs exist where it takes them from, and are all the
  installed program imports;
- the role's pins and fallbacks agree with requirements.txt, the Makefile's
  wheels and the common role;
- validate.yml stops a wrong variable with a message naming it, and lets the
  defaults through (ansible-playbook on localhost, the validation alone).
The service itself runs in Molecule (molecule/default/verify-gpu-exporter.yml).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
ROLE = os.path.join(REPO_ROOT, 'roles', 'gpu_exporter')
COMMON = os.path.join(REPO_ROOT, 'roles', 'common')
TEMPLATE = os.path.join(ROLE, 'templates', 'llm-gpu-exporter.service.j2')


def load(*parts):
    with open(os.path.join(*parts)) as handle:
        return yaml.safe_load(handle)


# Renders a template file with the role's defaults and vars as the trusted
# templates they are in the role (so vars/main.yml's expressions resolve),
# overridden by the test's values; through Ansible's own Templar as the
# template action calls it, in a subprocess so the plugin loader starts clean.
_RENDER = r'''
import json, sys
import yaml
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

def trusted(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [trusted(v) for v in value]
    if isinstance(value, dict):
        return {k: trusted(v) for k, v in value.items()}
    return value

role, template, overrides = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
variables = {}
# The host_programs role's defaults come first: the role includes it (public).
for path in ('%s/../host_programs/defaults/main.yml' % role, '%s/defaults/main.yml' % role, '%s/vars/main.yml' % role):
    with open(path) as handle:
        variables.update(trusted(yaml.safe_load(handle)))
variables.update(role_path=role, ansible_managed='Ansible managed')
variables.update(overrides)
templar = Templar(loader=DataLoader(), variables=variables)
with open(template) as handle:
    text = handle.read()
# As the template action does: the file's Jinja string literals keep their escapes' meaning.
print(json.dumps({'value': templar.template(trust_as_template(text), escape_backslashes=False)}))
'''


@pytest.fixture
def render_role(collection_root, tmp_path):
    """render_role(template path or text, **overrides) -> the rendered value."""
    count = [0]

    def run(template, **overrides):
        if not os.path.exists(template):
            count[0] += 1
            path = tmp_path / ('expression-%d.j2' % count[0])
            path.write_text(template)
            template = str(path)
        proc = subprocess.run([sys.executable, '-c', _RENDER, collection_root, ROLE, template, json.dumps(overrides)],
                              capture_output=True, text=True, timeout=60, check=False, cwd=REPO_ROOT)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])['value']
    return run


def unit_lines(text):
    """[(key, value)] of the unit's settings, comments and section headers left out."""
    pairs = []
    for line in text.splitlines():
        if not line or line.startswith(('#', '[')):
            continue
        key, _separator, value = line.partition('=')
        pairs.append((key, value))
    return pairs


def settings(text):
    result = {}
    for key, value in unit_lines(text):
        result.setdefault(key, []).append(value)
    return result


def exporter_parser():
    """llm-gpu-exporter's own parse_args (host/llm_server_host/gpu_exporter.py)."""
    from llm_server_host import gpu_exporter
    return gpu_exporter.parse_args


# --- the unit -------------------------------------------------------------------

def test_default_unit_runs_the_program_unprivileged_and_hardened(render_role):
    unit = settings(render_role(TEMPLATE))
    argv = shlex.split(unit['ExecStart'][0])
    assert argv[0] == '/opt/llm-server/venv/bin/llm-gpu-exporter'
    args = exporter_parser()(argv[1:])
    assert (args.listen_address, args.port, args.timeout, args.quarantine) == ('127.0.0.1', 9835, 2.0, 300.0)
    assert not args.once and not args.worker
    assert unit['User'] == ['llm-gpu-exporter'] and unit['Group'] == ['llm-gpu-exporter']
    assert unit['SupplementaryGroups'] == ['video']
    assert unit['Restart'] == ['always'] and unit['RestartSec'] == ['5'] and unit['TimeoutStopSec'] == ['10']
    for key, value in (('NoNewPrivileges', 'yes'), ('ProtectSystem', 'strict'), ('ProtectHome', 'yes'),
                       ('PrivateTmp', 'yes'), ('CapabilityBoundingSet', ''), ('RestrictSUIDSGID', 'yes'),
                       ('RestrictAddressFamilies', 'AF_INET AF_INET6 AF_UNIX'), ('PrivateDevices', 'no')):
        assert unit[key] == [value], key
    # Each of these would lock NVML out of /dev/nvidia*: PrivateDevices=yes
    # hides them, a DeviceAllow= list (ProtectClock= implies one) is resolved
    # when the unit starts.
    for key in ('DeviceAllow', 'DevicePolicy', 'ProtectClock', 'ProcSubset', 'PrivateUsers'):
        assert key not in unit, key
    assert unit['WantedBy'] == ['multi-user.target']


def test_root_user_ipv6_and_environment(render_role):
    text = render_role(TEMPLATE, gpu_exporter_user='root', gpu_exporter_listen_address='::',
                       gpu_exporter_port=9900, gpu_exporter_timeout_s=1.5, gpu_exporter_quarantine_s=60,
                       gpu_exporter_environment={'LD_LIBRARY_PATH': '/opt/nvidia lib', 'ODD': '50% "q" \\'})
    unit = settings(text)
    args = exporter_parser()(shlex.split(unit['ExecStart'][0])[1:])
    assert (args.listen_address, args.port, args.timeout, args.quarantine) == ('::', 9900, 1.5, 60.0)
    assert unit['User'] == ['root']
    for key in ('Group', 'SupplementaryGroups', 'CapabilityBoundingSet', 'RemoveIPC'):
        assert key not in unit, key
    assert unit['NoNewPrivileges'] == ['yes']
    # systemd's quoting: "..." around the assignment, \" and \\ inside, %% for a %.
    assert unit['Environment'] == ['PYTHONDONTWRITEBYTECODE=1', '"LD_LIBRARY_PATH=/opt/nvidia lib"',
                                   '"ODD=50%% \\"q\\" \\\\"']


@pytest.mark.skipif(not shutil.which('systemd-analyze'), reason='systemd-analyze is not installed')
@pytest.mark.parametrize('overrides', [{}, {'gpu_exporter_user': 'root', 'gpu_exporter_environment': {'A': 'b c'}}])
def test_systemd_accepts_the_unit(render_role, tmp_path, overrides):
    venv = tmp_path / 'venv' / 'bin'
    venv.mkdir(parents=True)
    (venv / 'llm-gpu-exporter').symlink_to(sys.executable)
    text = render_role(TEMPLATE, common_venv_path=str(tmp_path / 'venv'), **overrides)
    path = tmp_path / 'llm-gpu-exporter.service'
    path.write_text(text)
    proc = subprocess.run(['systemd-analyze', 'verify', str(path)], capture_output=True, text=True, timeout=60,
                          check=False)
    ours = [line for line in (proc.stdout + proc.stderr).splitlines() if path.name in line]
    assert proc.returncode == 0 and ours == [], proc.stdout + proc.stderr


@pytest.mark.parametrize('address, url', [
    ('127.0.0.1', 'http://127.0.0.1:9835/metrics'),
    ('0.0.0.0', 'http://127.0.0.1:9835/metrics'),
    ('::', 'http://[::1]:9835/metrics'),
    ('::1', 'http://[::1]:9835/metrics'),
    ('10.77.0.2', 'http://10.77.0.2:9835/metrics'),
])
def test_the_play_asks_metrics_where_the_exporter_listens(render_role, address, url):
    assert render_role('{{ _gpu_exporter_metrics_url }}', gpu_exporter_listen_address=address) == url


# --- what the role installs ------------------------------------------------------

def test_prometheus_client_pin_agrees_with_requirements_and_wheels():
    version = load(COMMON, 'defaults', 'main.yml')['common_prometheus_client_version']
    with open(os.path.join(REPO_ROOT, 'requirements.txt')) as handle:
        assert 'prometheus-client==%s' % version in handle.read().splitlines()
    with open(os.path.join(REPO_ROOT, 'Makefile')) as handle:
        assert "$$(grep -E '^prometheus-client==' requirements.txt)" in handle.read()


def test_fallbacks_are_the_common_roles_defaults(render_role):
    common = load(COMMON, 'defaults', 'main.yml')
    assert render_role('{{ _gpu_exporter_venv }}') == common['common_venv_path']
    # The inventory's settings win, as they do for the common role.
    assert render_role('{{ _gpu_exporter_venv }}', common_venv_path='/srv/venv') == '/srv/venv'
    assert render_role('{{ _gpu_exporter_program }}', common_venv_path='/srv/venv') == '/srv/venv/bin/llm-gpu-exporter'


# --- validate.yml -----------------------------------------------------------------

_CASES = [
    ('gpu_exporter_listen_address', 'localhost', "gpu_exporter_listen_address 'localhost' is not an IP address"),
    ('gpu_exporter_listen_address', '10.0.0.0/8', "gpu_exporter_listen_address '10.0.0.0/8' is not an IP address"),
    ('gpu_exporter_port', 80, 'gpu_exporter_port 80 must be 1024 to 65535'),
    ('gpu_exporter_port', 70000, 'gpu_exporter_port 70000 must be 1024 to 65535'),
    ('gpu_exporter_timeout_s', 0, 'gpu_exporter_timeout_s 0 must be more than 0 and at most 8'),
    ('gpu_exporter_timeout_s', 10, 'gpu_exporter_timeout_s 10 must be more than 0 and at most 8'),
    ('gpu_exporter_quarantine_s', 5, 'gpu_exporter_quarantine_s 5 must be at least 10'),
    ('gpu_exporter_user', 'Exporter User', "gpu_exporter_user 'Exporter User' is not a user name"),
    ('gpu_exporter_environment', {'1BAD': 'x'}, "gpu_exporter_environment: '1BAD' is not an environment variable"),
    ('gpu_exporter_environment', {'GOOD': 'a\nb'}, 'gpu_exporter_environment: the value of GOOD holds a line break'),
    ('common_prometheus_client_version', '>=0.20',
     "common_prometheus_client_version must pin an exact prometheus-client release"),
    ('common_wheelhouse', '/nonexistent/wheels',
     "common_wheelhouse '/nonexistent/wheels' holds no prometheus_client 0.26.0 wheel"),
]

_PLAY = '''
- name: Validate each case
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Run the validation with the case's variable
      ansible.builtin.include_tasks: case.yml
      loop: "{{ cases }}"
      loop_control:
        loop_var: case
'''

_CASE = '''
- name: One case
  block:
    - name: Set the case's variable
      ansible.builtin.set_fact:
        "{{ case.name }}": "{{ case.value }}"
      when: case.name is not none
    - name: Validate
      ansible.builtin.include_role:
        name: homelab.llm_server.gpu_exporter
        tasks_from: validate
    - name: Passed
      ansible.builtin.debug:
        msg: "RESULT {{ {'case': case.id, 'passed': true} | to_json }}"
  rescue:
    - name: Stopped
      ansible.builtin.debug:
        msg: "RESULT {{ {'case': case.id, 'passed': false, 'msg': ansible_failed_result.msg} | to_json }}"
  always:
    - name: Put the variable back
      ansible.builtin.set_fact:
        "{{ case.name }}": "{{ case.reset }}"
      when: case.name is not none
'''


@pytest.fixture(scope='module')
def validation_results(tmp_path_factory):
    """{case id: (passed, message)} from one ansible-playbook run of validate.yml on localhost."""
    playbook = os.path.join(REPO_ROOT, '.venv', 'bin', 'ansible-playbook')
    if not os.path.exists(playbook):
        playbook = shutil.which('ansible-playbook')
    if not playbook:
        pytest.skip('ansible-playbook is not installed')
    work = tmp_path_factory.mktemp('validate')
    (work / 'play.yml').write_text(_PLAY)
    (work / 'case.yml').write_text(_CASE)
    common = load(COMMON, 'defaults', 'main.yml')
    defaults = dict(load(ROLE, 'defaults', 'main.yml'), common_wheelhouse='',
                    common_prometheus_client_version=common['common_prometheus_client_version'])
    cases = [{'id': 'defaults', 'name': None}] + [
        {'id': str(i), 'name': name, 'value': value, 'reset': defaults[name]}
        for i, (name, value, _msg) in enumerate(_CASES)]
    (work / 'cases.json').write_text(json.dumps({'cases': cases}))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO_ROOT, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_STDOUT_CALLBACK='default', ANSIBLE_CALLBACK_RESULT_FORMAT='json',
               ANSIBLE_CACHE_PLUGIN_CONNECTION=str(work / 'facts'))
    proc = subprocess.run([playbook, '-i', 'localhost,', '-c', 'local', '-e', '@' + str(work / 'cases.json'),
                           '-e', 'ansible_python_interpreter=' + sys.executable, str(work / 'play.yml')],
                          capture_output=True, text=True, timeout=300, check=False, cwd=REPO_ROOT, env=env)
    results = {}
    for match in re.finditer(r'"msg": "RESULT (\{.*\})"', proc.stdout):
        result = json.loads(json.loads('"%s"' % match.group(1)))
        results[result['case']] = (result['passed'], ' '.join(result.get('msg', '').split()))
    assert len(results) == len(cases), proc.stdout[-4000:] + proc.stderr[-2000:]
    return results


def test_defaults_pass_validation(validation_results):
    assert validation_results['defaults'] == (True, '')


@pytest.mark.parametrize('index', range(len(_CASES)), ids=['%s=%r' % (c[0], c[1]) for c in _CASES])
def test_a_wrong_variable_stops_with_its_name(validation_results, index):
    passed, message = validation_results[str(index)]
    assert not passed
    assert _CASES[index][2] in message, message
