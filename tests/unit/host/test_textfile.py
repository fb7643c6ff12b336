# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host/llm_server_host/textfile.py: label values as Prometheus' text format needs them."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from llm_server_host import textfile


def test_a_label_value_reads_back_as_it_was():
    odd = 'C:\\models\\"qwen"\nline two'
    text = 'm{name="%s"} 1\n' % textfile.label_value(odd)
    [family] = text_string_to_metric_families(text)
    assert family.samples[0].labels == {'name': odd}
    assert textfile.label_value(42) == '42'
