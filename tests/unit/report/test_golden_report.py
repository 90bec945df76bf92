"""Rendering one fixed results table gives the same report files as before the package's modules moved.

tests/fixtures/results/report/ holds the input (results.parquet: the published rows plus the hand-built
measured run of test_report.measured_rows, test data, not a measurement; published/: the posts' layouts
it was rendered with) and the files main rendered from it before the arch moves (expected/: report.md,
every table's .csv and .md, and index.html without the Plotly library it inlines). A change meant to change
the report regenerates expected/ with STACKBENCH_REGOLD=1 and shows the difference in its commit.
"""

import os
import re
import shutil
from pathlib import Path

import pytest
from paths import ROOT

from stackbench.report import render

GOLDEN = ROOT / "tests/fixtures/results/report"
PLOTLY_LIBRARY = re.compile(r"<script type='text/javascript'>.*?</script>", re.S)


def compared_files(reports: Path) -> dict[str, str]:
    """Relative path -> text of every report file that is text: the page without the Plotly library."""
    files = {"report.md": (reports / "report.md").read_text()}
    files["index.html"] = PLOTLY_LIBRARY.sub("", (reports / "index.html").read_text(), count=1)
    for path in sorted((reports / "tables").iterdir()):
        if path.suffix in (".csv", ".md"):
            files[f"tables/{path.name}"] = path.read_text()
    return files


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("golden") / "reports"
    render.write_report(GOLDEN / "results.parquet", out, GOLDEN / "published")
    return compared_files(out)


def test_the_fixed_results_render_the_same_report(rendered):
    expected_dir = GOLDEN / "expected"
    if os.environ.get("STACKBENCH_REGOLD"):
        shutil.rmtree(expected_dir)
        for name, text in rendered.items():
            (expected_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (expected_dir / name).write_text(text)
    expected = {str(p.relative_to(expected_dir)): p.read_text() for p in sorted(expected_dir.rglob("*")) if p.is_file()}
    assert sorted(rendered) == sorted(expected)
    changed = [name for name in expected if rendered[name] != expected[name]]
    assert changed == []
