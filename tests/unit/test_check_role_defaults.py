"""scripts/check-role-defaults.py: each kind of mismatch is reported with its fix, and the roles match."""

import pathlib
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check-role-defaults.py"


def make_role(roles, name, defaults, options, entry="main"):
    role = roles / name
    (role / "defaults").mkdir(parents=True)
    (role / "meta").mkdir()
    (role / "defaults" / "main.yml").write_text(yaml.safe_dump(defaults))
    specs = {"argument_specs": {entry: {"short_description": "x", "options": options}}}
    (role / "meta" / "argument_specs.yml").write_text(yaml.safe_dump(specs))


def run(roles):
    return subprocess.run([sys.executable, str(SCRIPT), str(roles)], capture_output=True, text=True, check=False)


def test_matching_role_passes(tmp_path):
    make_role(tmp_path, "good", {"good_port": 8080, "good_name": "x"},
              {"good_port": {"type": "int", "default": 8080}, "good_name": {"type": "str", "default": "x"},
               "good_key": {"type": "str", "required": True}})
    result = run(tmp_path)
    assert result.returncode == 0, result.stdout
    assert "1 roles, 2 variables, all match" in result.stdout


def test_undeclared_default(tmp_path):
    make_role(tmp_path, "r", {"r_port": 1, "r_secret": "s"}, {"r_port": {"type": "int", "default": 1}})
    result = run(tmp_path)
    assert result.returncode == 1
    assert "r: `r_secret` is in defaults/main.yml but no entry point declares it" in result.stdout


def test_differing_default(tmp_path):
    make_role(tmp_path, "r", {"r_port": 8080}, {"r_port": {"type": "int", "default": 8000}})
    result = run(tmp_path)
    assert result.returncode == 1
    assert "r: `r_port` defaults to 8000 in entry point main but defaults/main.yml says 8080" in result.stdout


def test_spec_default_missing_from_defaults(tmp_path):
    make_role(tmp_path, "r", {}, {"r_mode": {"type": "str", "default": "fast"}})
    result = run(tmp_path)
    assert result.returncode == 1
    assert "add `r_mode: 'fast'` there" in result.stdout


def test_required_option_with_a_default_value(tmp_path):
    make_role(tmp_path, "r", {"r_version": ""}, {"r_version": {"type": "str", "required": True}})
    result = run(tmp_path)
    assert result.returncode == 1
    assert "r: `r_version` is required in entry point main but has a value in defaults/main.yml" in result.stdout


def test_other_entry_point_declares_it(tmp_path):
    make_role(tmp_path, "r", {"r_state": "started"}, {"r_state": {"type": "str", "default": "started"}},
              entry="instance")
    assert run(tmp_path).returncode == 0


def test_shared_variables_live_in_the_specs_only(tmp_path):
    make_role(tmp_path, "r", {}, {"llm_server_allow_reboot": {"type": "bool", "default": False}})
    assert run(tmp_path).returncode == 0


def test_the_collection_roles_match():
    result = run(ROOT / "roles")
    assert result.returncode == 0, result.stdout
