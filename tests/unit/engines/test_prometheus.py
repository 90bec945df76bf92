"""/metrics parsing through prometheus_client: the cases a hand-written regex got wrong."""

import pytest

from stackbench.engines import prometheus


def test_a_label_value_containing_a_closing_brace():
    samples = prometheus.parse('vllm:cache_config_info{model="a}b",engine="0"} 1.0\n'
                               'vllm:spec_decode_num_drafts_total{model="a}b",engine="0"} 12\n')
    assert prometheus.value(samples, "vllm:spec_decode_num_drafts_total", model="a}b") == 12.0


def test_exemplars_in_openmetrics_text_do_not_change_the_value():
    text = ('# TYPE vllm:e2e_request_latency_seconds histogram\n'
            'vllm:e2e_request_latency_seconds_bucket{le="1.0"} 3 # {trace_id="abc"} 0.5 1700000000.1\n'
            'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 4\n'
            'vllm:e2e_request_latency_seconds_count 4\nvllm:e2e_request_latency_seconds_sum 2.5\n# EOF\n')
    samples = prometheus.parse(text)
    assert prometheus.by_label(samples, "vllm:e2e_request_latency_seconds_bucket", "le") == {"1.0": 3.0, "+Inf": 4.0}


def test_an_exemplar_on_a_plain_text_line_keeps_the_sample_value():
    samples = prometheus.parse('llamacpp:n_decode_total 7 # {trace_id="abc"} 1.0\n')
    assert prometheus.value(samples, "llamacpp:n_decode_total") == 7.0


def test_label_values_are_summed_or_split():
    samples = prometheus.parse('x_total{position="0",engine="0"} 2\nx_total{position="0",engine="1"} 3\n'
                               'x_total{position="1",engine="0"} 1\n')
    assert prometheus.by_label(samples, "x_total", "position") == {"0": 5.0, "1": 1.0}
    assert prometheus.value(samples, "x_total") == 6.0 and prometheus.value(samples, "missing") is None


def test_text_that_is_not_the_format_raises_the_projects_error():
    with pytest.raises(prometheus.MetricsFormatError, match="not in the Prometheus exposition format"):
        prometheus.parse("<html>502 Bad Gateway</html>\n")
