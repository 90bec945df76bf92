"""The report's sections, in the order report.md and the page show them: adding a section is a module here and
its entry in SECTIONS (report/section.py says what a section is)."""

from stackbench.report.sections import (
    analysis,
    answer,
    bundles,
    charts,
    correctness,
    full_tables,
    headline,
    implausible,
    seeds,
    texts,
    time_budget,
    what_to_run,
    without_figure,
)

SECTIONS = [module.SECTION for module in (answer, time_budget, headline, what_to_run, texts, correctness, without_figure,
                                          implausible, bundles, full_tables, charts, analysis, seeds)]
