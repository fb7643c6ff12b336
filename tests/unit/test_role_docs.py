"""scripts/role-docs.py: every role's README documents exactly its meta/argument_specs.yml."""

import pathlib
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "role-docs.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, check=False)


def make_role(roles, name, options, readme=None):
    role = roles / name
    (role / "meta").mkdir(parents=True)
    specs = {"argument_specs": {"main": {"short_description": "Serve C(things).",
                                         "description": ["Does O(demo_port) things.", "Second paragraph."],
                                         "options": options}}}
    (role / "meta" / "argument_specs.yml").write_text(yaml.safe_dump(specs))
    if readme is not None:
        (role / "README.md").write_text(readme)
    return role


def test_the_collections_role_docs_match_their_specs():
    result = run("--check")
    assert result.returncode == 0, result.stdout
    roles = [path for path in (ROOT / "roles").iterdir() if (path / "meta" / "argument_specs.yml").exists()]
    assert result.stdout.strip() == f"role docs: {len(roles)} READMEs match their argument specs"
    for role in roles:
        assert (role / "README.md").exists(), role.name


def test_every_option_of_every_role_is_in_its_readme():
    for specs_file in (ROOT / "roles").glob("*/meta/argument_specs.yml"):
        readme = (specs_file.parent.parent / "README.md").read_text()
        for entry, spec in yaml.safe_load(specs_file.read_text())["argument_specs"].items():
            assert f"### Entry point `{entry}`" in readme, (specs_file, entry)
            for name in spec.get("options") or {}:
                assert f"| `{name}`" in readme, (specs_file, name)


def test_a_new_role_gets_a_readme_with_intro_and_table(tmp_path):
    make_role(tmp_path, "demo", {
        "demo_port": {"type": "int", "default": 8080, "description": "The port; V(0) for none."},
        "demo_mode": {"type": "str", "choices": ["a", "b"], "default": "a", "description": ["Mode | kind."]},
        "demo_key": {"type": "str", "required": True, "no_log": True, "description": "The key."},
        "demo_list": {"type": "list", "elements": "dict", "default": [],
                      "options": {"name": {"type": "str", "description": "Its name."}}},
    })
    assert run("--check", tmp_path).returncode == 1
    result = run(tmp_path)
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "demo" / "README.md").read_text()
    assert text.startswith("# homelab.llm_server.demo\n\nServe `things`.\n\nDoes `demo_port` things.\n\nSecond paragraph.\n")
    assert "| `demo_port` | int | `8080` | The port; `0` for none. |" in text
    assert "| `demo_mode` | str | `a` | Mode \\| kind. One of `a`, `b`. |" in text
    assert "| `demo_key` (required) | str |  | The key. A secret: never logged. |" in text
    assert "| `demo_list.name` | str |  | Its name. |" in text
    assert "| list of dict | `[]` |" in text
    assert run("--check", tmp_path).returncode == 0


def test_a_changed_spec_fails_the_check_naming_the_file_and_the_command(tmp_path):
    prose_before = "# demo\n\nHand-written behaviour.\n\n"
    prose_after = "\n\n## Tests\n\nKept as written.\n"
    role = make_role(tmp_path, "demo", {"demo_port": {"type": "int", "default": 8080, "description": "Port."}},
                     readme=prose_before + "<!-- BEGIN_ROLE_VARIABLES -->\n<!-- END_ROLE_VARIABLES -->" + prose_after)
    assert run(tmp_path).returncode == 0
    assert run("--check", tmp_path).returncode == 0
    specs_file = role / "meta" / "argument_specs.yml"
    specs = yaml.safe_load(specs_file.read_text())
    specs["argument_specs"]["main"]["options"]["demo_port"]["default"] = 9090
    specs_file.write_text(yaml.safe_dump(specs))
    result = run("--check", tmp_path)
    assert result.returncode == 1
    assert "demo/README.md: its variables block differs from meta/argument_specs.yml" in result.stdout
    assert result.stdout.strip().endswith(f"regenerate them with: python3 scripts/role-docs.py {tmp_path}")
    assert "`8080`" in (role / "README.md").read_text()  # --check changes nothing
    assert run(tmp_path).returncode == 0
    text = (role / "README.md").read_text()
    assert "| `demo_port` | int | `9090` | Port. |" in text
    assert text.startswith(prose_before) and text.endswith(prose_after)


def test_a_readme_without_markers_gets_the_block_at_its_end(tmp_path):
    role = make_role(tmp_path, "demo", {"demo_on": {"type": "bool", "default": True, "description": "On."}},
                     readme="# demo\n\nProse.\n")
    assert run(tmp_path).returncode == 0
    text = (role / "README.md").read_text()
    assert text.startswith("# demo\n\nProse.\n\n<!-- BEGIN_ROLE_VARIABLES -->")
    assert text.endswith("<!-- END_ROLE_VARIABLES -->\n")
    assert "| `demo_on` | bool | `true` | On. |" in text


def test_specs_that_are_not_yaml_are_named_and_fail(tmp_path):
    make_role(tmp_path, "good", {"good_on": {"type": "bool", "default": True, "description": "On."}})
    bad = tmp_path / "bad" / "meta"
    bad.mkdir(parents=True)
    (bad / "argument_specs.yml").write_text("argument_specs:\n  main:\n    short_description: a: b\n")
    result = run(tmp_path)
    assert result.returncode == 1
    assert "bad/meta/argument_specs.yml: not valid YAML" in result.stdout
    assert (tmp_path / "good" / "README.md").exists()
    assert not (tmp_path / "bad" / "README.md").exists()
    assert run("--check", tmp_path).returncode == 1
