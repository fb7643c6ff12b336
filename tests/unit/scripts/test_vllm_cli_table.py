# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""scripts/vllm_cli_table.py: the pieces that run without vLLM (the parser itself needs the wheel)."""

from __future__ import annotations

import importlib.util
import json
import os
import textwrap

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
_spec = importlib.util.spec_from_file_location('vllm_cli_table_under_test',
                                               os.path.join(REPO, 'scripts', 'vllm_cli_table.py'))
generator = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generator)


# Stand-ins with the shapes of vLLM's argparse type helpers (vllm/engine/arg_utils.py).
def optional_type(return_type):
    def _optional_type(val):
        return None if val in ('', 'None') else return_type(val)
    return _optional_type


def parse_type(return_type):
    def _parse_type(val):
        return return_type(val)
    return _parse_type


def human_readable_int(value):
    return int(value)


def union_dict_and_str(value):
    return value


@pytest.mark.parametrize('func, expected', [
    (None, ('str', None)),
    (int, ('int', None)),
    (float, ('float', None)),
    (json.loads, ('json', None)),
    (optional_type(int), ('int', None)),
    (optional_type(parse_type(json.loads)), ('json', None)),
    (optional_type(human_readable_int), ('human_int', None)),
    (union_dict_and_str, ('json_or_str', None)),
    (lambda s: s.lower().replace('-', '_'), ('str', 'lower_dash_to_underscore')),
    (lambda s: [int(p) if p.isdigit() else p for p in s.split(',')], ('csv', None)),
])
def test_classify_type(func, expected):
    assert generator._classify_type(func) == expected  # pylint: disable=protected-access


def test_classify_type_refuses_the_unknown():
    with pytest.raises(ValueError, match='teach _classify_type'):
        generator._classify_type(lambda s: s[::-1])  # pylint: disable=protected-access


def test_deprecation_note_and_summary():
    note = generator._deprecation_note(  # pylint: disable=protected-access
        '--log-config-file is deprecated and will be removed in v0.33.0. Use --logging-config instead. More.')
    assert note == '--log-config-file is deprecated and will be removed in v0.33.0. Use --logging-config instead.'
    # A future deprecation and the word in a flag's purpose are not deprecations.
    assert generator._deprecation_note('... and will be deprecated when PCP is supported.') is None  # pylint: disable=protected-access
    assert generator._deprecation_note('Whether to allow deprecated quantization methods.') is None  # pylint: disable=protected-access
    assert generator._summary('First  line\nwraps.\n\nSecond paragraph.') == 'First line wraps.'  # pylint: disable=protected-access
    assert len(generator._summary('x' * 1000)) == 240  # pylint: disable=protected-access


def test_ast_fallback_reads_flags_from_sources(tmp_path):
    package = tmp_path / 'vllm'
    (package / 'engine').mkdir(parents=True)
    (package / 'entrypoints' / 'common').mkdir(parents=True)
    (package / 'engine' / 'arg_utils.py').write_text(textwrap.dedent('''
        @dataclass
        class EngineArgs:
            max_model_len: int | None = None
            enable_prefix_caching: bool | None = None
            speculative_config: dict[str, Any] | None = None
            served_model_name: str | list[str] | None = None

        def add_cli_args(parser, model_kwargs, cache_kwargs, vllm_kwargs):
            parser.add_argument("--max-model-len", **model_kwargs["max_model_len"])
            parser.add_argument("--enable-prefix-caching", **cache_kwargs["enable_prefix_caching"])
            parser.add_argument("--speculative-config", "-sc", **vllm_kwargs["speculative_config"])
            parser.add_argument("--served-model-name", **model_kwargs["served_model_name"])
            parser.add_argument("--headless", action="store_true")
            parser.add_argument("--dtype", type=str, choices=["auto", "half"])
    '''))
    (package / 'entrypoints' / 'common' / 'cli_args.py').write_text(textwrap.dedent('''
        class FrontendArgs:
            host: str | None = None
            port: int = 8000
    '''))
    table = generator._ast_entries(str(package), '9.9.9')  # pylint: disable=protected-access
    assert table['generated_by'].startswith('ast:')
    by_flag = {option['flag']: option for option in table['options']}
    assert sorted(by_flag) == ['--dtype', '--enable-prefix-caching', '--headless', '--host', '--max-model-len',
                               '--port', '--served-model-name', '--speculative-config']
    assert (by_flag['--max-model-len']['kind'], by_flag['--max-model-len']['value_type']) == ('value', 'int')
    assert by_flag['--enable-prefix-caching']['negative_flag'] == '--disable-prefix-caching'
    assert by_flag['--speculative-config']['kind'] == 'json'
    assert by_flag['--speculative-config']['aliases'] == ['-sc']
    assert by_flag['--served-model-name']['nargs'] == '+'
    assert by_flag['--headless']['kind'] == 'store_true'
    assert by_flag['--dtype']['choices'] == ['auto', 'half']
    assert by_flag['--port']['value_type'] == 'int'
