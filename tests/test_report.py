"""`snakemake --cores 1 report` end to end in a temporary copy, and the HTML report in headless Chromium."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stackbench.report import render
from stackbench import store

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def published_report(tmp_path_factory) -> Path:
    """The report target on published data only (no node selected), as a fresh clone would run it."""
    from conftest import ROOT

    dest = tmp_path_factory.mktemp("e2e") / "repo"
    dest.mkdir()
    for name in ("Snakefile", "workflow", "configs", "envs"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    shutil.copytree(ROOT / "data/published", dest / "data/published")
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "report", "--config", "nodes=[]"],
                          cwd=dest, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return dest


def test_report_target_writes_tables_and_html(published_report):
    reports = published_report / "reports"
    assert (reports / "index.html").exists() and (reports / "report.md").exists()
    for table_id in render.SEED_TABLES:
        assert (reports / "tables" / f"{table_id}.md").exists(), table_id
        assert (reports / "tables" / f"{table_id}.csv").exists(), table_id
    assert (reports / "tables" / "four-way-rtx5090.md").exists()
    results = store.read_results(published_report / "data/results.parquet")
    assert len(results) == 172


def test_markdown_tables_carry_their_caveats(published_report):
    text = (published_report / "reports/tables/s000-fourway.md").read_text()
    assert "**Basis differs between rows:**" in text
    assert "- OS: row 1 at Windows 11, row 2 at Ubuntu." in text
    # The power sweep has one basis: no caveat block at all.
    assert "Basis differs" not in (published_report / "reports/tables/s002-power-sweep.md").read_text()


def test_html_is_offline(published_report):
    page = (published_report / "reports/index.html").read_text()
    # plotly.js is inlined: no script or stylesheet is fetched from the network.
    assert not re.search(r"<script[^>]+src=", page)
    assert not re.search(r"<link[^>]+href=[\"']https?:", page)
    assert "Plotly.newPlot" in page


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_html_renders_in_headless_chromium_without_console_errors(published_report, tmp_path):
    page = published_report / "reports/index.html"
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=8000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    dom = done.stdout
    console_errors = [line for line in done.stderr.splitlines() if "CONSOLE" in line and ("Error" in line or "Uncaught" in line)]
    assert console_errors == []
    assert dom.count("<table>") >= len(render.SEED_TABLES)
    # plotly replaced each chart placeholder with a rendered SVG plot.
    assert dom.count('class="main-svg"') >= 2 * 2
    assert "Throughput against GPU power cap" in dom
