# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-backup-manifest: what a tree holds, file by file, and whether a restored copy holds the same.

The restore drill (issue 23) checks a restored backup against a manifest kept outside the backup:
per path its type, mode, owner and group, and a file's size and sha256 or a link's target.
Symbolic links are recorded, never followed. A weekly drill restores only a part of the files:
`--part K --parts N` picks the paths whose hash falls in part K of N, so N weeks cover every file
and each week's part is the same on both sides.

    llm-backup-manifest write ROOT MANIFEST.json
    llm-backup-manifest check ROOT MANIFEST.json [--part K --parts N]

check prints the differences as JSON on standard output and exits 1 when there are any.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import stat
import sys

from llm_server_host import files, log

VERSION = 1
# Read in blocks: a model manifest or a Prometheus block may be large.
_BLOCK = 1 << 20
EXIT_DIFFERENT = 1
EXIT_ERROR = 2


class ManifestError(Exception):
    """A manifest that cannot be read, or is not one."""


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for block in iter(lambda: handle.read(_BLOCK), b''):
            digest.update(block)
    return digest.hexdigest()


def describe(path):
    """The manifest's entry of one path, read without following a link."""
    info = os.lstat(path)
    entry = {'mode': '%04o' % stat.S_IMODE(info.st_mode), 'uid': info.st_uid, 'gid': info.st_gid}
    if stat.S_ISLNK(info.st_mode):
        return dict(entry, type='link', target=os.readlink(path))
    if stat.S_ISDIR(info.st_mode):
        return dict(entry, type='dir')
    if stat.S_ISREG(info.st_mode):
        return dict(entry, type='file', size=info.st_size, sha256=_sha256(path))
    return dict(entry, type='other')


def build(root):
    """{relative path: entry} of every path under ROOT (ROOT itself as '.'), in sorted order."""
    entries = {'.': describe(root)}
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + names):
            path = os.path.join(folder, name)
            entries[os.path.relpath(path, root)] = describe(path)
    return dict(sorted(entries.items()))


def in_part(path, part, parts):
    """Whether PATH falls in part PART of PARTS: the same answer on every machine and every run."""
    return int(hashlib.sha256(path.encode('utf-8')).hexdigest()[:8], 16) % parts == part


def compare(expected, root, part=0, parts=1):
    """The differences between the manifest EXPECTED and the tree at ROOT, for the paths of one part:
    [{'path', 'problem', ...}], empty when the part is restored exactly."""
    result = compare_present({path: entry for path, entry in expected.items() if in_part(path, part, parts)}, root)
    # A path the backup never had is a difference too (a restore into a place that was not empty).
    for folder, dirs, names in os.walk(root):
        for name in dirs + names:
            path = os.path.relpath(os.path.join(folder, name), root)
            if path not in expected and in_part(path, part, parts):
                result['differences'].append({'path': path, 'problem': 'not in the manifest'})
    return result


def compare_present(expected, root):
    """The differences between the manifest EXPECTED and the same paths under ROOT, which may hold other paths too
    (a live tree: only what EXPECTED names is compared)."""
    differences = []
    for path, entry in sorted(expected.items()):
        try:
            found = describe(os.path.normpath(os.path.join(root, path)))
        except FileNotFoundError:
            differences.append({'path': path, 'problem': 'missing'})
            continue
        changed = {key: {'expected': value, 'found': found.get(key)}
                   for key, value in entry.items() if found.get(key) != value}
        if changed:
            differences.append({'path': path, 'problem': 'differs', 'fields': changed})
    return {'checked': len(expected), 'differences': differences}


def _parser():
    parser = argparse.ArgumentParser(prog='llm-backup-manifest', description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest='command', required=True)
    write = commands.add_parser('write', help='write the manifest of ROOT')
    write.add_argument('root')
    write.add_argument('manifest')
    check = commands.add_parser('check', help='compare ROOT with a manifest')
    check.add_argument('root')
    check.add_argument('manifest')
    check.add_argument('--part', type=int, default=0)
    check.add_argument('--parts', type=int, default=1)
    return parser


def main(argv=None):
    logger = log.setup('llm-backup-manifest')
    args = _parser().parse_args(argv)
    if not os.path.isdir(args.root):
        logger.error('%s is not a directory', args.root)
        return EXIT_ERROR
    if args.command == 'write':
        data = {'version': VERSION, 'entries': build(args.root)}
        files.write_atomically(args.manifest, json.dumps(data, indent=1, sort_keys=True) + '\n', mode=0o600)
        logger.info('%s: %d paths', args.manifest, len(data['entries']))
        return 0
    if args.parts < 1 or not 0 <= args.part < args.parts:
        logger.error('--part must be from 0 to --parts - 1, and --parts at least 1')
        return EXIT_ERROR
    try:
        manifest = files.read_settings(args.manifest, ManifestError)
        if manifest.get('version') != VERSION or not isinstance(manifest.get('entries'), dict):
            raise ManifestError('%s is not a manifest of version %d' % (args.manifest, VERSION))
    except ManifestError as exc:
        logger.error('%s', exc)
        return EXIT_ERROR
    result = compare(manifest['entries'], args.root, args.part, args.parts)
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write('\n')
    return EXIT_DIFFERENT if result['differences'] else 0


if __name__ == '__main__':
    sys.exit(main())
