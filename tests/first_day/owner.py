# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The owner of the first_day scenario: runs the README's quick start as written.

    python3 owner.py quick-start --workdir DIR --edits EDITS.json
    python3 owner.py run N --workdir DIR

The commands are read from the README's "Quick start" section (its ```sh
blocks), so the README and the test cannot drift. They run in DIR/clone, a
copy of this checkout as the owner's `git clone` would leave it (the
checkout's files linked, inventories/ copied), with an environment free of
Molecule's and the test runner's Ansible settings. Three commands are not
run as written, each for a reason outside the project:

- `git clone ...`: the test is that clone (nothing can be cloned here);
- `python3 -m venv .venv`: the clone shares the checkout's venv; the
  `pip install -r requirements-controller.txt` after it runs as written;
- `ansible-galaxy collection install -r requirements.yml`: no Galaxy server
  can be reached; instead every collection it names must already be
  installed (the `ansible` package brings them), with a version it accepts.

`$EDITOR FILE` runs with EDITOR set to this script's `edit` command, which
makes the edits of EDITS.json (the owner's: addresses, the model, keys) and
nothing else; the keys come from the README's own key command. Passwords
that ansible-vault and `--ask-vault-pass` ask for are typed on stdin.

`quick-start` runs everything up to the playbook (the inventory copied and
edited, the vault made and encrypted); `run N` runs the playbook command and
writes DIR/run-N.json: its exit code, wall time, the recap per host and the
lines of its output that say why it stopped.

Then the owner moves to the collection as the README's "Install" installs
it (its ```sh and ```ini blocks):

    python3 owner.py install --workdir DIR        # the tarball, DIR/project with ansible.cfg and the inventory
    python3 owner.py run N --installed --workdir DIR

`install` builds the tarball from this checkout (the stand-in for a
release), installs it as written into the owner's ~/.ansible, and keeps the
inventory of the quick start; `run N --installed` runs the README's
`homelab.llm_server.site` command there, and run-N.json names the playbook
file Ansible loaded (from the installed copy, not this checkout).

After the quick start, the owner runs the commands of "Operating it", also
read from the README:

    python3 owner.py plan --workdir DIR --report-dir OUT     # "Change a model": plan.yml
    python3 owner.py health --workdir DIR --out OUT.json     # "Check health": the ssh commands
    python3 owner.py console --workdir DIR --out OUT.png     # "Check health": ssh -L, then the page
    python3 owner.py call --name NAME --model M --cacert F   # the quick start's curl, printed

`ssh llm-home` finds the server through an ~/.ssh/config written from the
owner's hosts.yml; the tunnel's local end is a free port instead of 9090.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
VAULT_PASSWORD = 'first-day vault passphrase'
# Kept from the test runner's environment: the strategy the README suggests
# exporting (mitogen), and the test hosts' connection deadline (the
# Makefile's ANSIBLE_TIMEOUT: Ansible's 10 s timed out run 3's SSH connection
# at a load average of 12); nothing else of Ansible's or Molecule's.
KEEP_ENV = ('ANSIBLE_STRATEGY', 'ANSIBLE_STRATEGY_PLUGINS', 'ANSIBLE_TIMEOUT')
RECAP = re.compile(r'^(?P<host>\S+)\s+:\s+(?P<counts>(?:\w+=\d+\s*)+)$')


def readme_blocks(section: str, languages: tuple[str, ...] = ('sh', 'bash', 'shell'),
                  readme: Path = REPO / 'README.md') -> list[str]:
    """The code blocks of one section of the README in these languages, in order."""
    text = readme.read_text()
    heading = re.search(r'^(?P<level>#+) %s\b.*$' % re.escape(section), text, re.MULTILINE)
    if not heading:
        raise SystemExit('README.md has no "%s" section' % section)
    # The section ends at the next heading of its level or above.
    match = re.match(r'(?P<body>.*?)(?=^#{1,%d} |\Z)' % len(heading.group('level')), text[heading.end():],
                     re.MULTILINE | re.DOTALL)
    return re.findall(r'^```(?:%s)\n(.*?)^```' % '|'.join(languages), match.group('body'), re.MULTILINE | re.DOTALL)


def readme_commands(section: str, readme: Path = REPO / 'README.md') -> list[str]:
    """The shell commands of one section of the README, in order (comments dropped)."""
    commands = []
    for block in readme_blocks(section, readme=readme):
        for line in re.sub(r'\\\n\s*', '', block).splitlines():
            line = re.sub(r'\s+#\s.*$', '', line).strip()
            if line and not line.startswith('#'):
                commands.append(line)
    return commands


def quick_start_commands(readme: Path = REPO / 'README.md') -> list[str]:
    """The shell commands of the README's quick start, in order (comments dropped)."""
    return readme_commands('Quick start', readme)


def owner_env(workdir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(('ANSIBLE_', 'MOLECULE_', 'PYTEST_')) or key in KEEP_ENV}
    env.pop('PYTHONPATH', None)
    env['HOME'] = str(workdir / 'home')
    env['PATH'] = os.pathsep.join([str(REPO / '.venv' / 'bin'), env.get('PATH', '/usr/bin:/bin')])
    return env


def make_clone(workdir: Path) -> Path:
    """DIR/clone: the checkout's files linked, its inventories copied (the owner writes there)."""
    clone = workdir / 'clone'
    if clone.exists():
        subprocess.run(['rm', '-rf', str(clone)], check=True)
    clone.mkdir(parents=True)
    (workdir / 'home').mkdir(exist_ok=True)
    for entry in REPO.iterdir():
        if entry.name in ('.git', 'inventories', '.cache', 'build'):
            continue
        (clone / entry.name).symlink_to(entry)
    (clone / 'inventories').mkdir()
    subprocess.run(['cp', '-r', str(REPO / 'inventories' / 'example'), str(clone / 'inventories' / 'example')],
                   check=True)
    return clone


def check_collections(clone: Path, env: dict[str, str]) -> list[str]:
    """Instead of `ansible-galaxy collection install -r requirements.yml`: each one is there already."""
    wanted = yaml.safe_load((clone / 'requirements.yml').read_text())['collections']
    proc = subprocess.run([str(REPO / '.venv' / 'bin' / 'ansible-galaxy'), 'collection', 'list', '--format', 'json'],
                          cwd=clone, env=env, capture_output=True, text=True, check=True)
    installed = {}
    for collections in json.loads(proc.stdout).values():
        for name, info in collections.items():
            installed.setdefault(name, info.get('version'))
    missing = [item['name'] for item in wanted if item['name'] not in installed]
    if missing:
        raise SystemExit('requirements.yml names collections that are not installed: %s' % ', '.join(missing))
    return ['%s %s' % (item['name'], installed[item['name']]) for item in wanted]


def run_shell(command: str, clone: Path, env: dict[str, str], stdin: str = '', log=None) -> subprocess.CompletedProcess:
    proc = subprocess.run(['bash', '-euo', 'pipefail', '-c', command], cwd=clone, env=env, input=stdin,
                          capture_output=True, text=True, check=False)
    if log is not None:
        log.write('$ %s\n%s%s\n' % (command, proc.stdout, proc.stderr))
    if proc.returncode != 0:
        raise SystemExit('quick start command failed (%d): %s\n%s%s'
                         % (proc.returncode, command, proc.stdout, proc.stderr))
    return proc


def quick_start(workdir: Path, edits_file: Path) -> None:
    commands = quick_start_commands()
    playbook = [c for c in commands if 'ansible-playbook' in c and 'playbooks/site.yml' in c]
    if len(playbook) != 1:
        raise SystemExit('the quick start must have one site.yml command, it has %d' % len(playbook))
    clone = make_clone(workdir)
    env = owner_env(workdir)
    env['EDITOR'] = '%s %s edit --edits %s' % (shlex.quote(sys.executable), shlex.quote(__file__),
                                               shlex.quote(str(edits_file)))
    done = []
    keys = []
    with (workdir / 'quick-start.log').open('w') as log:
        for command in commands[:commands.index(playbook[0])]:
            if command.startswith('git clone'):
                done.append({'command': command, 'ran': False, 'why': 'the test runs in a copy of this checkout'})
                continue
            if 'ansible-galaxy collection install' in command:
                found = check_collections(clone, env)
                done.append({'command': command, 'ran': False, 'why': 'no Galaxy server: checked installed',
                             'collections': found})
                continue
            if command.startswith('python3 -m venv .venv && '):
                command = command.split(' && ', 1)[1]
            stdin = '%s\n%s\n' % (VAULT_PASSWORD, VAULT_PASSWORD) if 'ansible-vault' in command else ''
            if '$EDITOR' in command:
                env['OWNER_API_KEYS'] = json.dumps(keys)
            proc = run_shell(command, clone, env, stdin=stdin, log=log)
            if command.startswith('cp -r inventories/example inventories/home'):
                # The quick start's "edit" step comes right after the copy.
                edit_inventory(clone, json.loads(edits_file.read_text()))
            if 'secrets' in command and proc.stdout.startswith('sk-'):
                # The README's key command, once per client the example lists.
                keys.append(proc.stdout.strip())
                keys.append(run_shell(command, clone, env, log=log).stdout.strip())
            done.append({'command': command, 'ran': True})
        if not keys:
            raise SystemExit('the quick start has no command that makes an API key')
        if '$ANSIBLE_VAULT;' not in (clone / 'inventories' / 'home' / 'group_vars' / 'gpu_servers' / 'vault.yml'
                                     ).read_text().splitlines()[0]:
            raise SystemExit('the vault is not encrypted after the quick start')
    (workdir / 'quick-start.json').write_text(json.dumps({'commands': done, 'playbook': playbook[0],
                                                         'api_keys': keys}, indent=1))


def install(workdir: Path) -> None:
    """The README's "Install" as a collection, for run 3: the release tarball (built from this checkout,
    as a release would be) installed as written into the owner's ~/.ansible, in a directory of their own
    with the README's ansible.cfg and the inventory they made in the quick start."""
    release, project = workdir / 'release', workdir / 'project'
    # The owner's account has no collection installed yet: what an earlier scenario run left there (Molecule's
    # destroy prunes files, not folders) would make `collection install` skip as "already installed".
    for path in (release, project, workdir / 'home' / '.ansible' / 'collections'):
        shutil.rmtree(path, ignore_errors=True)
    for path in (release, project):
        path.mkdir(parents=True)
    env = owner_env(workdir)
    version = yaml.safe_load((REPO / 'galaxy.yml').read_text())['version']
    subprocess.run([str(REPO / '.venv' / 'bin' / 'ansible-galaxy'), 'collection', 'build', '--output-path',
                    str(release), str(REPO)], cwd=release, env=env, capture_output=True, text=True, check=True)
    tarball = release / ('homelab-llm_server-%s.tar.gz' % version)
    commands = readme_commands('Install')
    playbook = section_command('Install', r'^ansible-playbook .*homelab\.llm_server\.site\b')
    configs = readme_blocks('Install', ('ini',))
    if len(configs) != 1:
        raise SystemExit('README.md\'s "Install" must have one ansible.cfg block, it has %d' % len(configs))
    done = []
    with (workdir / 'install.log').open('w') as log:
        for command in commands[:commands.index(playbook)]:
            command = command.replace('homelab-llm_server-<version>.tar.gz', shlex.quote(str(tarball)))
            run_shell(command, project, env, log=log)
            done.append(command)
    (project / 'ansible.cfg').write_text(configs[0])
    # The owner keeps the inventory (and vault) they made and edited in the quick start.
    shutil.rmtree(project / 'inventories' / 'home')
    shutil.copytree(workdir / 'clone' / 'inventories' / 'home', project / 'inventories' / 'home')
    installed = workdir / 'home' / '.ansible' / 'collections' / 'ansible_collections' / 'homelab' / 'llm_server'
    manifest = json.loads((installed / 'MANIFEST.json').read_text())
    if manifest['collection_info']['version'] != version:
        raise SystemExit('installed %s, not %s' % (manifest['collection_info']['version'], version))
    (workdir / 'install.json').write_text(json.dumps({'commands': done, 'playbook': playbook, 'cwd': str(project),
                                                     'collection': str(installed)}, indent=1))


def edit(path: Path, edits_file: Path) -> None:
    """The owner at their editor: EDITS.json says, per file of the inventory, which values to set."""
    edits = json.loads(edits_file.read_text())
    relative = os.path.relpath(path.resolve(), Path.cwd().resolve())
    wanted = edits.get(relative.replace('inventories/home/', '', 1))
    if wanted is None:
        raise SystemExit('the owner has no edits for %s' % relative)
    keys = json.loads(os.environ.get('OWNER_API_KEYS', '[]'))
    content = yaml.safe_load(path.read_text()) or {}
    for name, value in wanted.items():
        if isinstance(value, str) and value.startswith('@api_key:'):
            value = keys[int(value.split(':', 1)[1])]
        content[name] = value
    path.write_text('---\n' + yaml.safe_dump(content, sort_keys=False))


def edit_inventory(clone: Path, edits: dict) -> None:
    """The quick start's "edit" step on the copied inventory (addresses, the model, the UPS, the name)."""
    for relative, values in edits.items():
        if relative.endswith('vault.yml'):
            continue
        path = clone / 'inventories' / 'home' / relative
        if relative == 'hosts.yml':
            inventory = yaml.safe_load(path.read_text())
            for group, hosts in values.items():
                for host, host_values in hosts.items():
                    inventory['all']['children'][group]['hosts'][host].update(host_values)
            path.write_text('---\n' + yaml.safe_dump(inventory, sort_keys=False))
            continue
        content = yaml.safe_load(path.read_text()) if path.exists() else {}
        content.update(values)
        path.write_text('---\n' + yaml.safe_dump(content, sort_keys=False))


def task_lines(output: str):
    """Each line of a run's log after the first task, with the task it belongs to."""
    task = ''
    for line in output.splitlines():
        if line.startswith('TASK [') or line.startswith('RUNNING HANDLER ['):
            task = line.split('[', 1)[1].rsplit(']', 1)[0]
        elif task:
            yield task, line


def failed_tasks(output: str, keep: int = 3) -> list[str]:
    """The last tasks that failed in a run's log, each as 'TASK [name] error',
    so a failure's summary names it (errors ignored by the play are left out)."""
    failures: list[str] = []
    for task, line in task_lines(output):
        if line.startswith('[ERROR]: '):
            failures.append('TASK [%s] %s' % (task, line[len('[ERROR]: '):][:300]))
        elif line.strip() == '...ignoring' and failures:
            failures.pop()
    return failures[-keep:]


def changed_tasks(output: str, keep: int = 10) -> list[str]:
    """The first tasks that reported a change, each as 'TASK [name] on host': what a
    run that should change nothing changed."""
    changed: list[str] = []
    for task, line in task_lines(output):
        if line.startswith('changed: [') and len(changed) < keep:
            entry = 'TASK [%s] on %s' % (task, line.split('[', 1)[1].split(']', 1)[0])
            if entry not in changed:
                changed.append(entry)
    return changed


def timings_env(path: Path) -> dict[str, str]:
    """What enables the harness's callback that times a run per role and task into path."""
    return {'ANSIBLE_CALLBACK_PLUGINS': str(Path(__file__).parent / 'callback_plugins'),
            'ANSIBLE_CALLBACKS_ENABLED': 'run_timings', 'RUN_TIMINGS_FILE': str(path)}


def run(workdir: Path, number: int, installed: bool = False) -> dict:
    """Run N of the owner's site.yml command: the quick start's in the clone, or with installed, the
    README's "Install" one in the directory install() made, on the collection installed from the tarball."""
    info = json.loads((workdir / ('install.json' if installed else 'quick-start.json')).read_text())
    cwd = Path(info['cwd']) if installed else workdir / 'clone'
    env = owner_env(workdir)
    # Observed, not changed: where the run spends its time, for the report.
    timings_path = workdir / ('run-%d-timings.json' % number)
    env.update(timings_env(timings_path))
    log_path = workdir / ('run-%d.log' % number)
    started = time.monotonic()
    with log_path.open('w') as log:
        proc = subprocess.run(['bash', '-euo', 'pipefail', '-c', info['playbook']], cwd=cwd, env=env,
                              input='%s\n' % VAULT_PASSWORD, stdout=log, stderr=subprocess.STDOUT, text=True,
                              check=False)
    seconds = time.monotonic() - started
    output = log_path.read_text()
    timings = json.loads(timings_path.read_text()) if timings_path.exists() else {}
    recap = {}
    for line in output.split('PLAY RECAP', 1)[-1].splitlines():
        match = RECAP.match(line.strip())
        if match:
            recap[match.group('host')] = {k: int(v) for k, v in re.findall(r'(\w+)=(\d+)', match.group('counts'))}
    reasons = [line.strip() for line in output.splitlines()
               if re.search(r'fatal:|FAILED!|ERROR|reboot required|msg:', line)][:40]
    result = {'run': number, 'command': info['playbook'], 'playbook': timings.get('playbook'),
              'rc': proc.returncode, 'seconds': round(seconds, 1), 'recap': recap,
              'failures': failed_tasks(output), 'changed_tasks': changed_tasks(output),
              'slowest_roles': dict(list(timings.get('roles', {}).items())[:6]), 'reasons': reasons, 'log': str(log_path),
              'tail': output.splitlines()[-60:]}
    (workdir / ('run-%d.json' % number)).write_text(json.dumps(result, indent=1))
    # Kept after the scenario's destroy, beside the scenario runner's logs.
    kept = REPO / 'build' / 'logs' / 'first_day'
    kept.mkdir(parents=True, exist_ok=True)
    (kept / log_path.name).write_text(output)
    if timings_path.exists():
        (kept / timings_path.name).write_text(timings_path.read_text())
    print(json.dumps({k: v for k, v in result.items() if k != 'tail'}))
    return result


def owner_inventory(clone: Path) -> tuple[dict, dict]:
    """The owner's hosts.yml and group_vars/all/vars.yml, as edited."""
    home = clone / 'inventories' / 'home'
    return (yaml.safe_load((home / 'hosts.yml').read_text()),
            yaml.safe_load((home / 'group_vars' / 'all' / 'vars.yml').read_text()))


def write_ssh_config(workdir: Path) -> Path:
    """The owner's ~/.ssh/config: `ssh llm-home` reaches the server as the inventory says."""
    hosts, common = owner_inventory(workdir / 'clone')
    lines = []
    for group in hosts['all']['children'].values():
        for name, values in (group.get('hosts') or {}).items():
            lines += ['Host %s' % name, '  HostName %s' % values['ansible_host'],
                      '  User %s' % common['ansible_user'], '  IdentityFile %s' % common['ansible_ssh_private_key_file'],
                      '  UserKnownHostsFile %s' % (workdir / 'home' / '.ssh' / 'known_hosts'),
                      '  BatchMode yes', '']
    path = workdir / 'home' / '.ssh' / 'config'
    path.write_text('\n'.join(lines))
    path.chmod(0o600)
    return path


def ssh_env(workdir: Path) -> dict[str, str]:
    """The owner's environment for `ssh llm-home ...`: ssh reads ~/.ssh/config from the account's home
    directory, not from $HOME, so an `ssh` first on PATH passes the owner's config with -F."""
    config = write_ssh_config(workdir)
    bindir = workdir / 'home' / 'bin'
    bindir.mkdir(exist_ok=True)
    wrapper = bindir / 'ssh'
    wrapper.write_text('#!/bin/sh\nexec /usr/bin/ssh -F %s "$@"\n' % shlex.quote(str(config)))
    wrapper.chmod(0o755)
    env = owner_env(workdir)
    env['PATH'] = os.pathsep.join([str(bindir), env['PATH']])
    return env


def section_command(section: str, pattern: str) -> str:
    found = [c for c in readme_commands(section) if re.search(pattern, c)]
    if len(found) != 1:
        raise SystemExit('README.md\'s "%s" has %d commands matching %r, not one' % (section, len(found), pattern))
    return found[0]


def plan(workdir: Path, report_dir: Path) -> None:
    """The README's plan command ("Change a model") as written, its report also kept as a file."""
    command = section_command('Change a model', r'playbooks/plan\.yml')
    report_dir.mkdir(parents=True, exist_ok=True)
    with (workdir / 'plan.log').open('w') as log:
        run_shell('%s -e plan_report_dir=%s' % (command, shlex.quote(str(report_dir))), workdir / 'clone',
                  owner_env(workdir), stdin='%s\n' % VAULT_PASSWORD, log=log)


def health(workdir: Path, out: Path) -> None:
    """The README's "Check health" commands that ask the server over SSH, as written; their output as JSON."""
    env = ssh_env(workdir)
    results = []
    for command in readme_commands('Check health'):
        words = shlex.split(command)
        if words[0] != 'ssh' or '-L' in words:
            continue
        proc = run_shell(command, workdir / 'clone', env)
        results.append({'command': command, 'output': proc.stdout})
    if not results:
        raise SystemExit('README.md\'s "Check health" has no command run over ssh')
    out.write_text(json.dumps(results, indent=1))


def backups(workdir: Path, out: Path) -> None:
    """The README's "Back up and restore" command that lists the snapshots, as written; its output kept. (The
    rollback beside it would undo run 2, which run 3 must find unchanged.)"""
    command = section_command('Back up and restore', r'llm-backup list$')
    proc = run_shell(command, workdir / 'clone', ssh_env(workdir))
    out.write_text(json.dumps({'command': command, 'output': proc.stdout}, indent=1))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


def console(workdir: Path, out: Path) -> None:
    """The README's console page: its `ssh -L` command, then the page rendered in headless Chromium.

    The local end of the tunnel is a free port instead of 9090 (the test host may run scenarios side by
    side); the rest of the command is the README's."""
    env = ssh_env(workdir)
    command = section_command('Check health', r'^ssh -L ')
    match = re.match(r'^ssh -L (?P<local>\d+):(?P<remote>[^ ]+) (?P<host>\S+)$', command)
    if not match:
        raise SystemExit('the README\'s tunnel command has changed: %s' % command)
    port = free_port()
    argv = ['ssh', '-N', '-o', 'ExitOnForwardFailure=yes', '-L', '%d:%s' % (port, match.group('remote')),
            match.group('host')]
    tunnel = subprocess.Popen(argv, cwd=workdir / 'clone', env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            if tunnel.poll() is not None:
                raise SystemExit('%s exited %d: %s' % (' '.join(argv), tunnel.returncode, tunnel.stderr.read()))
            try:
                socket.create_connection(('127.0.0.1', port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit('the tunnel of %s did not open within 30 s' % ' '.join(argv)) from None
                time.sleep(0.1)
        page = 'http://127.0.0.1:%d/consoles/llm-overview.html' % port
        # The page's time control reads its range from the fragment: the last 10 minutes.
        fragment = '#pctc' + urllib.parse.quote(json.dumps({'duration': 600, 'endTime': 0}))
        proc = subprocess.run([sys.executable, str(REPO / 'tests' / 'monitoring' / 'screenshot.py'), '--url',
                               page + fragment, '--out', str(out)], capture_output=True, text=True, check=False)
        print(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise SystemExit('the console page through the README\'s tunnel: screenshot.py exited %d' % proc.returncode)
    finally:
        tunnel.terminate()
        tunnel.wait(timeout=10)


def call(name: str, model: str, cacert: str) -> None:
    """The quick start's curl command (step 5) for the owner's name and model: print it.

    A public CA's certificate needs no --cacert; the test's ACME server is not one."""
    command = section_command('Quick start', r'^curl ')
    command = command.replace('https://llm.example.org', 'https://%s' % name).replace('"qwen3-32b"', '"%s"' % model)
    print(command.replace('curl ', 'curl --fail-with-body --cacert %s ' % shlex.quote(cacert), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='what', required=True)
    start = sub.add_parser('quick-start')
    start.add_argument('--workdir', type=Path, required=True)
    start.add_argument('--edits', type=Path, required=True)
    again = sub.add_parser('run')
    again.add_argument('number', type=int)
    again.add_argument('--workdir', type=Path, required=True)
    again.add_argument('--installed', action='store_true',
                       help='from the directory `install` made, on the collection installed from the tarball')
    installer = sub.add_parser('install')
    installer.add_argument('--workdir', type=Path, required=True)
    editor = sub.add_parser('edit')
    editor.add_argument('path', type=Path)
    editor.add_argument('--edits', type=Path, required=True)
    sub.add_parser('commands')
    planner = sub.add_parser('plan')
    planner.add_argument('--workdir', type=Path, required=True)
    planner.add_argument('--report-dir', type=Path, required=True)
    checker = sub.add_parser('health')
    checker.add_argument('--workdir', type=Path, required=True)
    checker.add_argument('--out', type=Path, required=True)
    lister = sub.add_parser('backups')
    lister.add_argument('--workdir', type=Path, required=True)
    lister.add_argument('--out', type=Path, required=True)
    page = sub.add_parser('console')
    page.add_argument('--workdir', type=Path, required=True)
    page.add_argument('--out', type=Path, required=True)
    caller = sub.add_parser('call')
    caller.add_argument('--name', required=True)
    caller.add_argument('--model', required=True)
    caller.add_argument('--cacert', required=True)
    args = parser.parse_args()
    if args.what == 'quick-start':
        quick_start(args.workdir, args.edits)
    elif args.what == 'run':
        run(args.workdir, args.number, args.installed)
    elif args.what == 'install':
        install(args.workdir)
    elif args.what == 'edit':
        edit(args.path, args.edits)
    elif args.what == 'plan':
        plan(args.workdir, args.report_dir)
    elif args.what == 'health':
        health(args.workdir, args.out)
    elif args.what == 'backups':
        backups(args.workdir, args.out)
    elif args.what == 'console':
        console(args.workdir, args.out)
    elif args.what == 'call':
        call(args.name, args.model, args.cacert)
    else:
        print('\n'.join(quick_start_commands()))


if __name__ == '__main__':
    main()
