"""What a report is made of: sections, in the one order report.md and the page both follow (sections/).

A section has an id, its heading and a build that turns the report's shared frames (`Context`) into parts:
tables, full per-cell tables, charts, paragraphs and bullet lines. Each part knows its Markdown and its HTML,
so a section is written once and both forms are loops over the list. A rehearsal's report (stand-in engines,
rows of source 'rehearsal') reads through its `Mode`: each section states what a rehearsal does with it,
KEEP (the same build, every table titled as a rehearsal's), DROP (nothing), or a build of its own in place of
the measured one.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from stackbench import analysis
from stackbench.report import queries
from stackbench.report.derived import Background
from stackbench.report.full import FullTable, full_html, full_markdown
from stackbench.report.layouts import Layout, load_layouts
from stackbench.report.queries import Results
from stackbench.report.table import Table, script_json, to_html, to_markdown
from stackbench.results.store import MEASURED as MEASURED_SOURCES

# A rehearsal's rows have source "rehearsal" (measure/rows.py); its report says so in every table's title too.
REHEARSAL_TITLE = ("REHEARSAL (stand-in engines at their modeled pace, time scale divided out; simulated GPUs; "
                   "not measurements): ")
HEADING = "Stack comparison report"


# -- parts: what a section's build returns, each with its Markdown and its HTML ---------------------------

@dataclass
class Paragraph:
    text: str

    def markdown(self) -> str:
        return self.text + "\n"

    def html(self, css: str) -> str:
        return f"<p>{html.escape(self.text)}</p>"


@dataclass
class Bullets:
    lines: list[str]

    def markdown(self) -> str:
        return "\n".join(f"- {line}" for line in self.lines) + "\n"

    def html(self, css: str) -> str:
        return "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in self.lines) + "</ul>"


@dataclass
class Chart:
    """A plotly figure (report/charts.py): drawn in the page; report.md has no charts."""

    figure: dict
    number: int = 0  # its place among the page's charts, for a unique element id

    def markdown(self) -> str | None:
        return None

    def html(self, css: str) -> str:
        chart = f"chart-{self.number}"
        return (f"<div class='chart' id='{chart}'></div><script>Plotly.newPlot('{chart}', "
                f"{script_json(self.figure['data'])}, {script_json(self.figure['layout'])}, {{responsive: true}})</script>")


def markdown_of(part) -> str | None:
    match part:
        case Table():
            return to_markdown(part)
        case FullTable():
            return full_markdown(part)
    return part.markdown()


def html_of(part, css: str) -> str:
    match part:
        case Table():
            return to_html(part, css)
        case FullTable():
            return full_html(part)
    return part.html(css)


# -- the two kinds of report ---------------------------------------------------------------------------

KEEP, DROP = "keep", "drop"


@dataclass(frozen=True)
class Mode:
    """What kind of rows the report is about: measured ones (the default report) or a rehearsal's."""

    name: str
    title: str  # before every table's title and the report's heading
    one_node: bool  # a rehearsal's report is about its own node: its nodes, and the posts about it or its GPU
    reads: str  # the Section field that says what this kind of report builds

    def build(self, section: Section) -> Callable[[Context], list] | None:
        """The build this kind of report runs for `section`, None where it shows nothing."""
        treatment = getattr(section, self.reads)
        return {KEEP: section.build, DROP: None}.get(treatment, treatment)

    def marked(self, part):
        """A table or full table titled as this kind of report's."""
        if not self.title:
            return part
        match part:
            case Table():
                return dataclasses.replace(part, title=self.title + part.title)
            case FullTable():
                return dataclasses.replace(part, title_prefix=self.title)
        return part


MEASURED = Mode("measured", "", one_node=False, reads="build")
REHEARSED = Mode("rehearsal", REHEARSAL_TITLE, one_node=True, reads="rehearsal")


def mode_of(results: Results) -> Mode:
    return (MEASURED, REHEARSED)[queries.has_rehearsal_rows(results)]


@dataclass(frozen=True)
class Section:
    id: str
    title: str  # its heading in report.md and the page
    build: Callable[[Context], list]  # the parts of a measured report
    rehearsal: str | Callable[[Context], list] = KEEP  # KEEP, DROP, or the build a rehearsal's report runs instead
    always: bool = False  # headed even where it has no parts
    css: str = "table"  # the page's class for its tables
    boxed: str = ""  # the page puts the section, heading and all, in a box of this class
    markdown: bool = True  # False: the page only (charts)
    start: Callable[[Context], None] | None = None  # work started on the background thread before any section builds


# -- the shared frames: each computed once, where a section first asks -----------------------------------

@dataclass
class Context:
    results: Results
    mode: Mode
    out_dir: Path
    published_dir: Path
    budget_path: Path | None
    kept_dir: Path | None
    rules: dict | None
    background: Background  # the worker that writes whole tables while the sections build
    started: dict = field(default_factory=dict)  # the background jobs sections started (Section.start)

    @property
    def table_dir(self) -> Path:
        return self.out_dir / "tables"

    @cached_property
    def counts(self) -> dict[str, int]:
        return queries.source_counts(self.results)

    @cached_property
    def nodes(self) -> list[str]:
        """Nodes measured here first, then the posts' nodes; a rehearsal's report, its own node only."""
        return queries.nodes(self.results, measured_only=self.mode.one_node)

    @cached_property
    def frame(self) -> pd.DataFrame:
        """What the analyses read (the registry's analysed metrics, geometry, a sweep's stock limit)."""
        frame = queries.analysed(self.results)
        return own_rows(frame, self.nodes) if self.mode.one_node else frame

    @cached_property
    def by_variant(self) -> pd.DataFrame:
        return analysis.correctness_by_variant(queries.correctness_input(self.results))

    @cached_property
    def decide_rows(self) -> pd.DataFrame:
        return queries.decide_input(self.results)

    @cached_property
    def choices(self) -> pd.DataFrame:
        return analysis.what_to_run(self.decide_rows, self.by_variant, self.rules)

    @cached_property
    def agreement(self) -> pd.DataFrame:
        return queries.cross_stack_input(self.results)

    @cached_property
    def roofline(self) -> pd.DataFrame:
        return analysis.roofline(self.frame)

    @cached_property
    def spec(self) -> pd.DataFrame:
        return analysis.spec_value_by_context(self.frame)

    @cached_property
    def caps_refused(self) -> dict[str, str]:
        return queries.caps_not_applied(self.results)

    @cached_property
    def caps_refused_lines(self) -> list[str]:
        """One line per node whose GPU refused a cap, and one per node whose launches did not sweep caps at or above
        their stock cells' draw, said under every table that reads caps as applied."""
        return ([f"power {why}: those cells are analysed as uncapped." for why in self.caps_refused.values()]
                + list(queries.caps_not_swept(self.results).values()))

    @cached_property
    def layouts(self) -> dict[str, Layout]:
        return load_layouts(self.published_dir)


def undecided(table: Table, why: str) -> Table:
    """A verdict table of a report that cannot decide it (a rehearsal's): instead of its rows, why not."""
    return dataclasses.replace(table, columns=["what a rehearsal cannot decide"], rows=[[why]], raw_rows=[[None]],
                               caveats=[], legend=[])


def own_rows(frame: pd.DataFrame, nodes: list[str]) -> pd.DataFrame:
    """A node's report (a rehearsal's): its own rows, and of the posts' those of its node or its GPU, so no other
    node's figures (a 2x3090 power sweep in an RTX 5090 report) enter its analyses."""
    gpus = {gpu_key(g) for g in frame.loc[frame["source"].isin(MEASURED_SOURCES) & frame["node"].isin(nodes), "gpu"].dropna()}
    posts = frame["source"].eq("published") & frame["gpu"].map(lambda g: isinstance(g, str) and gpu_key(g) in gpus)
    return frame[frame["node"].isin(nodes) | posts].reset_index(drop=True)


def gpu_key(name: str) -> str:
    """A GPU's model as NVML and a post both name it: 'NVIDIA GeForce RTX 5090' and 'RTX 5090 32GB' are 'rtx5090'."""
    words = [w for w in name.lower().replace("nvidia", "").replace("geforce", "").split()
             if not (w.endswith("gb") and w[:-2].isdigit())]
    return "".join(words)
