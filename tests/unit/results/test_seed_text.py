"""Every published figure is checked against the seed post itself (data/published/seeds/, verbatim copies),
not against the same numbers typed a second time: it must appear in the section its row names."""

import math

import pytest
import yaml
from paths import ROOT

from stackbench.results import published

PUBLISHED = ROOT / "data/published"


def section_spans(text: str, sections: dict[str, str], where: str) -> dict[str, str]:
    """Section id -> its text: from its opening text to the next declared section's opening text."""
    starts = {}
    for section, opening in sections.items():
        at = text.find(opening)
        assert at >= 0, f"{where}: section {section!r}: opening text {opening!r} not in the seed"
        starts[section] = at
    ordered = sorted(starts.items(), key=lambda item: item[1])
    ends = [at for _, at in ordered[1:]] + [len(text)]
    return {section: text[at:end] for (section, at), end in zip(ordered, ends)}


def renderings(value: float) -> set[str]:
    """How a post may write a number: as typed, with thousands separators, in 万 (10^4)."""
    forms = {f"{value:g}", f"{value:,.0f}" if float(value).is_integer() else f"{value:g}"}
    if value >= 10_000:
        forms.add(f"{value / 10_000:g} 万")
        forms.add(f"{value / 10_000:g}万")
    if isinstance(value, float) and not value.is_integer():
        forms.add(f"{value:.2f}")  # 7.90, 0.50
    return forms


def figure_rows():
    for path in sorted(PUBLISHED.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for group in doc["groups"]:
            for row_no, row in enumerate(group["rows"]):
                merged = {**doc.get("basis", {}), **group.get("basis", {}), **row}
                yield pytest.param(path.name, doc["seed"], group["section"], merged,
                                   id=f"{path.stem[:3]}-{group['table_id']}-{row_no}")


@pytest.fixture(scope="module")
def spans():
    out = {}
    for path in sorted(PUBLISHED.glob("*.yaml")):
        seed, sections = published.load_sections(path)
        text = (PUBLISHED / "seeds" / seed).read_text(encoding="utf-8")
        out[seed] = section_spans(text, sections, path.name)
    return out


@pytest.mark.parametrize("file_name, seed, section, row", list(figure_rows()))
def test_every_published_figure_appears_in_the_section_its_row_names(spans, file_name, seed, section, row):
    text = spans[seed][section]
    if "quote" in row:
        assert row["quote"] in text, f"{file_name} §{section} {row['row_label']}: {row['quote']!r} not in the section"
        return
    numbers = [row[k] for k in ("value_min", "value_max") if row.get(k) is not None] or [row.get("value")]
    for number in numbers:
        assert number is not None and not math.isnan(number), f"{file_name}: {row['row_label']}: no figure and no quote"
        assert any(form in text for form in renderings(number)), (
            f"{file_name} §{section} {row['row_label']}: {number} ({sorted(renderings(number))}) not in the section")


def test_section_spans_split_at_the_declared_openings():
    text = "intro 1. alpha 12 2. beta 34"
    assert section_spans(text, {"2": "2. beta", "1": "1. alpha"}, "t") == {"1": "1. alpha 12 ", "2": "2. beta 34"}


def test_a_figure_in_another_section_is_not_found():
    spans = section_spans("1. alpha 12 2. beta 34", {"1": "1. alpha", "2": "2. beta"}, "t")
    assert not any(form in spans["1"] for form in renderings(34))
