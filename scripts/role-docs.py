"""Write each role's variable documentation from its meta/argument_specs.yml.

The specs are what Ansible validates before a role runs and what
`ansible-doc -t role homelab.llm_server.ROLE` shows, so the README's table of
variables is generated from them instead of kept by hand (as dev-sec's
collection renders its BEGIN_ANSIBLE_DOCS block). Between the markers

    <!-- BEGIN_ROLE_VARIABLES -->
    <!-- END_ROLE_VARIABLES -->

of roles/ROLE/README.md this script writes one table per entry point: each
option (suboptions as parent.child) with its type, default, whether it is
required, its choices and its description, Ansible's markup (O(), C(), V(),
I(), B(), U(), L(), M()) turned into Markdown. Everything outside the markers
is prose and is left as it is. A role without a README gets one with the
main entry point's description as its introduction; a README without the
markers gets the block at its end.

usage: role-docs.py [--check] [ROLES_DIR]   (default: roles/ of this checkout)
  without --check: rewrite the blocks, printing the files changed;
  --check: change nothing, print each README that differs from its specs and
  the one command that regenerates them, and exit 1 when any does.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
NAMESPACE = "homelab.llm_server"
BEGIN = "<!-- BEGIN_ROLE_VARIABLES -->"
END = "<!-- END_ROLE_VARIABLES -->"
COMMAND = "python3 scripts/role-docs.py"

# Ansible's documentation markup (docs.ansible.com, "Formatting functions").
_MARKUP = [
    (re.compile(r"L\(([^)]+?),\s*([^)]+?)\)"), lambda m: f"[{m.group(1)}]({m.group(2)})"),
    (re.compile(r"U\(([^)]+?)\)"), lambda m: f"<{m.group(1)}>"),
    (re.compile(r"I\(([^)]+?)\)"), lambda m: f"*{m.group(1)}*"),
    (re.compile(r"B\(([^)]+?)\)"), lambda m: f"**{m.group(1)}**"),
    (re.compile(r"\b(?:O|V|C|M|E|RV|P)\(((?:[^()]|\([^()]*\))+?)\)"), lambda m: f"`{m.group(1)}`"),
]


def markup(text: str) -> str:
    text = str(text)
    for pattern, replace in _MARKUP:
        text = pattern.sub(replace, text)
    return text


def paragraphs(description) -> list[str]:
    if description is None:
        return []
    if isinstance(description, str):
        description = [description]
    return [" ".join(markup(part).split()) for part in description]


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def code(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    ticks = "``" if "`" in text else "`"
    pad = " " if ticks == "``" else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def type_of(option: dict) -> str:
    kind = option.get("type", "str")
    if kind == "list" and option.get("elements"):
        return f"list of {option['elements']}"
    return kind


def rows(options: dict, prefix: str = "") -> list[str]:
    lines = []
    for name in sorted(options or {}):
        option = options[name] or {}
        full = f"{prefix}{name}"
        label = code(full)
        if option.get("required"):
            label += " (required)"
        default = code(option["default"]) if "default" in option else ""
        text = " ".join(paragraphs(option.get("description")))
        if option.get("choices"):
            text += (" " if text else "") + "One of " + ", ".join(code(choice) for choice in option["choices"]) + "."
        if option.get("no_log"):
            text += (" " if text else "") + "A secret: never logged."
        lines.append(f"| {cell(label)} | {cell(type_of(option))} | {cell(default)} | {cell(text)} |")
        if option.get("options"):
            lines.extend(rows(option["options"], prefix=f"{full}."))
    return lines


def block(role: str, specs: dict) -> str:
    out = [
        BEGIN,
        f"<!-- Generated from meta/argument_specs.yml by `{COMMAND}`: edit the specs, not this block. -->",
        "",
        "## Variables",
        "",
        f"Validated before the role runs; `ansible-doc -t role {NAMESPACE}.{role}` shows the same.",
    ]
    for entry in sorted(specs, key=lambda name: (name != "main", name)):
        spec = specs[entry] or {}
        call = "the role" if entry == "main" else f"`tasks_from: {entry}`"
        out += ["", f"### Entry point `{entry}` ({call})", ""]
        if spec.get("short_description"):
            out += [markup(spec["short_description"]).strip(), ""]
        if spec.get("options"):
            out += ["| variable | type | default | description |", "| --- | --- | --- | --- |"]
            out += rows(spec["options"])
        else:
            out.append("No variables.")
    out.append(END)
    return "\n".join(out) + "\n"


def new_readme(role: str, specs: dict) -> str:
    main = specs.get("main") or next(iter(specs.values()), {}) or {}
    intro = [f"# {NAMESPACE}.{role}", ""]
    if main.get("short_description"):
        intro += [markup(main["short_description"]).strip(), ""]
    for paragraph in paragraphs(main.get("description")):
        intro += [paragraph, ""]
    return "\n".join(intro)


class SpecError(Exception):
    """A role's argument specs cannot be read."""


def render(role_dir: pathlib.Path) -> str | None:
    """The README as it should be, or None for a role without argument specs."""
    specs_file = role_dir / "meta" / "argument_specs.yml"
    if not specs_file.exists():
        return None
    try:
        specs = (yaml.safe_load(specs_file.read_text()) or {}).get("argument_specs") or {}
    except yaml.YAMLError as err:
        raise SpecError(f"{shown(specs_file)}: not valid YAML ({' '.join(str(err).split())})") from err
    readme = role_dir / "README.md"
    current = readme.read_text() if readme.exists() else new_readme(role_dir.name, specs)
    generated = block(role_dir.name, specs)
    start, end = current.find(BEGIN), current.find(END)
    if start == -1 or end == -1 or end < start:
        return current.rstrip("\n") + "\n\n" + generated
    return current[:start] + generated.rstrip("\n") + current[end + len(END):]


def shown(path: pathlib.Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a README differs")
    parser.add_argument("roles", nargs="?", type=pathlib.Path, default=ROOT / "roles")
    args = parser.parse_args(argv)
    stale = []
    count = 0
    broken = []
    for role_dir in sorted(path for path in args.roles.iterdir() if path.is_dir()):
        try:
            wanted = render(role_dir)
        except SpecError as err:
            broken.append(str(err))
            count += 1
            continue
        if wanted is None:
            continue
        count += 1
        readme = role_dir / "README.md"
        if readme.exists() and readme.read_text() == wanted:
            continue
        stale.append(readme)
        if not args.check:
            readme.write_text(wanted)
            print(f"wrote {shown(readme)}")
    for message in broken:
        print(message)
    if args.check:
        for readme in stale:
            if readme.exists():
                print(f"{shown(readme)}: its variables block differs from meta/argument_specs.yml")
            else:
                print(f"{shown(readme)}: missing")
        if stale:
            command = COMMAND if args.roles.resolve() == (ROOT / "roles").resolve() else f"{COMMAND} {args.roles}"
            print(f"role docs: {len(stale)} of {count} READMEs out of date; regenerate them with: {command}")
            return 1
        if not broken:
            print(f"role docs: {count} READMEs match their argument specs")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
