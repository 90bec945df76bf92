"""README stays a five-minute read and its reference pages stay reachable: under 200 lines, and every
relative link in README and in docs/ names a file that exists."""

import re
from pathlib import Path

import pytest
from paths import ROOT

README_MAX_LINES = 200
# [text](target): relative targets only; a URL or an in-page anchor is not a file of this repository.
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(page.read_text(encoding="utf-8")) if not re.match(r"[a-z]+:", t)]


def test_readme_is_short():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines < README_MAX_LINES, f"README.md has {lines} lines; reference belongs in docs/"


def test_readme_links_docs_pages():
    assert any(t.startswith("docs/") for t in relative_links(ROOT / "README.md"))


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_relative_links_resolve(page):
    missing = [t for t in relative_links(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


def test_link_pattern_finds_targets():
    # The check above passes vacuously if the pattern finds nothing; it must find plain and anchored links.
    assert LINK.findall("[a](docs/x.md) [b](y.md#sec) [c](https://e.org)") == ["docs/x.md", "y.md", "https://e.org"]
