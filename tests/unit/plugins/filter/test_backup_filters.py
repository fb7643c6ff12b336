# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/backup.py: rclone_obscure through Ansible's templating, the way rclone.conf's template uses it."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.llm_server.plugins.filter import backup
from ansible_collections.homelab.llm_server.plugins.module_utils import _rclone

SECRET = 'correct horse battery staple'


def test_rclone_obscure_is_the_same_on_every_run(render):
    template = '{{ secret | homelab.llm_server.rclone_obscure }}'
    first = render(template, secret=SECRET)['value']
    # Another process: nothing of the first run (a hash seed, a random IV) carries over.
    assert render(template, secret=SECRET)['value'] == first
    assert _rclone.reveal(first) == SECRET


def test_two_secrets_give_two_values():
    assert backup.rclone_obscure(SECRET) != backup.rclone_obscure(SECRET + '!')
    assert backup.rclone_obscure('password') != backup.rclone_obscure('salt')


@pytest.mark.parametrize('value, message', [
    ("''", 'the secret is empty'),
    ('123456', 'expects the secret as a string, got a number (quote a numeric secret in YAML)'),
    ('none', 'expects the secret as a string, got null'),
    ("['x']", 'expects the secret as a string, got a list'),
])
def test_rclone_obscure_errors_through_ansible(render, value, message):
    assert 'rclone_obscure: ' + message in render('{{ %s | homelab.llm_server.rclone_obscure }}' % value)['error']


@pytest.mark.parametrize('value, message', [
    ('', 'the secret is empty'),
    (123456, r'got a number \(quote a numeric secret in YAML\)'),
    (True, 'got a boolean'),
    ({'a': 1}, 'got a dict'),
    (b'potato', 'got bytes'),
    ('\udcff', 'the secret is not valid text'),
])
def test_rclone_obscure_raises_filter_errors(value, message):
    with pytest.raises(AnsibleFilterError, match=message):
        backup.rclone_obscure(value)


def test_the_message_never_quotes_the_secret():
    with pytest.raises(AnsibleFilterError) as err:
        backup.rclone_obscure(['s3cr3t-value'])
    assert 's3cr3t-value' not in str(err.value)


def test_without_cryptography_the_error_names_it(monkeypatch):
    monkeypatch.setattr(_rclone, 'HAS_CRYPTOGRAPHY', False)
    monkeypatch.setattr(_rclone, 'CRYPTOGRAPHY_IMPORT_ERROR', "ModuleNotFoundError: No module named 'cryptography'")
    with pytest.raises(AnsibleFilterError, match='needs the Python library cryptography'):
        backup.rclone_obscure(SECRET)


@pytest.mark.parametrize('name', ['restore_check_lines', 'restore_drill_lines'])
def test_the_report_filters_name_what_they_expect(name):
    with pytest.raises(AnsibleFilterError, match='%s: expects the report of llm-backup' % name):
        backup.FilterModule().filters()[name]("not a report")
