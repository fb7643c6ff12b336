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


def test_numbers_are_written_one_way_for_every_textfile():
    assert [textfile.number(v) for v in (True, False, 3, 30.0, 0.25, 1795896269.809, 1e20, -2.0)] == [
        '1', '0', '3', '30', '0.25', '1795896269.809', '1e+20', '-2']
    assert [textfile.number(float(v)) for v in ('nan', 'inf', '-inf')] == ['NaN', '+Inf', '-Inf']


def test_an_exposition_reads_back_with_prometheus_clients_parser():
    out = textfile.Exposition()
    out.family('llm_test_up', 'gauge', 'Whether it answered.\nSecond line with a \\ backslash.',
               [({'engine': 'a "quoted" one'}, True), ([('engine', 'b'), ('gpu', 1)], 0.5)])
    out.family('llm_test_requests_total', 'counter', 'Requests.', [({}, 7)])
    out.family('llm_test_nothing', 'gauge', 'No samples yet.', [])
    text = out.text()
    assert text.endswith('\n') and 'llm_test_requests_total 7\n' in text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    up = families['llm_test_up']
    assert up.documentation == 'Whether it answered.\nSecond line with a \\ backslash.'
    assert [(s.labels, s.value) for s in up.samples] == [({'engine': 'a "quoted" one'}, 1.0),
                                                         ({'engine': 'b', 'gpu': '1'}, 0.5)]
    assert families['llm_test_requests'].type == 'counter'
    assert families['llm_test_requests'].samples[0].value == 7.0
    assert families['llm_test_nothing'].samples == []
