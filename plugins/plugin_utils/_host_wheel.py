# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The wheel of the host programs (host/ in the collection), built on the controller.

A pure-Python wheel is a zip archive with a .dist-info folder (PEP 427,
PEP 491): this writes one from host/pyproject.toml's [project] table and
the package's .py files, stamped with the collection's version, so neither
the controller nor the host needs a build backend or a package index. The
bytes depend only on the inputs (sorted entries, fixed timestamps and
modes): the same collection gives the same wheel, and a copy task that
sends it changes nothing on a second run.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import zipfile

try:
    import tomllib
except ImportError:  # Python 3.10 and older: no controller of ansible-core 2.19
    tomllib = None

# Zip's earliest date: the bytes must not depend on when the files were checked out.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
GENERATOR = 'homelab.llm_server host_wheel'


class HostWheelError(Exception):
    pass


def collection_version(collection_root):
    """The collection's version: MANIFEST.json where it is installed, galaxy.yml in a checkout."""
    manifest = os.path.join(collection_root, 'MANIFEST.json')
    if os.path.isfile(manifest):
        with open(manifest, encoding='utf-8') as f:
            return json.load(f)['collection_info']['version']
    galaxy = os.path.join(collection_root, 'galaxy.yml')
    try:
        with open(galaxy, encoding='utf-8') as f:
            match = re.search(r'^version:\s*["\']?([^"\'\s#]+)', f.read(), re.M)
    except OSError as e:
        raise HostWheelError('neither MANIFEST.json nor galaxy.yml can be read in %s: %s' % (collection_root, e))
    if not match:
        raise HostWheelError('%s names no version' % galaxy)
    return match.group(1)


def read_project(source_dir):
    """pyproject.toml's [project] table and its [tool.llm-server-host] table, with what a wheel needs checked."""
    if tomllib is None:
        raise HostWheelError('building the host wheel needs Python 3.11 or newer on the controller (tomllib)')
    path = os.path.join(source_dir, 'pyproject.toml')
    try:
        with open(path, 'rb') as f:
            document = tomllib.load(f)
    except (OSError, ValueError) as e:
        raise HostWheelError('%s cannot be read: %s' % (path, e))
    project = document.get('project', {})
    if not re.fullmatch(r'[A-Za-z0-9][A-Za-z0-9._-]*', project.get('name', '')):
        raise HostWheelError('%s: [project] needs a name' % path)
    return project, document.get('tool', {}).get('llm-server-host', {})


def normalized(name):
    """The distribution name as wheel file names and .dist-info folders spell it."""
    return re.sub(r'[-_.]+', '_', name).lower()


def package_files(source_dir, package):
    """(path in the wheel, bytes) of every .py file of PACKAGE under SOURCE_DIR, sorted."""
    root = os.path.join(source_dir, package)
    if not os.path.isfile(os.path.join(root, '__init__.py')):
        raise HostWheelError('%s is not a package (no __init__.py)' % root)
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != '__pycache__')
        for name in sorted(files):
            if name.endswith('.py'):
                path = os.path.join(folder, name)
                with open(path, 'rb') as f:
                    found.append((os.path.relpath(path, source_dir).replace(os.sep, '/'), f.read()))
    return sorted(found)


def shared_files(tool, package, module_utils_dir):
    """(path in the wheel, bytes) of the collection's module_utils the package shares, as PACKAGE.collection.NAME."""
    found = []
    for name in tool.get('collection-module-utils', []):
        if not re.fullmatch(r'_?[a-z][a-z0-9_]*', name):
            raise HostWheelError('collection-module-utils names %r, not a module of plugins/module_utils' % name)
        path = os.path.join(module_utils_dir, name + '.py')
        try:
            with open(path, 'rb') as f:
                found.append(('%s/collection/%s.py' % (package, name), f.read()))
        except OSError as e:
            raise HostWheelError('%s (named in collection-module-utils) cannot be read: %s' % (path, e))
    return found


def metadata(project, version):
    lines = ['Metadata-Version: 2.1', 'Name: %s' % project['name'], 'Version: %s' % version]
    if project.get('description'):
        lines.append('Summary: %s' % project['description'])
    if isinstance(project.get('license'), dict) and project['license'].get('text'):
        lines.append('License: %s' % project['license']['text'])
    if project.get('requires-python'):
        lines.append('Requires-Python: %s' % project['requires-python'])
    lines += ['Requires-Dist: %s' % requirement for requirement in project.get('dependencies', [])]
    return '\n'.join(lines) + '\n'


def entry_points(project):
    scripts = project.get('scripts', {})
    if not scripts:
        return None
    return '[console_scripts]\n' + ''.join('%s = %s\n' % item for item in sorted(scripts.items()))


def record_hash(data):
    return 'sha256=' + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode('ascii')


def build(source_dir, version, module_utils_dir=None):
    """(file name, bytes, console script names) of the wheel of SOURCE_DIR's project at VERSION.

    MODULE_UTILS_DIR: the collection's plugins/module_utils (by default beside SOURCE_DIR).
    """
    project, tool = read_project(source_dir)
    if module_utils_dir is None:
        module_utils_dir = os.path.join(source_dir, '..', 'plugins', 'module_utils')
    if not re.fullmatch(r'[0-9]+(\.[0-9]+)*([a-z0-9.+-]*)', version):
        raise HostWheelError('%r is not a version a wheel can carry' % version)
    name = normalized(project['name'])
    dist_info = '%s-%s.dist-info' % (name, version)
    entries = sorted(package_files(source_dir, name) + shared_files(tool, name, module_utils_dir))
    entries.append((dist_info + '/METADATA', metadata(project, version).encode()))
    entries.append((dist_info + '/WHEEL', ('Wheel-Version: 1.0\nGenerator: %s\nRoot-Is-Purelib: true\n'
                                           'Tag: py3-none-any\n' % GENERATOR).encode()))
    points = entry_points(project)
    if points:
        entries.append((dist_info + '/entry_points.txt', points.encode()))
    record = ''.join('%s,%s,%d\n' % (path, record_hash(data), len(data)) for path, data in entries)
    entries.append((dist_info + '/RECORD', (record + dist_info + '/RECORD,,\n').encode()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, 'w', compression=zipfile.ZIP_DEFLATED) as wheel:
        for path, data in entries:
            info = zipfile.ZipInfo(path, date_time=ZIP_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    return '%s-%s-py3-none-any.whl' % (name, version), buffer.getvalue(), sorted(project.get('scripts', {}))


def write(dest_dir, file_name, data):
    """Write DATA as DEST_DIR/FILE_NAME unless it holds those bytes already; whether it wrote."""
    path = os.path.join(dest_dir, file_name)
    try:
        with open(path, 'rb') as f:
            if f.read() == data:
                return path, False
    except OSError:
        pass
    os.makedirs(dest_dir, exist_ok=True)
    # Renamed into place: a play on another host reads it whole or not at all.
    temporary = '%s.%d.tmp' % (path, os.getpid())
    with open(temporary, 'wb') as f:
        f.write(data)
    os.replace(temporary, path)
    return path, True
