"""Acceptance per request, from each engine's own per-request counts (its adapter maps them to
SERVER_SPEC_DRAFTED / SERVER_SPEC_ACCEPTED: llama.cpp `timings.draft_n` / `draft_n_accepted`, SGLang
`spec_num_proposed_drafts` / `spec_num_correct_drafts`; vLLM reports none unless a run turns on its
per-request spec-decode metrics). A server-wide ratio is biased toward long completions, so both weightings
are given, as aiperf does: token-weighted (sum accepted / sum drafted over the cell's requests) and
request-weighted (the mean of each request's accepted / drafted), with the distribution of the latter."""

from __future__ import annotations

import statistics

import numpy

from stackbench.measure.client import RequestRecord
from stackbench.measure.summary import REQUESTS, Figure
from stackbench.results.metrics import REQUEST_ACCEPT_RATE_BIN, SERVER_SPEC_ACCEPTED, SERVER_SPEC_DRAFTED, M

HISTOGRAM_BINS = 10  # request_accept_rate_bin<i>: requests whose rate is in [i/10, (i+1)/10); the last holds 1.0


def request_rates(records: list[RequestRecord]) -> list[tuple[float, float]]:
    """(accepted, drafted) of each ok request that drafted anything."""
    return [(r.server[SERVER_SPEC_ACCEPTED], r.server[SERVER_SPEC_DRAFTED]) for r in records
            if r.status == "ok" and r.server.get(SERVER_SPEC_DRAFTED) and SERVER_SPEC_ACCEPTED in r.server]


def request_acceptance_figures(records: list[RequestRecord]) -> list[Figure]:
    pairs = request_rates(records)
    if not pairs:
        return []
    rates = [accepted / drafted for accepted, drafted in pairs]
    n = len(rates)
    source = "from the engine's per-request draft counts"
    figures = [
        Figure(M.accept_rate_token_weighted, sum(a for a, _ in pairs) / sum(d for _, d in pairs), "mean", n,
               note=f"sum of accepted / sum of drafted tokens over the cell's {n} requests, {source}"),
        Figure(M.accept_rate_request_weighted, statistics.fmean(rates), "mean", n,
               note=f"mean over the cell's {n} requests of accepted / drafted, {source}"),
    ]
    for q, metric, stat in ((10, M.request_accept_rate_p10, "p10"), (50, M.request_accept_rate_p50, "median"),
                            (90, M.request_accept_rate_p90, "p90")):
        figures.append(Figure(metric, float(numpy.percentile(rates, q)), stat, n,
                              float(min(rates)), float(max(rates)), spread_over=REQUESTS,
                              note=f"accepted / drafted per request, {q}th percentile over {n} requests"))
    counts = numpy.histogram(numpy.clip(rates, 0, 1), bins=HISTOGRAM_BINS, range=(0, 1))[0]
    figures += [Figure(REQUEST_ACCEPT_RATE_BIN.member(i), int(count), "single", n,
                       note=f"requests whose accepted / drafted is in [{i / HISTOGRAM_BINS:g}, {(i + 1) / HISTOGRAM_BINS:g}"
                            + ("]" if i == HISTOGRAM_BINS - 1 else ")"))
                for i, count in enumerate(counts)]
    return figures
