"""The commands the documentation gives an owner are ones that work.

- every ansible / ansible-playbook command in a shell block of the README,
  docs/ and the roles' READMEs names its inventory (-i);
- the vllm role's ad-hoc capacity_plan example runs as written;
- every play of playbooks/*.yml carries a tag, and the README's table of
  tags ("Run one part") lists exactly the tags the plays carry.
"""

import os
import pathlib
import re
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "roles").glob("*/README.md"))]


def shell_blocks(path: pathlib.Path) -> list[str]:
    return re.findall(r"^```(?:sh|bash|console)\n(.*?)^```", path.read_text(), re.MULTILINE | re.DOTALL)


def commands(block: str) -> list[str]:
    """The block's commands, continuation lines joined."""
    return [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def test_every_ansible_command_names_its_inventory():
    found = 0
    for path in DOCS:
        for block in shell_blocks(path):
            for command in commands(block):
                words = command.split()
                if words and re.search(r"(^|/)ansible(-playbook)?$", words[0]):
                    found += 1
                    assert "-i" in words or "--inventory" in words, f"{path.relative_to(ROOT)}: {command}"
    assert found >= 5


def test_every_playbook_command_on_the_owners_inventory_can_open_its_vault():
    """inventories/home is a copy of the example, whose vault.yml the quick start encrypts: without a
    vault password, Ansible stops at "Attempting to decrypt but no vault secrets found"."""
    found = 0
    for path in [*DOCS, *sorted((ROOT / "playbooks").glob("*.yml"))]:
        text = path.read_text().replace("\\\n", " ")
        for line in text.splitlines():
            if re.search(r"ansible-playbook\b.*-i inventories/home\b", line):
                found += 1
                assert re.search(r"--ask-vault-pass|--vault-password-file|--vault-id", line), \
                    f"{path.relative_to(ROOT)}: {line.strip()}"
    assert found >= 5


def test_the_vllm_readme_capacity_plan_example_runs():
    readme = ROOT / "roles" / "vllm" / "README.md"
    [command] = [c for block in shell_blocks(readme) for c in commands(block) if "capacity_plan" in c]
    bindir = pathlib.Path(sys.executable).parent
    command = command.replace(".venv/bin/", f"{bindir}/")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    result = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True,
                            check=False, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert '"fits": true' in result.stdout


def plays():
    for path in sorted((ROOT / "playbooks").glob("*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            if "import_playbook" in play or "ansible.builtin.import_playbook" in play:
                continue
            yield path, play


def test_every_play_has_a_tag_and_the_readme_lists_them():
    tags = set()
    for path, play in plays():
        assert play.get("tags"), f"{path.relative_to(ROOT)}: play {play.get('name')!r} has no tags"
        tags.update(play["tags"])
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Run one part", 1)[1].split("\n### ", 1)[0]
    listed = set()
    for row in re.findall(r"^\| (.+?) \|", section, re.MULTILINE):
        listed.update(re.findall(r"`([a-z_]+)`", row))
    assert listed == tags


QUICK_START = [
    "git clone https://github.com/homelab/llm_server.git && cd llm_server",
    "python3 -m venv .venv && .venv/bin/pip install -r requirements-controller.txt",
    ".venv/bin/ansible-galaxy collection install -r requirements.yml",
    "cp -r inventories/example inventories/home",
    "python3 -c 'import secrets; print(\"sk-\" + secrets.token_urlsafe(32))'",
    "cp inventories/home/group_vars/gpu_servers/vault.yml.example inventories/home/group_vars/gpu_servers/vault.yml",
    "$EDITOR inventories/home/group_vars/gpu_servers/vault.yml",
    ".venv/bin/ansible-vault encrypt inventories/home/group_vars/gpu_servers/vault.yml",
    ".venv/bin/ansible-playbook -i inventories/home playbooks/site.yml --ask-vault-pass",
]


def test_the_quick_start_runs_these_commands_in_this_order():
    """The first-day test runs the quick start's blocks literally, up to the playbook: they stay these."""
    readme = (ROOT / "README.md").read_text()
    section = re.search(r"^## Quick start\n(.*?)^## ", readme, re.MULTILINE | re.DOTALL).group(1)
    found = []
    for block in re.findall(r"^```(?:sh|bash|shell)\n(.*?)^```", section, re.MULTILINE | re.DOTALL):
        found += [re.sub(r"\s+#\s.*$", "", line).strip() for line in block.splitlines() if line.strip()]
    assert found[:len(QUICK_START)] == QUICK_START
    for path in ("requirements-controller.txt", "requirements.yml",
                 "inventories/example/group_vars/gpu_servers/vault.yml.example"):
        assert (ROOT / path).exists(), path
