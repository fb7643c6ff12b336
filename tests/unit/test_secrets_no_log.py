# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Secrets never reach a log and the files holding them are private, for every role.

A secret is a variable whose argument spec says no_log (the Telegram bot token, the Hugging Face token,
the MOK password) or one of the collection's other secrets (the API keys, the UPS passwords). Every task
that writes one into a file (a template that reads it, or a copy/lineinfile/command naming it) must have
no_log, and a template holding one must be written 0600 or 0640. Tasks that only check a secret
(ansible.builtin.assert) may name it: their messages are reviewed to name the variable, never its value.
"""

from __future__ import annotations

import os
import re

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
ROLES = os.path.join(ROOT, 'roles')
# Secrets that are not options of an argument spec with no_log: the API keys, and the UPS passwords the ups
# role makes on the host (read into ups_password_files, kept as _ups_passwords).
OTHER_SECRETS = ('nginx_api_keys', '_ups_passwords', 'ups_password_files')
CHECK_ONLY = ('ansible.builtin.assert', 'assert', 'ansible.builtin.fail', 'fail')
PRIVATE_MODES = ('0600', '0640', '0400', '0440')


def _spec_secrets():
    found = set()
    for role in os.listdir(ROLES):
        path = os.path.join(ROLES, role, 'meta', 'argument_specs.yml')
        if not os.path.exists(path):
            continue
        with open(path) as handle:
            specs = yaml.safe_load(handle)['argument_specs']
        for entry in specs.values():
            for name, option in (entry.get('options') or {}).items():
                if option.get('no_log'):
                    found.add(name)
    return found


SECRETS = tuple(sorted(_spec_secrets() | set(OTHER_SECRETS)))
SECRET_RE = re.compile(r'\b(%s)\b' % '|'.join(re.escape(name) for name in SECRETS))
JINJA_RE = re.compile(r'{{.*?}}|{%.*?%}', re.S)


def _tasks(items, inherited_no_log=False):
    """Every task of a task list, blocks opened, with the no_log it runs under."""
    for item in items or []:
        if not isinstance(item, dict):
            continue
        no_log = bool(item.get('no_log', inherited_no_log))
        if 'block' in item:
            for key in ('block', 'rescue', 'always'):
                yield from _tasks(item.get(key), no_log)
        else:
            yield item, no_log


def _task_files():
    for role in sorted(os.listdir(ROLES)):
        for sub in ('tasks', 'handlers'):
            folder = os.path.join(ROLES, role, sub)
            if not os.path.isdir(folder):
                continue
            for name in sorted(os.listdir(folder)):
                if name.endswith('.yml'):
                    yield role, os.path.join(folder, name)


def _secret_templates():
    """{(role, template name): [secrets it reads]}."""
    found = {}
    for role in sorted(os.listdir(ROLES)):
        folder = os.path.join(ROLES, role, 'templates')
        for base, _dirs, files in os.walk(folder):
            for name in files:
                path = os.path.join(base, name)
                with open(path) as handle:
                    names = sorted(set(SECRET_RE.findall(handle.read())))
                if names:
                    found[(role, os.path.relpath(path, folder))] = names
    return found


def _module(task):
    for key in task:
        if key in ('name', 'when', 'vars', 'no_log', 'tags', 'register', 'notify', 'become', 'loop', 'loop_control',
                   'changed_when', 'failed_when', 'until', 'retries', 'delay', 'delegate_to', 'check_mode',
                   'environment', 'listen', 'ignore_errors', 'run_once', 'args'):
            continue
        return key, task[key]
    return None, None


def test_the_secrets_are_known():
    assert {'monitoring_telegram_bot_token', 'vllm_hf_token', 'nvidia_driver_mok_password'} <= set(SECRETS)
    # Each of the others is still used somewhere in the roles (a renamed one would silently go unchecked).
    used = ''
    for base, _dirs, files in os.walk(ROLES):
        for name in files:
            if name.endswith(('.yml', '.j2')):
                with open(os.path.join(base, name)) as handle:
                    used += handle.read()
    assert [name for name in OTHER_SECRETS if not re.search(r'\b%s\b' % re.escape(name), used)] == []


def test_every_secret_is_written_under_no_log_and_privately():
    templates = _secret_templates()
    assert ('monitoring', 'alertmanager.yml.j2') in templates, 'the Telegram token is in alertmanager.yml'
    rendered = set()
    problems = []
    for role, path in _task_files():
        with open(path) as handle:
            tasks = yaml.safe_load(handle)
        for task, no_log in _tasks(tasks):
            module, args = _module(task)
            if module is None or module in CHECK_ONLY:
                continue
            where = '%s (%s)' % (task.get('name'), os.path.relpath(path, ROOT))
            src = args.get('src') if isinstance(args, dict) else None
            secrets = templates.get((role, src)) if module.endswith('template') and src else None
            if secrets:
                rendered.add((role, src))
                mode = str(args.get('mode', ''))
                if mode not in PRIVATE_MODES:
                    problems.append('%s writes %s with mode %r, not private' % (where, ', '.join(secrets), mode))
            # A secret used in an expression; its name in prose is no leak.
            named = [name for expr in JINJA_RE.findall(yaml.safe_dump({module: args}, width=1000))
                     for name in SECRET_RE.findall(expr)]
            if (secrets or named) and not no_log:
                problems.append('%s handles %s without no_log' % (where, ', '.join(secrets or sorted(set(named)))))
    assert problems == []
    assert rendered == set(templates), 'a template holding a secret that no task writes: %s' % (
        sorted(set(templates) - rendered))


@pytest.mark.parametrize('text', ['{{ monitoring_telegram_bot_token }}', 'token: {{ vllm_hf_token | b64encode }}',
                                  '{% for k in nginx_api_keys %}'])
def test_the_secret_pattern_finds_a_use(text):
    assert [name for expr in JINJA_RE.findall(text) for name in SECRET_RE.findall(expr)]
