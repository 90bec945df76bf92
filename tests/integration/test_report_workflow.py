"""The report as the workflow and a browser make it: `snakemake --cores 1 report` end to end in a temporary copy on
published data, no leaked NaN/None/cnan in what it wrote, the page offline, Snakemake's own --report, and the
page in headless Chromium (DOM and screenshot). The in-process renders are tests/unit/report/test_report.py."""

import re
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest
from capabilities import require
from helpers import copy_repo
from paths import ROOT
from report_pages import assert_no_leaks, write_mixed_report
from test_tools import installed_for_tests

from stackbench.report.layouts import load_layouts
from stackbench.results import store


@pytest.fixture(scope="module")
def published_report(tmp_path_factory) -> Path:
    """The report target on published data only (no node selected), as a fresh clone would run it."""
    dest = copy_repo(tmp_path_factory.mktemp("e2e") / "repo")
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "report", "--config", "nodes=[]"],
                          cwd=dest, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return dest


@pytest.fixture(scope="module")
def mixed_report(tmp_path_factory) -> Path:
    return write_mixed_report(tmp_path_factory.mktemp("mixed"))


@pytest.mark.integration
def test_report_target_writes_tables_and_html(published_report):
    reports = published_report / "reports"
    assert (reports / "index.html").exists() and (reports / "report.md").exists()
    layouts = load_layouts(ROOT / "data/published")
    for table_id in layouts:
        assert (reports / "tables" / f"{table_id}.md").exists(), table_id
        assert (reports / "tables" / f"{table_id}.csv").exists(), table_id
    assert (reports / "tables" / "headline-rtx5090.md").exists()
    assert (reports / "tables" / "cells-rtx5090.parquet").exists()
    rows = store.read_results(published_report / "data/results.parquet")
    assert (~rows["metric"].str.startswith("geometry_")).sum() == 179  # the seeds' figures, beside their model's geometry


@pytest.mark.integration
def test_no_nan_none_or_cnan_in_the_report_targets_output(published_report):
    assert_no_leaks(published_report / "reports")


@pytest.mark.integration
def test_html_is_offline(published_report):
    page = (published_report / "reports/index.html").read_text()
    # plotly.js is inlined: no script or stylesheet is fetched from the network.
    assert not re.search(r"<script[^>]+src=", page)
    assert not re.search(r"<link[^>]+href=[\"']https?:", page)
    assert "Plotly.newPlot" in page


@pytest.mark.integration
def test_snakemakes_own_report_holds_the_tables_and_page(published_report):
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "report", "--config", "nodes=[]",
                           "--report", "report.zip"], cwd=published_report, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    names = zipfile.ZipFile(published_report / "report.zip").namelist()
    assert any(n.endswith("index.html") for n in names) and any(n.endswith("headline-rtx5090.csv") for n in names)


@pytest.fixture(scope="module")
def chromium_binary() -> str:
    found = installed_for_tests("chromium", "chromium-browser")
    require("Chromium", None if found else "Debian's chromium is not installed (setup.sh installs it when run as root)")
    return found


def chromium(binary: str, *args, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=8000", *args],
        capture_output=True, text=True, timeout=120)


def distinct_scanlines(png: bytes) -> int:
    """Distinct raw scanlines of a PNG (8-bit RGB or RGBA, not interlaced): a blank page has a handful."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    at, data, width, channels = 8, b"", 0, 0
    while at < len(png):
        length, kind = struct.unpack(">I4s", png[at:at + 8])
        chunk = png[at + 8:at + 8 + length]
        if kind == b"IHDR":
            width, _, depth, colour = struct.unpack(">IIBB", chunk[:10])
            channels = {2: 3, 6: 4}[colour]
            assert depth == 8
        elif kind == b"IDAT":
            data += chunk
        at += 12 + length
    raw = zlib.decompress(data)
    stride = 1 + width * channels
    return len({raw[i + 1:i + stride] for i in range(0, len(raw), stride)})


@pytest.mark.browser
@pytest.mark.integration
def test_html_renders_in_headless_chromium_answer_then_headline_first(mixed_report, tmp_path, chromium_binary):
    page = mixed_report / "index.html"
    done = chromium(chromium_binary, "--dump-dom", page.as_uri(), tmp_path=tmp_path)
    console_errors = [line for line in done.stderr.splitlines() if "CONSOLE" in line and ("Error" in line or "Uncaught" in line)]
    assert console_errors == []
    dom = done.stdout
    first = dom[dom.index("<table>"):dom.index("</table>")]
    assert "<th>verdict</th>" in first  # the answer is the first table, the headline the next
    after = dom[dom.index("</table>") + 8:]
    second = after[after.index("<table>"):after.index("</table>")]
    assert "decode tok/s" in second and "draft-n2" in second and "81.3" in second
    assert dom.count('class="main-svg"') >= 2 * 4  # plotly drew the charts
    assert "rows 1-10 of 10" in dom  # the paginated full table filled itself in
    shot = tmp_path / "headline.png"
    chromium(chromium_binary, "--window-size=1280,900", f"--screenshot={shot}", page.as_uri(), tmp_path=tmp_path)
    assert distinct_scanlines(shot.read_bytes()) > 100
