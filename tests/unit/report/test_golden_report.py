"""Rendering fixed results tables gives the same report files as before the package's modules moved.

tests/fixtures/results/report/ holds the input (results.parquet: the published rows plus the hand-built
measured run of report_pages.measured_rows (tests/support), test data, not a measurement; published/: the posts' layouts
it was rendered with) and the files main rendered from it before the arch moves (expected/: report.md,
every table's .csv and .md, and index.html without the Plotly library it inlines).
tests/fixtures/results/report-rehearsal/ is a rehearsal's: the published rows plus
test_rehearsal_report.rehearsal_rows (hand-built stand-in rows, test data) and the time budget of two
hand-built launches (budget.json, rehearsal/budget.py on test_rehearsal_report.write_launch's files).
A change meant to change a report regenerates expected/ with STACKBENCH_REGOLD=1 and shows the difference
in its commit.
"""

import os
import re
import shutil
from pathlib import Path

import pytest
from paths import ROOT

from stackbench.report import render

FIXTURES = ROOT / "tests/fixtures/results"
PLOTLY_LIBRARY = re.compile(r"<script type='text/javascript'>.*?</script>", re.S)


def compared_files(reports: Path) -> dict[str, str]:
    """Relative path -> text of every report file that is text: the page without the Plotly library."""
    files = {"report.md": (reports / "report.md").read_text()}
    files["index.html"] = PLOTLY_LIBRARY.sub("", (reports / "index.html").read_text(), count=1)
    for path in sorted((reports / "tables").iterdir()):
        if path.suffix in (".csv", ".md"):
            files[f"tables/{path.name}"] = path.read_text()
    return files


@pytest.mark.parametrize("golden", ["report", "report-rehearsal"])
def test_the_fixed_results_render_the_same_report(golden, tmp_path):
    given = FIXTURES / golden
    budget = given / "budget.json"
    render.write_report(given / "results.parquet", tmp_path / "reports", given / "published",
                        budget_path=budget if budget.exists() else None)
    rendered = compared_files(tmp_path / "reports")
    expected_dir = given / "expected"
    if os.environ.get("STACKBENCH_REGOLD"):
        shutil.rmtree(expected_dir, ignore_errors=True)
        for name, text in rendered.items():
            (expected_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (expected_dir / name).write_text(text)
    expected = {str(p.relative_to(expected_dir)): p.read_text() for p in sorted(expected_dir.rglob("*")) if p.is_file()}
    assert sorted(rendered) == sorted(expected)
    changed = [name for name in expected if rendered[name] != expected[name]]
    assert changed == []
