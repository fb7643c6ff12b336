"""scripts/check-role-defaults.py: each kind of mismatch is reported with its fix, and the roles match."""

import pathlib
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "check-role-defaults.py"


def make_role(roles, name, defaults, options, entry="main", more_entries=None):
    role = roles / name
    (role / "defaults").mkdir(parents=True)
    (role / "meta").mkdir()
    (role / "defaults" / "main.yml").write_text(yaml.safe_dump(defaults))
    specs = {"argument_specs": {entry: {"short_description": "x", "options": options}}}
    specs["argument_specs"].update(more_entries or {})
    (role / "meta" / "argument_specs.yml").write_text(yaml.safe_dump(specs))


def run(roles):
    return subprocess.run([sys.executable, str(SCRIPT), str(roles)], capture_output=True, text=True, check=False)


def problems(result):
    return [line for line in result.stdout.splitlines() if not line.startswith("role defaults:")]


def test_matching_role_passes(tmp_path):
    make_role(tmp_path, "good", {"good_port": 8080, "good_name": "{{ inventory_hostname }}", "good_extra": None},
              {"good_port": {"type": "int", "default": 8080},
               "good_name": {"type": "str", "default": "{{ inventory_hostname }}"},
               "good_extra": {"type": "str"},
               "good_key": {"type": "str", "required": True}})
    make_role(tmp_path, "other", {"other_on": True}, {"other_on": {"type": "bool", "default": True}})
    result = run(tmp_path)
    assert result.returncode == 0, result.stdout
    assert result.stdout.strip() == "role defaults: 2 roles, 4 variables, all match"


def test_undeclared_default(tmp_path):
    make_role(tmp_path, "r", {"r_port": 1, "r_secret": "s"}, {"r_port": {"type": "int", "default": 1}})
    result = run(tmp_path)
    assert result.returncode == 1
    assert problems(result) == [
        f"r: `r_secret` is in defaults/main.yml but no entry point declares it: "
        f"add `r_secret` to {tmp_path}/r/meta/argument_specs.yml options"]
    assert result.stdout.splitlines()[-1] == "role defaults: 1 mismatch(es) in 1 roles"


def test_differing_default(tmp_path):
    make_role(tmp_path, "r", {"r_port": 8080}, {"r_port": {"type": "int", "default": 8000}})
    result = run(tmp_path)
    assert result.returncode == 1
    assert problems(result) == [
        f"r: `r_port` defaults to 8000 in entry point main but defaults/main.yml says 8080: "
        f"set default of `r_port` in {tmp_path}/r/meta/argument_specs.yml (entry point main) to 8080"]


def test_a_bool_is_not_a_number(tmp_path):
    make_role(tmp_path, "r", {"r_on": 1}, {"r_on": {"type": "raw", "default": True}})
    result = run(tmp_path)
    assert result.returncode == 1
    assert "`r_on` defaults to true in entry point main but defaults/main.yml says 1" in result.stdout


def test_templated_strings_compare_as_text(tmp_path):
    make_role(tmp_path, "r", {"r_dir": "{{ r_root }}/data"}, {"r_dir": {"type": "str", "default": "{{ r_root}}/data"}})
    result = run(tmp_path)
    assert result.returncode == 1
    assert 'set default of `r_dir`' in result.stdout
    assert 'to "{{ r_root }}/data"' in result.stdout


def test_spec_default_missing_from_defaults(tmp_path):
    make_role(tmp_path, "r", {}, {"r_mode": {"type": "str", "default": "fast"}})
    result = run(tmp_path)
    assert result.returncode == 1
    assert problems(result) == [
        f"r: `r_mode` has a default in entry point main but is not in defaults/main.yml: "
        f'add `r_mode: "fast"` to {tmp_path}/r/defaults/main.yml']


def test_default_value_the_specs_do_not_document(tmp_path):
    make_role(tmp_path, "r", {"r_mode": "fast"}, {"r_mode": {"type": "str"}})
    result = run(tmp_path)
    assert result.returncode == 1
    assert problems(result) == [
        f'r: `r_mode` is "fast" in defaults/main.yml but no entry point gives it a default: '
        f'set default of `r_mode` in {tmp_path}/r/meta/argument_specs.yml to "fast"']


def test_required_option_with_a_default_value(tmp_path):
    make_role(tmp_path, "r", {"r_version": ""}, {"r_version": {"type": "str", "required": True}})
    result = run(tmp_path)
    assert result.returncode == 1
    assert problems(result) == [
        f'r: `r_version` is required in entry point main but defaults/main.yml gives it "": '
        f"drop it from {tmp_path}/r/defaults/main.yml, or make it optional with that default"]


def test_every_entry_point_is_checked(tmp_path):
    # r_state is documented by the `instance` entry point only; `prune` gives r_keep another default.
    make_role(tmp_path, "r", {"r_state": "started", "r_keep": 3}, {"r_keep": {"type": "int", "default": 3}},
              more_entries={"instance": {"options": {"r_state": {"type": "str", "default": "started"}}},
                            "prune": {"options": {"r_keep": {"type": "int", "default": 5}}}})
    result = run(tmp_path)
    assert result.returncode == 1
    assert problems(result) == [
        f"r: `r_keep` defaults to 5 in entry point prune but defaults/main.yml says 3: "
        f"set default of `r_keep` in {tmp_path}/r/meta/argument_specs.yml (entry point prune) to 3"]


def test_private_and_shared_variables(tmp_path):
    # `_r_*` is private (not an option); `llm_server_*` is shared, declared in the specs only.
    make_role(tmp_path, "r", {"_r_cache": []}, {"llm_server_allow_reboot": {"type": "bool", "default": False}})
    assert run(tmp_path).returncode == 0


def test_a_shared_variable_in_defaults_is_still_compared(tmp_path):
    make_role(tmp_path, "r", {"llm_server_allow_reboot": True},
              {"llm_server_allow_reboot": {"type": "bool", "default": False}})
    result = run(tmp_path)
    assert result.returncode == 1
    assert "`llm_server_allow_reboot` defaults to false in entry point main but defaults/main.yml says true" \
        in result.stdout


def test_the_collection_roles_match():
    result = run(ROOT / "roles")
    assert result.returncode == 0, result.stdout
    assert result.stdout.endswith("variables, all match\n")


def test_the_default_roles_directory_is_the_checkout(tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert result.stdout == run(ROOT / "roles").stdout
