# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""rclone's "obscured" secrets, the form rclone.conf keeps a crypt remote's password and salt in.

rclone (fs/config/obscure/obscure.go) obscures a value as the base64 (URL
alphabet, no padding) of a 16-byte IV followed by the value under AES-256-CTR
with a key fixed in rclone's source; `rclone reveal` undoes it with the IV it
reads from the value. It hides a secret from a glance at the file, nothing
more: anyone with rclone (or this file) reveals it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import traceback

try:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
except ImportError:
    Cipher = algorithms = modes = None
    HAS_CRYPTOGRAPHY = False
    CRYPTOGRAPHY_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_CRYPTOGRAPHY = True
    CRYPTOGRAPHY_IMPORT_ERROR = None

# rclone's fixed key (cryptKey in fs/config/obscure/obscure.go).
_KEY = bytes((
    0x9c, 0x93, 0x5b, 0x48, 0x73, 0x0a, 0x55, 0x4d,
    0x6b, 0xfd, 0x7c, 0x63, 0xc8, 0x86, 0xa9, 0x2b,
    0xd3, 0x90, 0x19, 0x8e, 0xb8, 0x12, 0x8a, 0xfb,
    0xf4, 0xde, 0x16, 0x2b, 0x8b, 0x95, 0xf6, 0x38,
))
_BLOCK = 16
_IV_KEY = b'homelab.llm_server rclone obscure'
_URL_ALPHABET = re.compile(r'[A-Za-z0-9_-]*\Z')


def _crypt(data, iv):
    """AES-256-CTR under rclone's key: encrypting and decrypting are the same operation."""
    if not HAS_CRYPTOGRAPHY:
        raise RuntimeError('the Python library cryptography is needed to obscure or reveal rclone secrets')
    transform = Cipher(algorithms.AES(_KEY), modes.CTR(iv)).encryptor()
    return transform.update(data) + transform.finalize()


def _derived_iv(plaintext):
    # rclone draws a random IV, so `rclone obscure` gives a new string on every
    # call; a template of rclone.conf would then change on every Ansible run.
    # Obscuring is not encryption (rclone's docs say so: the key is public), and
    # `rclone reveal` takes whatever IV the value carries, so an IV derived from
    # the secret gives the same string for the same secret and loses nothing:
    # the value itself is already reversible by anyone.
    return hmac.new(_IV_KEY, plaintext, hashlib.sha256).digest()[:_BLOCK]


def obscure(secret, iv=None):
    """``secret`` (text) obscured as rclone.conf wants it.

    Without ``iv`` the IV is derived from the secret, so the result is the same
    on every call; ``iv`` (16 bytes) gives rclone's own result for that IV.
    """
    if not isinstance(secret, str):
        raise TypeError('expects the secret as a string, got %s' % type(secret).__name__)
    plaintext = secret.encode('utf-8')
    if iv is None:
        iv = _derived_iv(plaintext)
    if len(iv) != _BLOCK:
        raise ValueError('the IV must be %d bytes, got %d' % (_BLOCK, len(iv)))
    return base64.urlsafe_b64encode(bytes(iv) + _crypt(plaintext, bytes(iv))).decode('ascii').rstrip('=')


def reveal(obscured):
    """The secret an obscured value holds, as `rclone reveal` gives it; ValueError when it is not one."""
    if not isinstance(obscured, str) or not _URL_ALPHABET.match(obscured):
        raise ValueError('base64 decode failed when revealing password - is it obscured?')
    try:
        data = base64.urlsafe_b64decode(obscured + '=' * (-len(obscured) % 4))
    except ValueError as err:  # binascii.Error: a length no base64 text has
        raise ValueError('base64 decode failed when revealing password - is it obscured?: %s' % err) from err
    if len(data) < _BLOCK:
        raise ValueError('input too short when revealing password - is it obscured?')
    try:
        return _crypt(data[_BLOCK:], data[:_BLOCK]).decode('utf-8')
    except UnicodeDecodeError as err:
        raise ValueError('the revealed value is not UTF-8 text - is it obscured?') from err
