"""make test-changed picks the scenarios and unit tests of a change (scripts/test-changed.py)."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("test_changed", ROOT / "scripts" / "test-changed.py")
test_changed = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(test_changed)
ALL = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))


def chosen(*files, wanted=()):
    return sorted(test_changed.select_scenarios(list(files), list(wanted)))


def test_a_role_runs_the_scenarios_that_use_it_and_not_the_owners_whole_path():
    picked = chosen("roles/ups/tasks/main.yml")
    assert "ups" in picked
    assert "remote" not in picked and "vllm_cpu" not in picked and "first_day" not in picked
    assert "first_day" in chosen("roles/ups/tasks/main.yml", wanted=["first_day"])


def test_a_role_reached_through_another_role_counts():
    # monitoring's scenario brings up engines behind nginx: the serving role is one of its inputs.
    assert {"monitoring", "ups", "llamacpp"} <= set(chosen("roles/serving/tasks/main.yml"))


def test_module_utils_reach_the_scenarios_of_the_modules_that_import_them():
    assert "model_store" in chosen("plugins/module_utils/_model_store.py")


def test_a_host_program_reaches_the_scenarios_whose_roles_install_and_run_it():
    # host/ is built into the wheel the host_programs role installs; serving includes that role.
    picked = set(chosen("host/llm_server_host/health.py"))
    assert {"llamacpp", "ups", "monitoring", "remote"} <= picked
    assert "first_day" not in picked
    # The module_utils the wheel carries reach them too, beside their modules' scenarios.
    assert "llamacpp" in chosen("plugins/module_utils/_watchdog.py")
    assert "remote" in chosen("plugins/plugin_utils/_host_wheel.py")


def test_a_filter_reaches_the_scenarios_whose_roles_name_it():
    # prometheus_rules_for is in monitoring.py; the monitoring role names it.
    assert "monitoring" in chosen("plugins/filter/monitoring.py")


def test_the_shared_harness_runs_everything():
    assert chosen("tests/molecule/create.yml") == ALL


def test_a_test_double_runs_the_scenarios_that_use_it_only():
    # tests/doubles/ holds one folder a double: the Hub's stand-in is model_store's, not proxy's.
    picked = chosen("tests/doubles/hf_hub/hub_server.py")
    assert "model_store" in picked
    assert "proxy" not in picked
    assert "proxy" in chosen("tests/doubles/openai_server/openai_test_server.py")
    assert "model_store" not in chosen("tests/doubles/openai_server/openai_test_server.py")


def test_a_shared_client_runs_the_scenarios_that_use_it_not_the_harness():
    picked = chosen("tests/molecule/openai_stream.py")
    assert {"proxy", "proxy_acme", "remote"} <= set(picked)
    assert "model_store" not in picked


def test_the_readme_and_the_example_run_the_owners_path_only():
    assert chosen("README.md") == ["first_day"]
    assert chosen("inventories/example/group_vars/gpu_servers/vars.yml") == ["first_day"]
    assert chosen("docs/features.md") == []


def test_a_scenario_runs_when_its_own_files_change():
    assert "proxy" in chosen("molecule/proxy/verify.yml")


def test_unit_tests_that_name_a_changed_file_are_picked():
    picked = test_changed.select_unit_tests(["plugins/action/inventory_check.py"])
    assert "tests/unit/plugins/action/test_inventory_check.py" in picked
    assert "tests/unit/test_role_docs.py" in test_changed.select_unit_tests(["tests/unit/test_role_docs.py"])


def test_what_builds_a_mounted_input_runs_the_scenarios_that_mount_it():
    # make vllm-venv builds the venv vllm_cpu and first_day mount; the lock also makes the wheels remote mounts.
    assert sorted(chosen("scripts/build-vllm-venv.sh")) == ["first_day", "vllm_cpu"]
    # The venv is the vllm role's install step run: a change to the step builds it again for both.
    assert {"first_day", "vllm_cpu"} <= set(chosen("roles/vllm/tasks/install_venv.yml"))
    assert {"vllm_cpu", "first_day", "remote"} <= set(chosen("tests/vllm_cpu/requirements.lock"))
