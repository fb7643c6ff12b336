# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build the local, signed NVIDIA apt repositories the roles' tests install from.

    python3 tests/nvidia_repo/build.py OUT_DIR        (e.g. build/nvidia-repo)

Produces two flat repositories laid out like NVIDIA's, holding packages with
the real names and versions (payloads from tests/nvidia_repo/payload/):

    OUT_DIR/cuda/debian12/x86_64/                 Packages(.gz) Release InRelease Release.gpg *.deb
    OUT_DIR/libnvidia-container/stable/deb/amd64/ Packages(.gz) Release InRelease Release.gpg *.deb
    OUT_DIR/nvidia-test.asc                       ASCII-armoured public key that signed both

The signing key is a throwaway one generated on first use in OUT_DIR/.gnupg
and kept across rebuilds. OUT_DIR/.stamp holds a hash of this script and the
payloads: when it matches, nothing is done.

Needs: dpkg-deb (dpkg), apt-ftparchive (apt-utils), gpg and gpg-agent (gnupg).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fcntl
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PAYLOAD = os.path.join(HERE, 'payload')
MAINTAINER = 'homelab.llm_server test double <nvidia-test-double@example.invalid>'
KEY_UID = 'NVIDIA test double (homelab.llm_server tests) <nvidia-test-double@example.invalid>'
ORIGIN = 'NVIDIA (test double)'
# Fixed timestamps inside the .deb files, so unchanged payloads give identical packages.
SOURCE_DATE_EPOCH = '1735689600'

CUDA_REPO = 'cuda/debian12/x86_64'
CONTAINER_REPO = 'libnvidia-container/stable/deb/amd64'
REPOS = {
    CUDA_REPO: {'label': 'NVIDIA CUDA',
                'description': 'Test double of developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64'},
    CONTAINER_REPO: {'label': 'libnvidia-container',
                     'description': 'Test double of nvidia.github.io/libnvidia-container/stable/deb/amd64'},
}

# Driver branches: upstream version -> CUDA version the driver supports.
DRIVERS = {'570.172.08': '12.8', '580.95.05': '13.0'}
CUDA_TOOLKITS = [
    # (full version, nvcc version, nvcc "Built on", nvcc "Build")
    ('12.8.1', '12.8.93', 'Fri_Feb_21_20:23:50_PST_2025', 'cuda_12.8.r12.8/compiler.35583870_0'),
    ('13.0.2', '13.0.88', 'Wed_Aug_20_01:58:59_PM_PDT_2025', 'cuda_13.0.r13.0/compiler.36424714_0'),
]
CUDNN = [('9.10.2.21', '12'), ('9.13.0.50', '13')]
CONTAINER_TOOLKIT = ['1.17.7', '1.17.8']

EXECUTABLE = 0o755
DATA = 0o644


class Package:
    """One binary package: control fields, files (dest -> (template, mode)), maintainer scripts."""

    def __init__(self, repo, name, version, section, description, depends=(), files=None,
                 scripts=None, subst=None):
        self.repo = repo
        self.name = name
        self.version = version
        self.section = section
        self.description = description
        self.depends = list(depends)
        self.files = dict(files or {})
        self.scripts = dict(scripts or {})
        self.subst = dict(subst or {})
        self.subst.setdefault('PACKAGE', name)
        self.files['/usr/share/doc/%s/copyright' % name] = ('common/copyright', DATA)

    @property
    def filename(self):
        return '%s_%s_amd64.deb' % (self.name, self.version)


def _adder(pkgs, repo, version, subst):
    """A function adding packages of one repository, version and substitutions to pkgs."""
    def add(name, section, description, **kw):
        pkgs.append(Package(repo, name, version, section, description, subst=subst, **kw))
    return add


def packages():
    """Every package of both repositories, as the test contract lists them."""
    pkgs = []
    for upstream, cuda_driver in DRIVERS.items():
        ver = upstream + '-1'
        pin = '(= %s)' % ver
        subst = {'VERSION': upstream, 'NVML_VERSION': upstream.rsplit('.', 1)[0],
                 'CUDA_DRIVER_VERSION': cuda_driver}

        drv = _adder(pkgs, CUDA_REPO, ver, subst)
        drv('nvidia-open', 'metapackages',
            'NVIDIA driver metapackage with open kernel modules (test double)',
            depends=['nvidia-driver ' + pin, 'nvidia-kernel-open-dkms ' + pin])
        drv('nvidia-driver', 'metapackages', 'NVIDIA driver metapackage (test double)',
            depends=['libnvidia-ml1 ' + pin, 'nvidia-persistenced ' + pin,
                     'nvidia-smi ' + pin, 'nvidia-modprobe ' + pin])
        drv('nvidia-kernel-open-dkms', 'kernel',
            'NVIDIA open kernel module DKMS source (test double, builds nothing)',
            files={'/usr/src/nvidia-%s/dkms.conf' % upstream: ('nvidia-kernel-open-dkms/dkms.conf', DATA)})
        drv('libnvidia-ml1', 'libs',
            'NVIDIA Management Library (test double: version file only, no libnvidia-ml.so.1)',
            files={'/usr/share/doc/libnvidia-ml1/VERSION': (None, DATA)})
        drv('nvidia-persistenced', 'utils', 'NVIDIA persistence daemon (test double)',
            files={'/usr/bin/nvidia-persistenced': ('nvidia-persistenced/nvidia-persistenced', EXECUTABLE),
                   '/lib/systemd/system/nvidia-persistenced.service':
                       ('nvidia-persistenced/nvidia-persistenced.service', DATA)},
            scripts={s: 'nvidia-persistenced/' + s for s in ('postinst', 'prerm', 'postrm')})
        drv('nvidia-smi', 'utils', 'NVIDIA System Management Interface (test double)',
            files={'/usr/bin/nvidia-smi': ('nvidia-smi/nvidia-smi', EXECUTABLE)})
        drv('nvidia-modprobe', 'utils', 'NVIDIA kernel module loader (test double)',
            files={'/usr/bin/nvidia-modprobe': ('nvidia-modprobe/nvidia-modprobe', EXECUTABLE)})

    for full, nvcc, built_on, build in CUDA_TOOLKITS:
        major, minor = full.split('.')[:2]
        series = '%s.%s' % (major, minor)
        root = '/usr/local/cuda-' + series
        subst = {'CUDA_VERSION': full, 'CUDA_SERIES': series, 'CUDA_MAJOR': major,
                 'CUDA_PRIORITY': str(int(major) * 10 + int(minor)),
                 'NVCC_VERSION': nvcc, 'NVCC_BUILT_ON': built_on, 'NVCC_BUILD': build}
        pkgs.append(Package(
            CUDA_REPO, 'cuda-toolkit-%s-%s' % (major, minor), full + '-1', 'devel',
            'CUDA Toolkit %s (test double: nvcc answers --version only)' % series, subst=subst,
            files={root + '/bin/nvcc': ('cuda-toolkit/nvcc', EXECUTABLE),
                   root + '/version.json': ('cuda-toolkit/version.json', DATA)},
            scripts={'postinst': 'cuda-toolkit/postinst', 'prerm': 'cuda-toolkit/prerm'}))

    for full, cuda_major in CUDNN:
        cmaj, cmin, cpatch = full.split('.')[:3]
        subst = {'CUDNN_VERSION': full, 'CUDA_MAJOR': cuda_major, 'CUDNN_MAJOR': cmaj,
                 'CUDNN_MINOR': cmin, 'CUDNN_PATCHLEVEL': cpatch}
        name = 'cudnn%s-cuda-%s' % (cmaj, cuda_major)
        # Per-CUDA include directory so both variants can be installed together.
        header = '/usr/include/x86_64-linux-gnu/cudnn%s-cuda-%s/cudnn_version_v%s.h' % (cmaj, cuda_major, cmaj)
        pkgs.append(Package(
            CUDA_REPO, name, full + '-1', 'libs',
            'cuDNN %s for CUDA %s (test double: version header only)' % (full, cuda_major), subst=subst,
            files={header: ('cudnn/cudnn_version_v9.h', DATA),
                   '/usr/share/doc/%s/VERSION' % name: (None, DATA)}))

    for upstream in CONTAINER_TOOLKIT:
        ver = upstream + '-1'
        pin = '(= %s)' % ver
        subst = {'VERSION': upstream}

        ctk = _adder(pkgs, CONTAINER_REPO, ver, subst)
        ctk('nvidia-container-toolkit', 'utils', 'NVIDIA Container toolkit (test double)',
            depends=['nvidia-container-toolkit-base ' + pin, 'libnvidia-container-tools ' + pin,
                     'libnvidia-container1 ' + pin],
            files={'/usr/bin/nvidia-container-runtime-hook':
                   ('nvidia-container-toolkit/nvidia-container-runtime-hook', EXECUTABLE)})
        ctk('nvidia-container-toolkit-base', 'utils',
            'NVIDIA Container Toolkit base: nvidia-ctk and nvidia-container-runtime (test double)',
            files={'/usr/bin/nvidia-ctk': ('nvidia-container-toolkit-base/nvidia-ctk', EXECUTABLE),
                   '/usr/bin/nvidia-container-runtime':
                       ('nvidia-container-toolkit-base/nvidia-container-runtime', EXECUTABLE)})
        ctk('libnvidia-container-tools', 'utils', 'NVIDIA container runtime library CLI (test double)',
            depends=['libnvidia-container1 (>= %s)' % ver],
            files={'/usr/bin/nvidia-container-cli': ('libnvidia-container-tools/nvidia-container-cli', EXECUTABLE)})
        ctk('libnvidia-container1', 'libs',
            'NVIDIA container runtime library (test double: version file only)',
            files={'/usr/share/doc/libnvidia-container1/VERSION': (None, DATA)})
    return pkgs


def render(template, pkg):
    """A payload template with @@KEY@@ filled in from the package; None means 'the version'."""
    if template is None:
        return (pkg.subst.get('VERSION') or pkg.subst.get('CUDNN_VERSION') or pkg.version) + '\n'
    with open(os.path.join(PAYLOAD, template), encoding='utf-8') as f:
        text = f.read()
    for key, value in pkg.subst.items():
        text = text.replace('@@%s@@' % key, value)
    if '@@' in text:
        raise SystemExit('build.py: unfilled placeholder in %s for %s %s' % (template, pkg.name, pkg.version))
    return text


def build_deb(pkg, dest_dir, scratch):
    """Lay out the package tree and run dpkg-deb on it."""
    root = os.path.join(scratch, '%s_%s' % (pkg.name, pkg.version))
    os.makedirs(os.path.join(root, 'DEBIAN'))
    size = 0
    for dest, (template, mode) in sorted(pkg.files.items()):
        path = root + dest
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = render(template, pkg).encode()
        with open(path, 'wb') as f:
            f.write(data)
        os.chmod(path, mode)
        size += len(data)
    for script, template in pkg.scripts.items():
        path = os.path.join(root, 'DEBIAN', script)
        with open(path, 'w', encoding='utf-8') as f:
            f.write(render(template, pkg))
        os.chmod(path, EXECUTABLE)
    fields = [('Package', pkg.name), ('Version', pkg.version), ('Architecture', 'amd64'),
              ('Maintainer', MAINTAINER), ('Installed-Size', str(max(1, (size + 1023) // 1024 + 4)))]
    if pkg.depends:
        fields.append(('Depends', ', '.join(pkg.depends)))
    long_description = ("\n Stand-in for NVIDIA's package of the same name, used by\n"
                        " homelab.llm_server's tests. It contains no NVIDIA software.")
    fields += [('Section', pkg.section), ('Priority', 'optional'), ('Homepage', 'https://www.nvidia.com/'),
               ('Description', pkg.description + long_description)]
    control = ''.join('%s: %s\n' % kv for kv in fields)
    with open(os.path.join(root, 'DEBIAN', 'control'), 'w', encoding='utf-8') as f:
        f.write(control)
    for dirpath, dirnames, dummy in os.walk(root):
        for d in dirnames:
            os.chmod(os.path.join(dirpath, d), 0o755)
    os.chmod(root, 0o755)
    env = dict(os.environ, SOURCE_DATE_EPOCH=SOURCE_DATE_EPOCH)
    run(['dpkg-deb', '--build', '--root-owner-group', '-Zxz', root, os.path.join(dest_dir, pkg.filename)], env=env)


def run(cmd, **kw):
    """Run a command; on failure, stop with its output."""
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)
    if proc.returncode != 0:
        raise SystemExit('build.py: %s failed (%d):\n%s%s' % (' '.join(cmd), proc.returncode, proc.stdout, proc.stderr))
    return proc.stdout


class Gpg:
    """gpg with a private home under OUT_DIR holding one throwaway signing key."""

    def __init__(self, home):
        self.home = home
        os.makedirs(home, mode=0o700, exist_ok=True)
        os.chmod(home, 0o700)
        self.env = dict(os.environ, GNUPGHOME=home, LC_ALL='C')

    def gpg(self, *args):
        return run(['gpg', '--batch', '--quiet', '--no-tty', '--pinentry-mode', 'loopback', '--passphrase', ''] +
                   list(args), env=self.env)

    def _secret_fingerprints(self):
        out = self.gpg('--with-colons', '--list-secret-keys')
        return [line.split(':')[9] for line in out.splitlines() if line.startswith('fpr:')]

    def fingerprint(self):
        """Fingerprint of the signing key, generated on first use."""
        fprs = self._secret_fingerprints()
        if not fprs:
            # Ed25519: instant to generate; apt's gpgv accepts it.
            self.gpg('--quick-gen-key', KEY_UID, 'ed25519', 'sign', 'never')
            fprs = self._secret_fingerprints()
        if not fprs:
            raise SystemExit('build.py: could not generate a signing key in %s' % self.home)
        return fprs[0]

    def sign(self, fpr, release):
        directory = os.path.dirname(release)
        self.gpg('--yes', '--local-user', fpr, '--digest-algo', 'SHA512', '--clearsign',
                 '--output', os.path.join(directory, 'InRelease'), release)
        self.gpg('--yes', '--local-user', fpr, '--digest-algo', 'SHA512', '--armor', '--detach-sign',
                 '--output', os.path.join(directory, 'Release.gpg'), release)

    def export(self, fpr):
        return self.gpg('--armor', '--export-options', 'export-minimal', '--export', fpr)

    def stop_agent(self):
        subprocess.run(['gpgconf', '--kill', 'gpg-agent'], env=self.env, capture_output=True, check=False)


def index_repo(repo_dir, meta):
    """Packages, Packages.gz and Release of one flat repository."""
    packages = run(['apt-ftparchive', 'packages', '.'], cwd=repo_dir)
    with open(os.path.join(repo_dir, 'Packages'), 'w', encoding='utf-8') as f:
        f.write(packages)
    with open(os.path.join(repo_dir, 'Packages.gz'), 'wb') as raw:
        with gzip.GzipFile(filename='', mode='wb', fileobj=raw, compresslevel=9, mtime=0) as gz:
            gz.write(packages.encode())
    # Flat repositories have no Suite or Codename (NVIDIA's have none either):
    # apt then checks nothing against the '/' suite of the sources entry.
    release = run(['apt-ftparchive',
                   '-o', 'APT::FTPArchive::Release::Origin=' + ORIGIN,
                   '-o', 'APT::FTPArchive::Release::Label=' + meta['label'],
                   '-o', 'APT::FTPArchive::Release::Architectures=amd64',
                   '-o', 'APT::FTPArchive::Release::Description=' + meta['description'],
                   'release', '.'], cwd=repo_dir)
    path = os.path.join(repo_dir, 'Release')
    with open(path, 'w', encoding='utf-8') as f:
        f.write(release)
    return path


def inputs_hash():
    """Hash of this script and every payload file (names and contents)."""
    digest = hashlib.sha256()
    files = [os.path.abspath(__file__)]
    for dirpath, dirnames, filenames in os.walk(PAYLOAD):
        dirnames.sort()
        files += [os.path.join(dirpath, n) for n in sorted(filenames)]
    for path in files:
        digest.update(os.path.relpath(path, HERE).encode() + b'\0')
        with open(path, 'rb') as f:
            digest.update(f.read() + b'\0')
    return digest.hexdigest()


def outputs_present(out):
    wanted = [os.path.join(out, 'nvidia-test.asc')]
    for repo in REPOS:
        wanted += [os.path.join(out, repo, n) for n in ('Packages', 'Packages.gz', 'Release', 'InRelease', 'Release.gpg')]
    return all(os.path.isfile(p) for p in wanted)


def build(out):
    pkgs = packages()
    gpg = Gpg(os.path.join(out, '.gnupg'))
    try:
        fpr = gpg.fingerprint()
        staging = tempfile.mkdtemp(prefix='.staging-', dir=out)
        try:
            scratch = os.path.join(staging, 'trees')
            for repo in REPOS:
                os.makedirs(os.path.join(staging, 'repos', repo))
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
                jobs = [pool.submit(build_deb, p, os.path.join(staging, 'repos', p.repo), scratch) for p in pkgs]
                for job in jobs:
                    job.result()
            for repo, meta in REPOS.items():
                gpg.sign(fpr, index_repo(os.path.join(staging, 'repos', repo), meta))
            # Swap the finished trees in; apt reads them only after this.
            for top in sorted({repo.split('/')[0] for repo in REPOS}):
                target = os.path.join(out, top)
                if os.path.lexists(target):
                    shutil.rmtree(target)
                os.rename(os.path.join(staging, 'repos', top), target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        key = gpg.export(fpr)
    finally:
        gpg.stop_agent()
    with open(os.path.join(out, 'nvidia-test.asc'), 'w', encoding='utf-8') as f:
        f.write(key)
    # Readable by apt's unprivileged _apt user once copied into a container.
    for dirpath, dirnames, filenames in os.walk(out):
        if os.path.basename(dirpath) == '.gnupg' or '/.gnupg/' in dirpath + '/':
            continue
        dirnames[:] = [d for d in dirnames if d != '.gnupg']
        os.chmod(dirpath, 0o755)
        for n in filenames:
            os.chmod(os.path.join(dirpath, n), 0o644)
    return len(pkgs)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('out_dir', help='output directory, e.g. build/nvidia-repo')
    parser.add_argument('--force', action='store_true', help='rebuild even if the stamp matches')
    args = parser.parse_args(argv)
    out = os.path.abspath(args.out_dir)
    os.makedirs(out, exist_ok=True)
    for tool in ('dpkg-deb', 'apt-ftparchive', 'gpg', 'gpgconf'):
        if shutil.which(tool) is None:
            raise SystemExit('build.py: %s not found: apt-get install dpkg apt-utils gnupg' % tool)
    # Concurrent callers (pytest and Molecule) wait for each other.
    with open(os.path.join(out, '.lock'), 'w', encoding='utf-8') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp_path = os.path.join(out, '.stamp')
        wanted = inputs_hash()
        try:
            with open(stamp_path, encoding='utf-8') as f:
                current = f.read().strip()
        except FileNotFoundError:
            current = None
        if current == wanted and outputs_present(out) and not args.force:
            print('nvidia test repositories up to date in %s' % out)
            return 0
        if os.path.exists(stamp_path):
            os.unlink(stamp_path)
        count = build(out)
        with open(stamp_path, 'w', encoding='utf-8') as f:
            f.write(wanted + '\n')
    print('built %d packages into %s' % (count, out))
    return 0


if __name__ == '__main__':
    sys.exit(main())
