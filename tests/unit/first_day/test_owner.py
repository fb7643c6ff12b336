"""The README commands the first_day scenario (and so `make demo`) runs as written are there, in the
shape tests/first_day/owner.py reads them: a README edit that breaks the scenario fails here in a second
instead of 25 minutes into it."""

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("first_day_owner", ROOT / "tests" / "first_day" / "owner.py")
owner = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(owner)


def test_the_quick_start_has_the_steps_the_owner_follows():
    commands = owner.quick_start_commands()
    assert commands[0].startswith("git clone ")
    assert "cp -r inventories/example inventories/home" in commands
    assert any("secrets.token_urlsafe" in command for command in commands)
    assert any(command.startswith("$EDITOR ") and command.endswith("vault.yml") for command in commands)
    assert any("ansible-vault encrypt" in command for command in commands)
    [playbook] = [c for c in commands if "ansible-playbook" in c and "playbooks/site.yml" in c]
    assert "-i inventories/home" in playbook and "--ask-vault-pass" in playbook
    # Step 5's call comes after the playbook.
    assert commands.index(owner.section_command("Quick start", r"^curl ")) > commands.index(playbook)


def test_a_section_ends_at_the_next_heading_of_its_level(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("## One\n\n### Sub\n\n```sh\necho a   # why\n```\n\n## Two\n\n```sh\necho b \\\n  c\n```\n")
    assert owner.readme_commands("One", readme) == ["echo a"]
    assert owner.readme_commands("Sub", readme) == ["echo a"]
    assert owner.readme_commands("Two", readme) == ["echo b c"]
    with pytest.raises(SystemExit, match='no "Three" section'):
        owner.readme_commands("Three", readme)


def test_the_operating_commands_the_scenario_runs_are_found():
    assert "playbooks/plan.yml" in owner.section_command("Change a model", r"playbooks/plan\.yml")
    tunnel = owner.section_command("Check health", r"^ssh -L ")
    assert tunnel.endswith(" llm-home") and "127.0.0.1:9090" in tunnel
    over_ssh = [c for c in owner.readme_commands("Check health") if c.startswith("ssh llm-home ")]
    assert len(over_ssh) >= 2
    assert owner.section_command("Back up and restore", r"llm-backup list$") == "ssh llm-home sudo llm-backup list"


def test_the_call_is_the_quick_starts_curl_for_the_owners_name_and_model():
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "first_day" / "owner.py"), "call", "--name",
                           "llm.home.test", "--model", "tiny", "--cacert", "/etc/ca.pem"],
                          capture_output=True, text=True, check=True)
    command = proc.stdout.strip()
    assert command.startswith("curl --fail-with-body --cacert /etc/ca.pem -N https://llm.home.test/v1/chat/completions ")
    body = json.loads(command.split("-d ", 1)[1].strip("'"))
    assert body["model"] == "tiny" and body["stream"] is True
    assert '"Authorization: Bearer $LLM_API_KEY"' in command


def test_a_failed_run_names_its_failing_task_and_leaves_out_ignored_errors():
    log = (
        "TASK [homelab.llm_server.ups : Probe] ***\n"
        "[ERROR]: Task failed: probe refused\n"
        "fatal: [llm-home]: FAILED! =>\n"
        "...ignoring\n"
        "TASK [homelab.llm_server.serving : Wait until a completion is answered by vllm-a] ***\n"
        "[ERROR]: Task failed: Action failed: timed out after 900 s\n"
        "fatal: [llm-home]: FAILED! =>\n"
    )
    assert owner.failed_tasks(log) == [
        "TASK [homelab.llm_server.serving : Wait until a completion is answered by vllm-a] "
        "Task failed: Action failed: timed out after 900 s"]


def test_a_run_that_should_change_nothing_names_what_it_changed():
    log = (
        "TASK [homelab.llm_server.common : Install packages] ***\n"
        "ok: [llm-home]\n"
        "TASK [homelab.llm_server.monitoring : Install the alert rules] ***\n"
        "changed: [llm-home] => (item=a.yml)\n"
        "changed: [llm-home] => (item=b.yml)\n"
        "ok: [edge-vps]\n"
    )
    assert owner.changed_tasks(log) == ["TASK [homelab.llm_server.monitoring : Install the alert rules] on llm-home"]


def test_the_runs_are_timed_per_role_by_the_harness_callback(tmp_path):
    role = tmp_path / "roles" / "slow_role" / "tasks"
    role.mkdir(parents=True)
    (role / "main.yml").write_text("- name: Wait a little\n  ansible.builtin.command: sleep 0.3\n  changed_when: false\n")
    (tmp_path / "play.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - name: A task of the play\n      ansible.builtin.debug: {msg: hi}\n"
        "    - name: The role\n      ansible.builtin.include_role: {name: slow_role}\n")
    out = tmp_path / "timings.json"
    env = dict(owner.owner_env(tmp_path), **owner.timings_env(out))
    subprocess.run([str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                    "-e", "ansible_python_interpreter=" + sys.executable, "play.yml"],
                   cwd=tmp_path, env=env, check=True, capture_output=True)
    timings = json.loads(out.read_text())
    assert timings["tasks_run"] == 3
    assert list(timings["roles"])[0] == "slow_role" and timings["roles"]["slow_role"] >= 0.3
    assert all(t[0] >= 0.0 for t in timings["tasks"]) and timings["tasks"][0][1] == "slow_role"
    assert timings["playbook"] == str(tmp_path / "play.yml")


def test_the_install_section_installs_the_tarball_and_runs_site_by_its_collection_name():
    commands = owner.readme_commands("Install")
    playbook = owner.section_command("Install", r"^ansible-playbook .*homelab\.llm_server\.site\b")
    assert "-i inventories/home" in playbook and "--ask-vault-pass" in playbook
    before = commands[:commands.index(playbook)]
    assert any("collection install homelab-llm_server-<version>.tar.gz" in command for command in before)
    [config] = owner.readme_blocks("Install", ("ini",))
    assert "gathering = smart" in config and "pipelining = True" in config


def test_the_owner_installs_the_tarball_into_a_directory_of_their_own(tmp_path):
    clone = owner.make_clone(tmp_path)
    subprocess.run(["cp", "-r", "inventories/example", "inventories/home"], cwd=clone, check=True)
    (clone / "inventories" / "home" / "owner-edit.txt").write_text("kept\n")
    # The empty folders an earlier scenario run leaves (Molecule's destroy prunes files): not "already installed".
    (tmp_path / "home" / ".ansible" / "collections" / "ansible_collections" / "homelab" / "llm_server").mkdir(parents=True)
    owner.install(tmp_path)
    info = json.loads((tmp_path / "install.json").read_text())
    project = pathlib.Path(info["cwd"])
    installed = pathlib.Path(info["collection"])
    assert installed == tmp_path / "home" / ".ansible" / "collections" / "ansible_collections" / "homelab" / "llm_server"
    assert (installed / "playbooks" / "site.yml").is_file() and not (installed / "molecule").exists()
    # The inventory of the quick start, not a new copy of the example; the README's ansible.cfg.
    assert (project / "inventories" / "home" / "owner-edit.txt").read_text() == "kept\n"
    assert (project / "ansible.cfg").read_text() == owner.readme_blocks("Install", ("ini",))[0]
    # site.yml by its collection name, from that directory: the installed copy, not this checkout.
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", "inventories/home",
                           "homelab.llm_server.site", "--list-tasks", "--tags", "preflight"],
                          cwd=project, env=owner.owner_env(tmp_path), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "homelab.llm_server.preflight" in proc.stdout
