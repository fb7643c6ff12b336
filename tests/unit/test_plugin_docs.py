"""Every plugin the collection ships has documentation that ansible-doc reads.

`ansible-doc -t filter homelab.llm_server.NAME` failed for filters without a
plugins/filter/NAME.yml; this test finds every filter name from the
FilterModule classes themselves (not from a list kept by hand) and every
module and callback file, and asks the real ansible-doc for all of them.
"""

import ast
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "plugins"
NAMESPACE = "homelab.llm_server"


def filter_names(path: pathlib.Path) -> list[str]:
    """The keys of the dict that FilterModule.filters() returns, read from the source."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "filters":
            for statement in ast.walk(node):
                if isinstance(statement, ast.Return) and isinstance(statement.value, ast.Dict):
                    return [key.value for key in statement.value.keys]
    raise AssertionError(f"{path}: no FilterModule.filters() returning a dict")


FILTERS = sorted(name for path in PLUGINS.glob("filter/*.py") for name in filter_names(path))
MODULES = sorted(path.stem for path in PLUGINS.glob("modules/*.py") if not path.stem.startswith("_"))
CALLBACKS = sorted(path.stem for path in PLUGINS.glob("callback/*.py") if not path.stem.startswith("_"))


def ansible_doc(kind: str, names: list[str]) -> dict:
    binary = pathlib.Path(sys.executable).parent / "ansible-doc"
    if not binary.exists():
        binary = shutil.which("ansible-doc")
    if not binary:
        pytest.skip("ansible-doc is not installed (make venv)")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    result = subprocess.run([str(binary), "-t", kind, "--json", *(f"{NAMESPACE}.{name}" for name in names)],
                            cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_filters_are_found():
    assert len(FILTERS) == len(set(FILTERS))
    assert {"watchdog_heat_errors", "watchdog_heat_per_gpu_errors", "capacity_plan"} <= set(FILTERS)


@pytest.mark.parametrize("name", FILTERS)
def test_every_filter_has_a_doc_file_named_after_it(name):
    doc_file = PLUGINS / "filter" / f"{name}.yml"
    assert doc_file.exists(), f"{name}: write {doc_file.relative_to(ROOT)} (DOCUMENTATION, EXAMPLES, RETURN)"
    doc = yaml.safe_load(doc_file.read_text())
    assert doc["DOCUMENTATION"]["name"] == name
    assert doc["DOCUMENTATION"]["short_description"]
    assert doc["DOCUMENTATION"]["version_added"]
    assert doc["EXAMPLES"].strip() and f"{NAMESPACE}.{name}" in doc["EXAMPLES"]
    assert doc["RETURN"]["_value"]["description"]


def test_no_filter_doc_without_a_filter():
    documented = {path.stem for path in PLUGINS.glob("filter/*.yml")}
    assert documented - set(FILTERS) == set()


@pytest.mark.parametrize("kind, names", [("filter", FILTERS), ("module", MODULES), ("callback", CALLBACKS)])
def test_ansible_doc_reads_every_plugin(kind, names):
    docs = ansible_doc(kind, names)
    assert sorted(docs) == sorted(f"{NAMESPACE}.{name}" for name in names)
    for name, doc in docs.items():
        assert doc["doc"]["short_description"], name
        assert doc["doc"].get("version_added"), name
