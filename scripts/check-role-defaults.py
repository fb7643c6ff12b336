"""Check that every role's defaults/main.yml and meta/argument_specs.yml agree.

The guard prometheus.prometheus runs in CI: a default that the argument
spec does not declare is never validated, and a spec default that differs
from defaults/main.yml documents a value the role does not use. For each
role with meta/argument_specs.yml:

- every variable of defaults/main.yml is an option of at least one entry point;
- every option with a `default:` is in defaults/main.yml with that value;
- a `required: true` option has no value in defaults/main.yml.

usage: check-role-defaults.py [ROLES_DIR]   (default: roles/ of this checkout)
Prints one line per mismatch with the fix, and exits 1 when there is any.
"""

from __future__ import annotations

import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load(path: pathlib.Path):
    with path.open() as handle:
        return yaml.safe_load(handle) or {}


def check_role(role: pathlib.Path) -> tuple[list[str], int]:
    specs_file = role / "meta" / "argument_specs.yml"
    defaults_file = role / "defaults" / "main.yml"
    specs = load(specs_file).get("argument_specs", {}) or {}
    defaults = load(defaults_file) if defaults_file.exists() else {}
    name = role.name
    problems = []

    options: dict[str, list[tuple[str, dict]]] = {}
    for entry, spec in specs.items():
        for option, details in ((spec or {}).get("options") or {}).items():
            options.setdefault(option, []).append((entry, details or {}))

    for variable in defaults:
        if variable not in options:
            problems.append(f"{name}: `{variable}` is in defaults/main.yml but no entry point declares it: "
                            f"add it to roles/{name}/meta/argument_specs.yml options")

    for option, declared in sorted(options.items()):
        for entry, details in declared:
            if details.get("required") and option in defaults:
                problems.append(f"{name}: `{option}` is required in entry point {entry} but has a value in "
                                f"defaults/main.yml: drop the value, or make it optional with that default")
            if "default" not in details:
                continue
            if option not in defaults:
                problems.append(f"{name}: `{option}` has a default in entry point {entry} but is not in "
                                f"defaults/main.yml: add `{option}: {details['default']!r}` there")
            elif details["default"] != defaults[option]:
                problems.append(f"{name}: `{option}` defaults to {details['default']!r} in entry point {entry} "
                                f"but defaults/main.yml says {defaults[option]!r}: set the spec's default to "
                                f"the value the role uses")
    return problems, len(defaults)


def main(argv: list[str]) -> int:
    roles_dir = pathlib.Path(argv[1]) if len(argv) > 1 else ROOT / "roles"
    roles = sorted(p.parent.parent for p in roles_dir.glob("*/meta/argument_specs.yml"))
    problems, variables = [], 0
    for role in roles:
        found, count = check_role(role)
        problems += found
        variables += count
    for line in problems:
        print(line)
    if problems:
        print(f"role defaults: {len(problems)} mismatch(es) in {roles_dir}")
        return 1
    print(f"role defaults: {len(roles)} roles, {variables} variables, all match")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
