"""The report is its list of sections (report/sections/): a section added to the list appears in report.md and
the page, in its place, with its tables written; a rehearsal's report keeps, drops or replaces it as the section
says; every module under report/sections/ is in the list once; write_report stays a loop."""

import inspect
import pkgutil

import pandas as pd
import pytest
from paths import ROOT

from stackbench.report import render, sections
from stackbench.report.section import DROP, KEEP, REHEARSAL_TITLE, Paragraph, Section
from stackbench.report.table import frame_table

GOLDEN = ROOT / "tests/fixtures/results"


def nodes_section(ctx):
    return [frame_table(pd.DataFrame({"node": ctx.nodes}), "test-section", "Nodes of this report", "a test section"),
            Paragraph("A test section's closing line.")]


def rehearsed_example(ctx):
    return [Paragraph("What a rehearsal says instead.")]


def render_with(section: Section, golden: str, out):
    given = GOLDEN / golden
    budget = given / "budget.json"
    listed = [*sections.SECTIONS]
    listed.insert(3, section)  # after the headline
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(render, "SECTIONS", listed)
        render.write_report(given / "results.parquet", out, given / "published",
                            budget_path=budget if budget.exists() else None)
    return (out / "report.md").read_text(encoding="utf-8"), (out / "index.html").read_text(encoding="utf-8")


def test_a_section_added_to_the_list_is_in_both_documents_in_its_place(tmp_path):
    markdown, page = render_with(Section("test", "A test section", nodes_section), "report", tmp_path)
    assert markdown.index("## Headline") < markdown.index("## A test section") < markdown.index("## What to run")
    assert "### Nodes of this report" in markdown and "A test section's closing line." in markdown
    assert page.index("<h2>Headline") < page.index("<h2>A test section</h2>") < page.index("<h2>What to run</h2>")
    assert "id='test-section'" in page
    assert (tmp_path / "tables" / "test-section.csv").read_text().startswith("node\n")


@pytest.mark.parametrize(("treatment", "shown", "hidden"), [
    (KEEP, f"### {REHEARSAL_TITLE}Nodes", "What a rehearsal says instead."),
    (DROP, None, "## A test section"),
    (rehearsed_example, "What a rehearsal says instead.", f"### {REHEARSAL_TITLE}Nodes"),
])
def test_a_rehearsal_keeps_drops_or_replaces_a_section_as_it_says(tmp_path, treatment, shown, hidden):
    markdown, _ = render_with(Section("test", "A test section", nodes_section, rehearsal=treatment),
                              "report-rehearsal", tmp_path)
    section = markdown.split("## A test section", 1)[1].split("\n## ", 1)[0] if shown else markdown
    if shown:
        assert shown in section
    assert hidden not in section


def test_every_section_module_is_listed_once_with_its_own_id():
    modules = {m.name for m in pkgutil.iter_modules(sections.__path__)}
    listed = [s for s in sections.SECTIONS]
    assert len({s.id for s in listed}) == len(listed)
    assert {inspect.getmodule(s.build).__name__.rsplit(".", 1)[1] for s in listed} == modules


def test_write_report_is_a_loop_over_the_sections():
    assert len(inspect.getsource(render.write_report).splitlines()) < 40
