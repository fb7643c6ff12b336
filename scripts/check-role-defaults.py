"""Check that every role's defaults/main.yml and meta/argument_specs.yml agree.

The guard prometheus.prometheus runs in CI: a default that the argument
spec does not declare is never validated, and a spec default that differs
from defaults/main.yml documents a value the role does not use. For each
role with meta/argument_specs.yml (all its entry points together, since
defaults/main.yml is loaded whichever entry point runs):

- every variable of defaults/main.yml is an option of at least one entry point;
- every option with a `default:` is in defaults/main.yml with that value
  (compared after YAML load, so a templated string compares as its text and
  `true` is not `1`);
- a variable with a value other than null in defaults/main.yml has that
  value as its `default:` in the entry points that declare it with one, and
  in at least one entry point;
- a `required: true` option has no value in defaults/main.yml.

Two conventions of the collection's roles are exempt:

- private variables start with `_` (`_<role>_...`, set by the tasks or in
  vars/): they are not options, so they are skipped wherever they appear;
- variables shared by the collection's roles (`llm_server_*`) are declared
  in the specs only and the tasks use `| default(...)`, because ansible-lint
  (var-naming[no-role-prefix]) wants role defaults prefixed with the role's
  name. A shared variable that is in defaults/main.yml anyway is checked
  like any other.

usage: check-role-defaults.py [ROLES_DIR]   (default: roles/ of this checkout)
Prints one line per mismatch with the fix, and exits 1 when there is any.
"""

from __future__ import annotations

import json
import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED_PREFIX = "llm_server_"
PRIVATE_PREFIX = "_"


def load(path: pathlib.Path):
    with path.open() as handle:
        return yaml.safe_load(handle) or {}


def show(value) -> str:
    """A value as it would be written in YAML (JSON is YAML): true, null, "text"."""
    return json.dumps(value, sort_keys=True, default=str)


def same(left, right) -> bool:
    """Equality of loaded YAML values in which a bool is never a number."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same(left[key], right[key]) for key in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right))
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        return left == right
    return type(left) is type(right) and left == right


def shown_path(path: pathlib.Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def check_role(role: pathlib.Path) -> tuple[list[str], int]:
    specs_file = role / "meta" / "argument_specs.yml"
    defaults_file = role / "defaults" / "main.yml"
    specs = load(specs_file).get("argument_specs", {}) or {}
    defaults = load(defaults_file) if defaults_file.exists() else {}
    defaults = {name: value for name, value in defaults.items() if not name.startswith(PRIVATE_PREFIX)}
    name = role.name
    specs_path, defaults_path = shown_path(specs_file), shown_path(defaults_file)
    problems = []

    options: dict[str, list[tuple[str, dict]]] = {}
    for entry, spec in specs.items():
        for option, details in ((spec or {}).get("options") or {}).items():
            if not option.startswith(PRIVATE_PREFIX):
                options.setdefault(option, []).append((entry, details or {}))

    for variable, value in defaults.items():
        declared = options.get(variable)
        if not declared:
            problems.append(f"{name}: `{variable}` is in defaults/main.yml but no entry point declares it: "
                            f"add `{variable}` to {specs_path} options")
        elif value is not None and not any("default" in spec or spec.get("required")
                                           for _entry, spec in declared):
            problems.append(f"{name}: `{variable}` is {show(value)} in defaults/main.yml but no entry point "
                            f"gives it a default: set default of `{variable}` in {specs_path} to {show(value)}")

    for option, declared in sorted(options.items()):
        for entry, details in declared:
            if details.get("required") and option in defaults:
                problems.append(f"{name}: `{option}` is required in entry point {entry} but defaults/main.yml "
                                f"gives it {show(defaults[option])}: drop it from {defaults_path}, or make "
                                f"it optional with that default")
                continue
            if "default" not in details:
                continue
            if option not in defaults:
                if not option.startswith(SHARED_PREFIX):
                    problems.append(f"{name}: `{option}` has a default in entry point {entry} but is not in "
                                    f"defaults/main.yml: add `{option}: {show(details['default'])}` to "
                                    f"{defaults_path}")
            elif not same(details["default"], defaults[option]):
                problems.append(f"{name}: `{option}` defaults to {show(details['default'])} in entry point "
                                f"{entry} but defaults/main.yml says {show(defaults[option])}: set default of "
                                f"`{option}` in {specs_path} (entry point {entry}) to {show(defaults[option])}")
    return problems, len(defaults)


def main(argv: list[str]) -> int:
    roles_dir = pathlib.Path(argv[1]) if len(argv) > 1 else ROOT / "roles"
    if not roles_dir.is_dir():
        print(f"role defaults: {roles_dir} is not a directory")
        return 2
    roles = sorted(p.parent.parent for p in roles_dir.glob("*/meta/argument_specs.yml"))
    problems, variables = [], 0
    for role in roles:
        found, count = check_role(role)
        problems += found
        variables += count
    for line in problems:
        print(line)
    if problems:
        print(f"role defaults: {len(problems)} mismatch(es) in {len(roles)} roles")
        return 1
    print(f"role defaults: {len(roles)} roles, {variables} variables, all match")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
