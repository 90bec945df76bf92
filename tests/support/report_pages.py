"""The report's test data and page checks, shared by the fast lane's in-process renders and the integration
lane's workflow and browser runs: a hand-built measured run beside the published rows, and the check that no
NaN/None/cnan leaks into what the report wrote."""

import re
from pathlib import Path

import pandas as pd
from paths import ROOT

from stackbench.report import render
from stackbench.results import published, store

PLOTLY_SCRIPT = re.compile(r"<script type='text/javascript'>.*?</script>", re.S)
SCRIPTS = re.compile(r"<script[^>]*>.*?</script>", re.S)
LEAKS = re.compile(r"\bnan\b|\bNaN\b|\bNone\b|cnan|\bnull\b|\bundefined\b")


def measured_rows() -> list[dict]:
    """A hand-built measured run (test data, not a measurement): one CPU node, two variants, a server row
    set per launch with no workload or concurrency, power not measured, one rejected cell."""
    base = dict(source="measured", ref="test-run", node="test-cpu", stack="llamacpp", unit="tok/s", stat="median",
                n=3, status="ok", os="Debian 13", engine="llama.cpp", engine_version="b11434", model="SmolLM2-135M",
                quant="Q4_K_M", kv_dtype="f16", context_len=2048, temperature=0.0, ttft_included="no", gpu="none",
                gpu_count=0, tp=1)
    rows = []
    for variant, spec, speed in (("nospec", "none", 68.123), ("draft-n2", "draft", 81.349)):
        launch = dict(base, variant=variant, spec_method=spec, spec_tokens=2 if spec == "draft" else None)
        for workload in ("code", "json"):
            for concurrency in (1, 2):
                cell = dict(launch, workload=workload, concurrency=concurrency, prompt_tokens=40, output_tokens=64)
                rows += [dict(cell, metric="decode_tps", value=speed, value_min=speed * 0.97, value_max=speed * 1.02),
                         dict(cell, metric="aggregate_tps", value=speed * concurrency * 0.9),
                         dict(cell, metric="ttft_s", value=0.3942, value_min=0.2923, value_max=0.4234, unit="s")]
        rows += [dict(launch, metric="kv_pool_tokens", value=4096, unit="tokens", stat="single"),
                 dict(launch, metric="power_w", unit="W", stat="single", status="not_run",
                      reason="GPU telemetry and power caps not applied: no GPU on this node"),
                 dict(launch, metric="host_mem_bandwidth_gbs", value=9.8, unit="GB/s", stat="peak")]
    rows.append(dict(base, variant="nospec", spec_method="none", workload="long", concurrency=1, metric="decode_tps",
                     status="rejected", reason="HTTP 400: over the context"))
    return rows


def write_mixed_report(out: Path) -> Path:
    """write_report on published rows plus the hand-built measured run (measured_rows) into `out`; its reports folder."""
    records = published.load_all(ROOT / "data/published", ROOT) + measured_rows()
    store.atomic_write_parquet(store.to_table(pd.DataFrame(records)), out / "results.parquet")
    render.write_report(out / "results.parquet", out / "reports", ROOT / "data/published")
    return out / "reports"


def without_plotly_library(page: str) -> str:
    return PLOTLY_SCRIPT.sub("", page, count=1)


def assert_no_leaks(reports: Path) -> None:
    for path in [reports / "report.md", reports / "index.html", *sorted((reports / "tables").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".html":
            text = without_plotly_library(text)  # the plotly.js library itself names NaN
            scripts = "".join(SCRIPTS.findall(text))
            assert not re.search(r"\bNaN\b|cnan", scripts), f"{path.name}: NaN in chart or table data"
            text = SCRIPTS.sub("", text)  # JSON null in chart and table data is how a gap is written there
        found = LEAKS.findall(text)
        assert found == [], f"{path.name}: {found[:5]}"
