# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""rclone's obscured secrets: rclone's own test vectors, the derived IV, and the real rclone where it is installed."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from ansible_collections.homelab.llm_server.plugins.module_utils import _rclone

RCLONE = shutil.which('rclone')
needs_rclone = pytest.mark.skipif(RCLONE is None,
                                  reason='rclone is not installed (scripts/setup-test-host.sh installs it)')

# rclone's fs/config/obscure/obscure_test.go: plain text, obscured, the IV drawn.
VECTORS = [
    ('', 'YWFhYWFhYWFhYWFhYWFhYQ', b'aaaaaaaaaaaaaaaa'),
    ('potato', 'YWFhYWFhYWFhYWFhYWFhYXMaGgIlEQ', b'aaaaaaaaaaaaaaaa'),
    ('potato', 'YmJiYmJiYmJiYmJiYmJiYp3gcEWbAw', b'bbbbbbbbbbbbbbbb'),
]
SECRETS = ['potato', 'correct horse battery staple', 'ünïcødé 🔑', 'x' * 300, ' leading and trailing ']


@pytest.mark.parametrize('plain, obscured, iv', VECTORS)
def test_reveal_gives_rclones_vectors_back(plain, obscured, iv):
    assert _rclone.reveal(obscured) == plain


@pytest.mark.parametrize('plain, obscured, iv', VECTORS)
def test_obscure_with_rclones_iv_gives_rclones_result(plain, obscured, iv):
    assert _rclone.obscure(plain, iv=iv) == obscured


@pytest.mark.parametrize('obscured, message', [
    ('YmJiYmJiYmJiYmJiYmJiYp*gcEWbAw', 'base64 decode failed when revealing password - is it obscured?'),
    ('YmJiYmJiYmJiYmJiYmJiYp3gcEWbAw==', 'base64 decode failed when revealing password - is it obscured?'),
    ('YmJiYmJiYmJiYmJiYmJiYp3gcEWbA', 'base64 decode failed when revealing password - is it obscured?'),
    ('aGVsbG8', 'input too short when revealing password - is it obscured?'),
    ('', 'input too short when revealing password - is it obscured?'),
])
def test_reveal_refuses_what_rclone_refuses(obscured, message):
    with pytest.raises(ValueError) as err:
        _rclone.reveal(obscured)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize('secret', SECRETS)
def test_reveal_undoes_obscure(secret):
    assert _rclone.reveal(_rclone.obscure(secret)) == secret


@pytest.mark.parametrize('secret', SECRETS)
def test_obscure_is_the_same_on_every_call(secret):
    obscured = _rclone.obscure(secret)
    assert obscured == _rclone.obscure(secret)
    assert '=' not in obscured and len(obscured) == len(_rclone.obscure(secret, iv=b'a' * 16))


def test_the_iv_is_derived_from_the_secret():
    assert _rclone.obscure('potato') == '38271IZCPb5_CZzXAwzn0O0RRqcpiw'
    assert len({_rclone.obscure(s) for s in SECRETS}) == len(SECRETS)
    # The same length, another secret: another IV, not only another tail.
    assert _rclone.obscure('potato')[:21] != _rclone.obscure('tomato')[:21]


def test_obscure_wants_text_and_a_16_byte_iv():
    with pytest.raises(TypeError, match='expects the secret as a string, got bytes'):
        _rclone.obscure(b'potato')
    with pytest.raises(ValueError, match='the IV must be 16 bytes, got 8'):
        _rclone.obscure('potato', iv=b'a' * 8)


@needs_rclone
@pytest.mark.parametrize('secret', SECRETS)
def test_rclone_reveals_what_obscure_gives(secret):
    revealed = subprocess.run([RCLONE, 'reveal', _rclone.obscure(secret)], capture_output=True, text=True,
                              check=True, timeout=60).stdout
    assert revealed == secret + '\n'


@needs_rclone
def test_reveal_undoes_rclones_obscure():
    secret = 'correct horse battery staple'
    obscured = subprocess.run([RCLONE, 'obscure', secret], capture_output=True, text=True, check=True,
                              timeout=60).stdout.strip()
    assert _rclone.reveal(obscured) == secret
