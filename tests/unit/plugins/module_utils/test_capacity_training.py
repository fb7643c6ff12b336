# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Training time from scratch (plugins/module_utils/_capacity_training.py) against hand-computed cases.

Every expected number below is worked out in the comment next to it from the
GPU's datasheet figures, not by calling the planner's own helpers.
"""

from __future__ import annotations

import os

import pytest

from ansible_collections.homelab.llm_server.plugins.module_utils import _capacity_tables, _capacity_training

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
TABLES = _capacity_tables.load_tables(os.path.join(REPO, 'data', 'planner'))


def test_training_time_1_3b_on_one_card():
    result = _capacity_training.training_time(['rtx-pro-6000-blackwell'], 'gpt-1.3b', tables=TABLES)
    # D = 20 x 1.3e9 = 26e9 tokens; 6 x 1.3e9 x 26e9 = 2.028e20 FLOPs
    # 503.8 TFLOPS x 0.4 = 201.52 TFLOPS -> 1,006,351.7 s = 279.54 h = 11.648 days
    assert result['tokens'] == 26000000000
    assert result['flops'] == pytest.approx(2.028e20)
    assert result['seconds'] == pytest.approx(1006351.7, abs=0.1)
    assert result['hours'] == 279.54
    assert result['days'] == 11.648
    assert result['duration'] == '11.6 days'
    # 16 bytes per parameter: 20.8 GB of training state fits the card
    assert result['training_state_bytes'] == 20800000000
    assert result['fits_memory'] is True


def test_training_time_options():
    result = _capacity_training.training_time(['2x rtx-pro-6000-blackwell'], 7e9, tokens=1e12, mfu=0.5, tables=TABLES)
    # 6 x 7e9 x 1e12 = 4.2e22 FLOPs at 2 x 503.8 x 0.5 = 503.8 TFLOPS -> 83,366,415 s
    assert result['seconds'] == pytest.approx(4.2e22 / 503.8e12, rel=1e-9)
    assert result['num_gpus'] == 2
    # 112 GB of state over two cards: 56 GB each fits
    assert result['training_state_bytes_per_gpu'] == 56000000000
    assert result['fits_memory'] is True


def test_training_table_reproduces_one_card_table():
    rows = _capacity_training.training_table(['rtx-pro-6000-blackwell'], tables=TABLES)
    assert [row['model'] for row in rows] == ['gpt-125m', 'gpt-355m', 'gpt-1.3b', 'gpt-3b', 'gpt-7b']
    # 125M: 6 x 125e6 x 2.5e9 / 201.52e12 = 9,304 s = 2.6 h; 7B: 5.88e21 / 201.52e12 = 337.7 days
    assert [row['duration'] for row in rows] == ['2.6 h', '20.8 h', '11.6 days', '62.0 days', '337.7 days']
    # 7B needs 112 GB of training state: more than one 96 GiB card
    assert [row['fits_memory'] for row in rows] == [True, True, True, True, False]
    lines = _capacity_training.training_table_lines(rows)
    assert lines[0].startswith('Training from scratch on 1 x NVIDIA RTX PRO 6000 Blackwell')
    assert '503.8 TFLOPS dense BF16 per GPU at 40% MFU' in lines[0]
    assert lines[1].split()[:5] == ['model', 'params', 'tokens', 'FLOPs', 'time']
    assert lines[-1].split()[:5] == ['gpt-7b', '7B', '140B', '5.88e+21', '337.7']
    assert lines[-1].endswith('112.0 GB (does not fit)')
