"""One version everywhere, fragments that lint, and a CHANGELOG.rst that antsibull-changelog wrote.

galaxy.yml's version is the newest release in changelogs/changelog.yaml,
every plugin's version_added is a release there, and CHANGELOG.rst is what
`antsibull-changelog generate` renders from changelog.yaml (so nobody edits
it by hand). A new feature adds a fragment under changelogs/fragments/;
`antsibull-changelog release` folds the fragments into the next release.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIX = "antsibull-changelog is in requirements.txt: .venv/bin/pip install -r requirements.txt"


def antsibull_changelog() -> str:
    binary = pathlib.Path(sys.executable).parent / "antsibull-changelog"
    found = str(binary) if binary.exists() else shutil.which("antsibull-changelog")
    assert found, FIX
    return found


def run(args, cwd):
    env = dict(os.environ, PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run([antsibull_changelog(), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          check=False, timeout=300)


def releases() -> dict:
    return yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())["releases"]


def version_key(version: str):
    return tuple(int(part) for part in re.findall(r"\d+", version))


def galaxy_version() -> str:
    return yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]


def test_galaxy_version_is_the_newest_release():
    assert releases(), "changelogs/changelog.yaml has no release"
    assert galaxy_version() == max(releases(), key=version_key)


def test_every_version_added_is_a_release():
    """A release, or galaxy.yml's version (a plugin added before that release is cut)."""
    known = set(releases()) | {galaxy_version()}
    found = []
    for path in sorted((ROOT / "plugins").rglob("*")):
        if path.suffix not in (".py", ".yml") or not path.is_file():
            continue
        for version in re.findall(r"^\s*version_added:\s*['\"]?([0-9][^'\"\s]*)", path.read_text(), re.MULTILINE):
            found.append(version)
            assert version in known, f"{path.relative_to(ROOT)}: version_added {version} is neither a release nor galaxy.yml's version ({sorted(known)})"
    assert found


def test_fragments_lint():
    result = run(["lint"], ROOT)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_a_broken_fragment_fails_the_lint(tmp_path):
    shutil.copytree(ROOT / "changelogs", tmp_path / "changelogs")
    shutil.copy(ROOT / "galaxy.yml", tmp_path)
    (tmp_path / "changelogs" / "fragments" / "broken.yml").write_text("---\nnew_things:\n  - not a section\n")
    result = run(["lint"], tmp_path)
    assert "broken.yml" in result.stdout + result.stderr


def test_changelog_rst_is_generated_from_changelog_yaml(tmp_path):
    shutil.copytree(ROOT / "changelogs", tmp_path / "changelogs")
    shutil.copy(ROOT / "galaxy.yml", tmp_path)
    result = run(["generate"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    expected = (tmp_path / "CHANGELOG.rst").read_text()
    assert (ROOT / "CHANGELOG.rst").read_text() == expected, (
        "CHANGELOG.rst differs from changelogs/changelog.yaml: run antsibull-changelog generate")
