# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-proxy-holds: the proxy sends nothing to a held engine.

Each engine's `server` line in the proxy's upstreams is an include file that
this program writes: the line the nginx role rendered, marked `down` while
anyone holds the engine (the UPS on battery, the GPU watchdog, the owner's
`llm-server hold`). A held engine is stopped; without `down`, nginx would
still try it first and retry the refused request elsewhere.

  llm-proxy-holds sync --config /etc/llm-server/proxy-holds.json [--no-reload]
      Writes {engines_dir}/{name}.conf for every engine of the configuration,
      removes the files of engines no longer in it, and reloads nginx when a
      file changed and nginx runs (not with --no-reload: the nginx role
      reloads after its own checks). Prints one line per file it changed.
      Exit 0, 1 when the reload failed, 2 on a configuration error.

The configuration (written by the nginx role) is a JSON object:
  hold_dir      the holds (llm_server_host.holds's contract)
  engines_dir   where the include files go
  engines       {name: {"unit": "NAME.service", "server": "127.0.0.1:8001 max_fails=1 ..."}}
  systemctl     systemctl (a stand-in in the tests)

A systemd path unit runs `sync` whenever a hold file changes.

Standard library only: this runs on the target with the system python3.
"""

import argparse
import logging
import os
import re
import subprocess
import sys

from llm_server_host import holds as _holds
from llm_server_host import log as _log
from llm_server_host.files import read_settings, write_atomically

LOG = logging.getLogger('llm-proxy-holds')

NAME_RE = re.compile(r'^[A-Za-z0-9_.@-]+$')
SUFFIX = '.conf'
COMMAND_TIMEOUT_S = 60
# How many times one run syncs again because the holds changed while it ran.
MAX_ROUNDS = 10


class ConfigError(ValueError):
    """The configuration cannot be used."""


def load_config(path):
    config = read_settings(path, ConfigError)
    for key in ('hold_dir', 'engines_dir'):
        if not isinstance(config.get(key), str) or not config[key].startswith('/'):
            raise ConfigError('%s must be an absolute path, not %r' % (key, config.get(key)))
    engines = config.get('engines')
    if not isinstance(engines, dict):
        raise ConfigError('engines must be an object of engines by name')
    for name, engine in engines.items():
        if not NAME_RE.match(name):
            raise ConfigError('engine name %r may hold only letters, digits and _ . @ -' % name)
        if not isinstance(engine, dict) or not all(isinstance(engine.get(key), str) and engine[key].strip()
                                                   for key in ('unit', 'server')):
            raise ConfigError('engine %s needs a unit and a server line' % name)
        if ';' in engine['server'] or '\n' in engine['server']:
            raise ConfigError("engine %s: the server line must be one directive's arguments" % name)
    config.setdefault('systemctl', 'systemctl')
    return config


def render(engine, holders):
    """The include file of one engine: its server line, down while held."""
    if not holders:
        return 'server %s;\n' % engine['server']
    # Who holds it is not written: a second holder changes nothing for nginx (no reload).
    return ('# Held (llm-server status says by whom): nginx sends it nothing until it is released.\n'
            'server %s down;\n' % engine['server'])


def sync(config, holds):
    """Writes the include files for HOLDS (holds.read's); returns the lines that say what changed."""
    os.makedirs(config['engines_dir'], mode=0o755, exist_ok=True)
    changes = []
    for name, engine in sorted(config['engines'].items()):
        holders = _holds.holders_of(holds, engine['unit'])
        text = render(engine, holders)
        path = os.path.join(config['engines_dir'], name + SUFFIX)
        try:
            with open(path, encoding='utf-8') as handle:
                if handle.read() == text:
                    continue
        except FileNotFoundError:
            pass
        write_atomically(path, text)
        changes.append('%s: %s' % (name, 'down, held by %s' % _holds.describe(holders) if holders else 'up'))
    for entry in sorted(os.listdir(config['engines_dir'])):
        if entry.endswith(SUFFIX) and entry[:-len(SUFFIX)] not in config['engines']:
            os.unlink(os.path.join(config['engines_dir'], entry))
            changes.append('%s: removed' % entry[:-len(SUFFIX)])
    return changes


def reload_nginx(config):
    """Reloads nginx when it runs; returns None, or why the reload failed."""
    systemctl = config['systemctl']
    try:
        if subprocess.run([systemctl, 'is-active', '--quiet', 'nginx.service'], timeout=COMMAND_TIMEOUT_S,
                          check=False).returncode != 0:
            return None
        proc = subprocess.run([systemctl, 'reload', 'nginx.service'], capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if proc.returncode == 0 else 'rc %d: %s' % (proc.returncode, (proc.stderr or proc.stdout).strip())


def main(argv=None):
    parser = argparse.ArgumentParser(prog='llm-proxy-holds', description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='command', required=True)
    run = sub.add_parser('sync', help="mark the held engines down in the proxy's upstreams")
    run.add_argument('--config', required=True)
    run.add_argument('--no-reload', action='store_true')
    args = parser.parse_args(argv)
    _log.setup(LOG.name)
    # systemd's path unit does not start this service again for a hold
    # written while it runs (PathChanged= while the service is active is
    # lost): the holds read before each round are read again after it, and
    # a change made meanwhile is synced in another round.
    for _round in range(MAX_ROUNDS):
        try:
            config = load_config(args.config)
            before, problems = _holds.read(config['hold_dir'])
            for problem in problems:
                LOG.warning('hold file left out: %s', problem)
            changes = sync(config, before)
        except (ConfigError, OSError) as exc:
            LOG.error('%s', exc)
            return 2
        for line in changes:
            print(line, flush=True)
        if changes and not args.no_reload:
            why = reload_nginx(config)
            if why:
                LOG.error('nginx was not reloaded: %s', why)
                return 1
        if _holds.read(config['hold_dir'])[0] == before:
            return 0
    LOG.warning('the holds kept changing over %d rounds; the next change syncs again', MAX_ROUNDS)
    return 0


if __name__ == '__main__':
    sys.exit(main())
