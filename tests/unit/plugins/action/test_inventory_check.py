# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The owner's inventory: a copy of inventories/example with its vault made as the quick start says.

The inventory_check action (site.yml's first play) run by ansible-playbook
against that copy: no vault yet, a vault missing one name, the full vault;
and the values the example derives from one place (the VPS's tunnel address
in home's trusted list, the public address, home's tunnel address at the
VPS, the served name), with and without a VPS.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.homelab.llm_server.plugins.action import inventory_check

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
BIN = os.path.dirname(sys.executable)
VAULT = os.path.join('home', 'group_vars', 'gpu_servers', 'vault.yml')


def _env():
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_RETRY_FILES_ENABLED='0', ANSIBLE_STDOUT_CALLBACK='ansible.builtin.default',
               ANSIBLE_CALLBACK_RESULT_FORMAT='json')
    for name in ('PYTHONPATH', 'ANSIBLE_STRATEGY', 'ANSIBLE_STRATEGY_PLUGINS', 'ANSIBLE_VAULT_PASSWORD_FILE'):
        env.pop(name, None)
    return env


def _run(cwd, *args):
    return subprocess.run(list(args), cwd=str(cwd), env=_env(), capture_output=True, text=True, timeout=180,
                          check=False)


@pytest.fixture
def owner(tmp_path):
    """A copy of the example inventory as inventories/home, and a vault password file."""
    shutil.copytree(os.path.join(REPO, 'inventories', 'example'), tmp_path / 'home')
    password = tmp_path / 'vault-pass'
    password.write_text('correct horse battery staple\n')
    password.chmod(0o600)
    return tmp_path


def _make_vault(owner, drop=()):
    """vault.yml from vault.yml.example, less DROP, encrypted with ansible-vault (the quick start's steps)."""
    example = owner / (VAULT + '.example')
    values = yaml.safe_load(example.read_text())
    values.update({'vault_llm_api_key_laptop': 'sk-test-laptop', 'vault_llm_api_key_scripts': 'sk-test-scripts'})
    for name in drop:
        values.pop(name)
    (owner / VAULT).write_text(yaml.safe_dump(values))
    proc = _run(owner, os.path.join(BIN, 'ansible-vault'), 'encrypt', '--vault-password-file', 'vault-pass', VAULT)
    assert proc.returncode == 0, proc.stderr
    assert (owner / VAULT).read_text().startswith('$ANSIBLE_VAULT;'), 'the vault must be encrypted on disk'


def _check(owner, *extra):
    return _run(owner, os.path.join(BIN, 'ansible-playbook'), '-i', 'home',
                os.path.join(REPO, 'playbooks', 'inventory.yml'), *extra)


def test_without_a_vault_the_run_stops_naming_the_file_to_make(owner):
    proc = _check(owner)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert 'llm-home' in proc.stdout and 'failed=1' in proc.stdout
    assert ('home/group_vars/gpu_servers/vault.yml does not exist yet, so vault_hf_token, vault_llm_api_key_laptop, '
            'vault_telegram_bot_token, vault_telegram_chat_id are not set: make it from vault.yml.example beside it '
            'and encrypt it (ansible-vault encrypt home/group_vars/gpu_servers/vault.yml)') in proc.stdout
    # The VPS has no secrets: its variables resolve without the vault.
    assert 'edge-vps                   : ok=1' in proc.stdout


def test_a_name_missing_from_the_vault_is_named_with_the_command_that_adds_it(owner):
    _make_vault(owner, drop=['vault_llm_api_key_scripts'])
    proc = _check(owner, '--vault-password-file', 'vault-pass')
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert ('vault_llm_api_key_scripts is not set (nginx_api_keys uses it): add it to '
            'home/group_vars/gpu_servers/vault.yml with: ansible-vault edit home/group_vars/gpu_servers/vault.yml'
            ) in proc.stdout
    # Only the one missing name, and never a secret's value.
    assert 'vault_llm_api_key_laptop is not set' not in proc.stdout
    assert 'sk-test-laptop' not in proc.stdout + proc.stderr


def test_the_full_vault_resolves_and_the_derived_values_come_from_one_place(owner):
    _make_vault(owner)
    proc = _check(owner, '--vault-password-file', 'vault-pass')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'sk-test' not in proc.stdout + proc.stderr
    values = _derived(owner)
    assert values['llm-home'] == {'wireguard_vps': 'edge-vps', 'nginx_proxy_protocol_trusted': ['10.77.0.1'],
                                  'ups_enabled': True}
    assert values['edge-vps'] == {'wireguard_public_address': '203.0.113.10', 'vps_door_home_address': '10.77.0.2',
                                  'vps_door_server_names': ['llm.example.org']}
    # One place: the VPS's address changed in hosts.yml alone moves its public address.
    hosts = owner / 'home' / 'hosts.yml'
    hosts.write_text(hosts.read_text().replace('ansible_host: 203.0.113.10', 'ansible_host: 198.51.100.7'))
    assert _derived(owner)['edge-vps']['wireguard_public_address'] == '198.51.100.7'


def test_without_a_vps_the_tunnel_values_are_empty_and_the_inventory_resolves(owner):
    _make_vault(owner)
    hosts = owner / 'home' / 'hosts.yml'
    inventory = yaml.safe_load(hosts.read_text())
    del inventory['all']['children']['vps']
    hosts.write_text(yaml.safe_dump(inventory))
    proc = _check(owner, '--vault-password-file', 'vault-pass')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _derived(owner)['llm-home'] == {'wireguard_vps': '', 'nginx_proxy_protocol_trusted': [],
                                           'ups_enabled': True}


# The values the example leaves to the roles to derive from the inventory,
# per host: the roles' defaults (and vps_door's vars) loaded as the roles load
# them, resolved on that host.
_DERIVED = {'llm-home': ['wireguard_vps', 'nginx_proxy_protocol_trusted', 'ups_enabled'],
            'edge-vps': ['wireguard_public_address', 'vps_door_home_address', 'vps_door_server_names']}
_ROLE_VARS = ['nginx/defaults/main.yml', 'wireguard/defaults/main.yml', 'vps_door/defaults/main.yml']


def _derived(owner):
    """Per host, the values the example leaves to the roles to derive."""
    playbook = owner / 'derived.yml'
    playbook.write_text(yaml.safe_dump([{
        'hosts': 'all', 'gather_facts': False,
        'vars': {'wanted': _DERIVED, 'role_files': [f.replace('/', '_').replace('.', '_') for f in _ROLE_VARS]},
        'tasks': [
            # A role's vars/ win over the inventory, as include_vars does; its defaults do not: each
            # file under a name of its own, used only where the inventory sets nothing.
            {'ansible.builtin.include_vars': {'file': os.path.join(REPO, 'roles', 'vps_door', 'vars', 'main.yml')}},
            {'ansible.builtin.include_vars': {'file': os.path.join(REPO, 'roles') + '/{{ item }}',
                                              'name': "{{ item | replace('/', '_') | replace('.', '_') }}"},
             'loop': _ROLE_VARS},
            {'ansible.builtin.copy': {
                'content': "{% set found = {} %}{% for name in wanted[inventory_hostname] %}"
                           "{% if name in hostvars[inventory_hostname] %}{% set _ = found.update({name: vars[name]}) %}"
                           "{% else %}{% for file in role_files if name in vars[file] %}"
                           "{% set _ = found.update({name: vars[file][name]}) %}{% endfor %}{% endif %}"
                           "{% endfor %}{{ found | to_json }}",
                'dest': '{{ out }}/{{ inventory_hostname }}.json', 'mode': '0644'},
             'delegate_to': 'localhost'},
        ]}]))
    out = owner / 'derived'
    out.mkdir(exist_ok=True)
    proc = _run(owner, os.path.join(BIN, 'ansible-playbook'), '-i', 'home', '--vault-password-file', 'vault-pass',
                str(playbook), '-e', 'out=%s' % out, '-e', 'ansible_connection=local')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {path.stem: json.loads(path.read_text()) for path in out.glob('*.json')}


def _debug(owner, host, names):
    """The values of NAMES (comma-separated) for HOST, as the inventory resolves them."""
    wanted = ', '.join("'%s': %s" % (name, name) for name in names.split(','))
    proc = _run(owner, os.path.join(BIN, 'ansible'), host, '-i', 'home', '--vault-password-file', 'vault-pass',
                '-o', '-m', 'ansible.builtin.debug', '-a', 'msg={{ {%s} }}' % wanted)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.split('=>', 1)[1])['msg']


def test_vault_file_for_prefers_the_example_that_lists_the_name(tmp_path):
    for group, text in (('all', 'vault_other: x\n'), ('gpu_servers', 'vault_api_key: x\n')):
        os.makedirs(tmp_path / 'group_vars' / group)
        (tmp_path / 'group_vars' / group / 'vault.yml.example').write_text(text)
    (tmp_path / 'group_vars' / 'all' / 'vault.yml').write_text('$ANSIBLE_VAULT;1.1;AES256\n')
    place, exists = inventory_check.vault_file_for('vault_api_key', str(tmp_path), 'h', ['gpu_servers'])
    assert (place, exists) == (str(tmp_path / 'group_vars' / 'gpu_servers' / 'vault.yml'), False)
    # A name no example lists goes to the vault that exists.
    place, exists = inventory_check.vault_file_for('vault_new', str(tmp_path), 'h', ['gpu_servers'])
    assert (place, exists) == (str(tmp_path / 'group_vars' / 'all' / 'vault.yml'), True)
    assert inventory_check.vault_file_for('vault_new', None, 'h', []) == (None, False)


def test_problem_lines_say_what_each_lacks():
    lines = inventory_check.problem_lines({
        'nginx_server_name': ('my_domain', None),
        'weird': (None, 'template error while templating'),
        'monitoring_telegram_chat_id': ('vault_chat', None),
    }, None, 'h', [])
    assert lines == [
        'vault_chat is not set (monitoring_telegram_chat_id uses it): add it to a vault file of the inventory '
        '(group_vars/<group>/vault.yml, encrypted with ansible-vault)',
        'my_domain is not defined (nginx_server_name uses it): set it in the inventory',
        'weird cannot be resolved: template error while templating',
    ]
    assert inventory_check.undefined_name("'vault_x' is undefined") == 'vault_x'
    assert inventory_check.undefined_name('something else') is None


def _role_options():
    """Every option of every role's entry points: name -> [(role/entry, its spec)]."""
    options = {}
    for specs in sorted((pathlib.Path(REPO) / 'roles').glob('*/meta/argument_specs.yml')):
        role = specs.parent.parent.name
        for entry, spec in (yaml.safe_load(specs.read_text()).get('argument_specs') or {}).items():
            for name, option in (spec.get('options') or {}).items():
                options.setdefault(name, []).append(('%s/%s' % (role, entry), option))
    return options


def _without_required(option):
    """OPTION with `required` dropped at every level: the inventory gives a part, the role's defaults the rest."""
    option = {key: value for key, value in option.items() if key != 'required'}
    if isinstance(option.get('options'), dict):
        option['options'] = {name: _without_required(sub) for name, sub in option['options'].items()}
    return option


@pytest.mark.parametrize('host', ['llm-home', 'edge-vps'])
def test_every_example_variable_is_a_role_option_and_passes_its_argument_spec(owner, host):
    """A typo in the example (or a variable a role renamed) is caught here, not on the owner's server."""
    _make_vault(owner)
    proc = _run(owner, os.path.join(BIN, 'ansible-inventory'), '-i', 'home', '--vault-password-file', 'vault-pass',
                '--host', host)
    assert proc.returncode == 0, proc.stderr
    names = sorted(name for name in json.loads(proc.stdout)
                   if not name.startswith(('ansible_', 'vault_')))
    options = _role_options()
    assert [name for name in names if name not in options] == [], 'variables no role declares'
    values = _debug(owner, host, ','.join(names))
    for name in names:
        for where, option in options[name]:
            validator = ArgumentSpecValidator({name: _without_required(option)})
            errors = validator.validate({name: values[name]}).error_messages
            assert errors == [], '%s=%r fails %s: %s' % (name, values[name], where, errors)
