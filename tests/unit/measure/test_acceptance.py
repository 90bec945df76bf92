"""Acceptance per request: token- and request-weighted acceptance, its distribution and histogram, from the
adapters' per-request counts (llama.cpp's from a real capture, the rest hand-made test data)."""

import json

import pytest
from paths import FIXTURES

from stackbench.engines import ADAPTERS
from stackbench.measure import acceptance
from stackbench.measure.client import RequestRecord


def record(server: dict, status="ok") -> RequestRecord:
    return RequestRecord(stream=0, turn=0, t_submit=0.0, status=status, server=server)


def real_llamacpp_final_chunk() -> dict:
    lines = (FIXTURES / "llamacpp/stream-chat.sse").read_text().splitlines()
    return json.loads([line for line in lines if line.startswith("data:") and "timings" in line][-1][5:])


def test_a_real_llamacpp_response_gives_its_requests_acceptance():
    timings = ADAPTERS["llamacpp"].server_timings(real_llamacpp_final_chunk())
    figures = {f.metric: f for f in acceptance.request_acceptance_figures([record(timings)])}
    assert figures["accept_rate_token_weighted"].value == pytest.approx(9 / 17)
    assert figures["request_accept_rate_p50"].value == pytest.approx(9 / 17) and figures["request_accept_rate_p50"].n == 1
    assert figures["request_accept_rate_bin5"].value == 1  # 0.53 falls in [0.5, 0.6)


def test_token_and_request_weighting_differ_when_a_long_request_accepts_less():
    # A long completion with a low rate dominates the token-weighted figure, not the request-weighted one.
    sglang = ADAPTERS["sglang"]
    chunks = [{"usage": {"completion_tokens": c}, "sglext": {"spec_tokens_details": {
        "spec_verify_ct": v, "spec_num_proposed_drafts": d, "spec_num_correct_drafts": a}}}
        for c, v, d, a in ((512, 400, 1200, 120), (64, 20, 60, 48), (64, 20, 60, 54))]
    records = [record(sglang.server_timings(chunk)) for chunk in chunks] + [record({}, status="failed")]
    figures = {f.metric: f for f in acceptance.request_acceptance_figures(records)}
    assert figures["accept_rate_token_weighted"].value == pytest.approx(222 / 1320)
    assert figures["accept_rate_request_weighted"].value == pytest.approx((0.1 + 0.8 + 0.9) / 3)
    assert figures["request_accept_rate_p10"].stat == "p10" and figures["request_accept_rate_p90"].n == 3
    bins = [figures[f"request_accept_rate_bin{i}"].value for i in range(acceptance.HISTOGRAM_BINS)]
    assert bins == [0, 1, 0, 0, 0, 0, 0, 0, 1, 1] and "[0.9, 1]" in figures["request_accept_rate_bin9"].note


def test_no_per_request_counts_no_figures():
    assert acceptance.request_acceptance_figures([record({"server_decode_tps": 50.0})]) == []
    assert ADAPTERS["vllm"].server_timings({"usage": {"completion_tokens": 5}}) == {}
