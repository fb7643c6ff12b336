"""make test-changed: the checks of what changed against origin/main, for the loop of one change.

    python3 scripts/test-changed.py [--base REF] [--plan] [--with SCENARIO ...]

What changed: the files that differ between the working tree and the merge
base of REF (origin/main by default) and HEAD, committed or not, and the
untracked files git does not ignore. From them:

- lint: ansible-lint on the changed YAML of roles, playbooks, scenarios and
  inventories;
- role-defaults: the roles' defaults, specs and generated docs agree (when a
  role changed);
- sanity: ansible-test sanity on the changed files;
- unit: the unit tests that changed, or that name a changed file (its path,
  its name without suffix, or its role);
- scenarios: each scenario whose inputs changed. A scenario's inputs are its
  own folder, the roles, playbooks, plugins and test files it names (and
  what those name in turn), and the harness every scenario shares. The
  owner's whole path (first_day) depends on every role through site.yml; it
  runs here only when its own inputs change (the README's quick start, the
  example inventory, site.yml, its folder), or with --with first_day. CI
  runs every scenario.

--plan prints the selection and why, and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLLECTION = 'homelab.llm_server'
# Every scenario runs through these: a change here runs them all.
HARNESS = ('tests/molecule/create.yml', 'tests/molecule/destroy.yml', '.config/molecule/', 'ansible.cfg', 'galaxy.yml',
           'meta/runtime.yml', 'scripts/build-test-image.sh', 'requirements.txt', 'requirements-controller.txt')
# Inputs make builds and hands to the scenarios through the environment: a
# change to what builds one runs the scenarios whose molecule.yml names it.
BUILT_INPUTS = {'LLM_SERVER_VLLM_WHEELS': ('tests/vllm_cpu/requirements.lock',),
                'LLM_SERVER_VLLM_VENV': ('tests/vllm_cpu/requirements.lock', 'scripts/build-vllm-venv.sh',
                                         'tests/vllm_cpu/build-venv.yml', 'roles/vllm/tasks/install_venv.yml')}
# Names too common to say which unit tests a file concerns.
COMMON_STEMS = {'README', 'CHANGELOG', 'Makefile', 'defaults', 'argument_specs', 'molecule', 'create', 'destroy',
                'prepare', 'converge', 'verify', 'handlers', 'config', 'requirements', 'validate', 'install',
                'service', 'files', 'templates'}
# Scenarios that walk the whole of site.yml: only their own inputs select them.
WHOLE_PATH = {'first_day': ('README.md', 'inventories/example/', 'playbooks/site.yml', 'tests/first_day/',
                            'requirements.yml')}
REFERENCE = re.compile(r'%s\.(?P<name>[a-z_0-9]+)|\brole:\s*[\'"]?(?:%s\.)?(?P<role>[a-z_0-9]+)|'
                       r'(?:\.\./)+(?P<path>[A-Za-z0-9_./-]+)|(?P<playbook>playbooks/[a-z_0-9]+\.yml)'
                       % (re.escape(COLLECTION), re.escape(COLLECTION)))
IMPORT = re.compile(r'^\s*(?:from|import)\s+(?:ansible_collections\.homelab\.llm_server\.plugins\.module_utils\.|'
                    r'\.+module_utils\.|\.|)(?P<name>_[a-z_0-9]+)', re.MULTILINE)
MODULE_UTIL = re.compile(r'module_utils[./](?P<name>_[a-z_0-9]+)')
PLUGIN_UTIL = re.compile(r'plugin_utils import (?P<name>_[a-z_0-9]+)')
# The host programs' wheel: the host_wheel action builds it from host/, which
# also carries the module_utils that host/pyproject.toml names.
HOST_WHEEL_ACTION = 'plugins/action/host_wheel.py'
HOST_MODULE_UTILS = re.compile(r'^collection-module-utils\s*=\s*\[(?P<names>[^\]]*)\]', re.MULTILINE)


def git(*argv: str) -> str:
    return subprocess.run(['git', *argv], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def changed_files(base: str) -> list[str]:
    try:
        merge_base = git('merge-base', base, 'HEAD').strip()
    except subprocess.CalledProcessError:
        raise SystemExit('make test-changed: git knows no %s to compare with (BASE=main, or fetch origin)' % base) from None
    files = set(git('diff', '--name-only', merge_base).split())
    files |= set(git('ls-files', '--others', '--exclude-standard').split())
    return sorted(files)


def plugin_names() -> dict[str, list[str]]:
    """Each name a play can give (homelab.llm_server.NAME) to the plugin files that answer it."""
    names: dict[str, list[str]] = {}
    for path in sorted((ROOT / 'plugins').glob('*/*.py')):
        if path.parent.name == 'module_utils' or path.name == '__init__.py':
            continue
        names.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
        if path.parent.name == 'filter':
            # A filter file's names are the keys of its FilterModule.filters().
            for name in re.findall(r"'([a-z_0-9]+)':\s*[a-z_0-9]+\s*[,}]", path.read_text()):
                names.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return names


def texts(path: Path):
    files = [path] if path.is_file() else sorted(p for p in path.rglob('*') if p.is_file())
    for file in files:
        if '__pycache__' in file.parts:
            continue
        try:
            yield file, file.read_text()
        except (UnicodeDecodeError, OSError):
            continue


def tracked_files() -> set[str]:
    return set(git('ls-files').split())


def without_comments(file: Path, text: str) -> str:
    """YAML and shell comments name files in prose; only what runs counts."""
    if file.suffix in ('.yml', '.yaml', '.sh', '.j2', '.cfg'):
        return '\n'.join(re.sub(r'(^|\s)#(?!\}).*$', '', line) for line in text.splitlines())
    return text


def closure(start: list[str], plugins: dict[str, list[str]], tracked: set[str]) -> set[str]:
    """The repository paths (files, or folders ending in /) that `start` depends on, transitively."""
    folders = {str(Path(f).parent) + '/' for f in tracked}
    seen: set[str] = set()
    pending = list(start)
    while pending:
        item = pending.pop()
        if item in seen or (item not in tracked and item not in folders):
            continue
        seen.add(item)
        path = ROOT / item.rstrip('/')
        for file, text in texts(path):
            if str(file.relative_to(ROOT)) not in tracked:
                continue
            text = without_comments(file, text)
            base = file.parent
            # Documentation runs nothing; Python names other code by its imports alone.
            references = [] if file.suffix in ('.md', '.py', '.rst') else REFERENCE.finditer(text)
            for match in references:
                if match.group('name') or match.group('role'):
                    name = match.group('name') or match.group('role')
                    if (ROOT / 'roles' / name).is_dir():
                        pending.append('roles/%s/' % name)
                    pending.extend(plugins.get(name, []))
                elif match.group('playbook'):
                    pending.append(match.group('playbook'))
                else:
                    target = (base / ('../' * match.group(0).count('../')) / match.group('path')).resolve()
                    try:
                        relative = target.relative_to(ROOT)
                    except ValueError:
                        continue
                    parts = relative.parts
                    # A folder of tests/: the whole folder (its files use each other); in tests/doubles/,
                    # the double's folder. tests/molecule/ holds the harness and clients: the file alone.
                    depth = 3 if parts[:2] == ('tests', 'doubles') else 2
                    if parts[:1] == ('tests',) and len(parts) > depth and parts[1] != 'molecule':
                        pending.append('/'.join(parts[:depth]) + '/')
                    elif len(parts) >= 2:
                        pending.append(str(relative) + ('/' if target.is_dir() else ''))
            names = MODULE_UTIL.findall(text) + (IMPORT.findall(text) if file.suffix == '.py' else [])
            if file.name == 'pyproject.toml':
                for listed in HOST_MODULE_UTILS.findall(text):
                    names += re.findall(r'"(_[a-z_0-9]+)"', listed)
            pending.extend('plugins/module_utils/%s.py' % name for name in names
                           if (ROOT / 'plugins' / 'module_utils' / ('%s.py' % name)).exists())
            if file.suffix == '.py':
                pending.extend('plugins/plugin_utils/%s.py' % name for name in PLUGIN_UTIL.findall(text))
            if str(file.relative_to(ROOT)) == HOST_WHEEL_ACTION:
                pending.append('host/')
            if file.name == 'main.yml' and file.parent.name == 'meta':
                for name in re.findall(r'role:\s*(?:%s\.)?([a-z_0-9]+)' % re.escape(COLLECTION), text):
                    pending.append('roles/%s/' % name)
    return seen


def hits(inputs: set[str], files: list[str]) -> list[str]:
    return [f for f in files if any(f == i or (i.endswith('/') and f.startswith(i)) for i in inputs)]


def select_scenarios(files: list[str], wanted: list[str]) -> dict[str, list[str]]:
    plugins = plugin_names()
    tracked = tracked_files() | set(files)
    chosen: dict[str, list[str]] = {}
    harness = [f for f in files if f.startswith(HARNESS)]
    for scenario in sorted(p.parent.name for p in (ROOT / 'molecule').glob('*/molecule.yml')):
        if scenario in wanted:
            chosen[scenario] = ['asked for']
            continue
        if scenario in WHOLE_PATH:
            why = hits(set(WHOLE_PATH[scenario]) | {'molecule/%s/' % scenario}, files)
        else:
            why = hits(closure(['molecule/%s/' % scenario], plugins, tracked), files)
        config = (ROOT / 'molecule' / scenario / 'molecule.yml').read_text()
        why += [f for name, built_from in BUILT_INPUTS.items() if '${%s}' % name in config
                for f in built_from if f in files and f not in why]
        if why or harness:
            chosen[scenario] = (why + harness)[:4]
    return chosen


def select_unit_tests(files: list[str]) -> list[str]:
    tests = sorted((ROOT / 'tests' / 'unit').rglob('test_*.py'))
    if any(f.startswith('tests/unit/') and Path(f).name == 'conftest.py' for f in files):
        return [str(t.relative_to(ROOT)) for t in tests]
    needles = set()
    for f in files:
        path = Path(f)
        needles.add(f)
        if path.parts[0] == 'roles' and len(path.parts) > 2:
            needles.add('roles/%s' % path.parts[1])
            needles.add('.%s' % path.parts[1])
        elif path.parts[0] == 'molecule' and len(path.parts) > 2:
            needles.add('molecule/%s' % path.parts[1])
        if len(path.stem) >= 5 and path.stem not in COMMON_STEMS:
            needles.add(path.stem)
    chosen = []
    for test in tests:
        relative = str(test.relative_to(ROOT))
        text = test.read_text()
        if relative in files or any(needle in text for needle in needles):
            chosen.append(relative)
    return chosen


def run(title: str, argv: list[str]) -> None:
    print('\n== %s: %s' % (title, ' '.join(argv)), flush=True)
    proc = subprocess.run(argv, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise SystemExit('make test-changed: %s failed (exit %d)' % (title, proc.returncode))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--base', default=os.environ.get('BASE', 'origin/main'))
    parser.add_argument('--plan', action='store_true', help='print what would run and why; run nothing')
    parser.add_argument('--with', dest='wanted', action='append', default=[], metavar='SCENARIO',
                        help='also run this scenario')
    args = parser.parse_args()

    files = changed_files(args.base)
    existing = [f for f in files if (ROOT / f).is_file()]
    yaml_files = [f for f in existing if f.endswith(('.yml', '.yaml'))
                  and f.startswith(('roles/', 'playbooks/', 'molecule/', 'inventories/'))]
    roles_changed = any(f.startswith('roles/') for f in files)
    sanity_files = [f for f in existing if not f.startswith(('tests/sysfs/', 'docs/', 'changelogs/'))]
    unit = select_unit_tests(files)
    scenarios = select_scenarios(files, args.wanted)
    times = {}
    report = ROOT / 'build' / 'test-times' / 'molecule.json'
    if report.exists():
        times = {name: result.get('seconds', 0) for name, result in json.loads(report.read_text()).get(
            'scenarios', {}).items()}

    print('Changed against %s: %d files' % (args.base, len(files)))
    print('  lint: %s' % (', '.join(yaml_files) or 'nothing'))
    print('  role-defaults: %s' % ('yes' if roles_changed else 'no'))
    print('  sanity: %d files' % len(sanity_files))
    print('  unit: %s' % (', '.join(Path(t).name for t in unit) or 'nothing'))
    print('  scenarios:%s' % ('' if scenarios else ' none'))
    for name, why in scenarios.items():
        took = times.get(name)
        print('    %-24s %s%s' % (name, ', '.join(why), '  (last run %d:%02d)' % divmod(int(took), 60) if took else ''))
    skipped = [name for name in WHOLE_PATH if name not in scenarios]
    if skipped and roles_changed:
        print('  not run here (CI runs it; --with NAME runs it here): %s' % ', '.join(skipped))
    if args.plan:
        return 0

    bindir = ROOT / '.venv' / 'bin'
    if yaml_files:
        run('lint', [str(bindir / 'ansible-lint'), '--profile', 'production', *yaml_files])
    if roles_changed:
        run('role-defaults', [str(bindir / 'python'), 'scripts/check-role-defaults.py'])
        run('role docs', [str(bindir / 'python'), 'scripts/role-docs.py', '--check'])
    if sanity_files:
        run('sanity', ['bash', 'scripts/sanity.sh', *sanity_files])
    if unit:
        run('unit', [str(bindir / 'pytest'), '-q', *unit])
    if scenarios:
        run('molecule', ['make', 'molecule', 'SCENARIOS=%s' % ' '.join(scenarios)])
    print('\nmake test-changed: passed (%d scenarios, %d unit test files)' % (len(scenarios), len(unit)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
