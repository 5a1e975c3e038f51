"""The documentation reads as a description of the product now, in pages of a readable size.

README.md stays short, no page of the site is a record of how the product came to be (no
numbered steps of past work, no commit hashes), and pages that describe one behaviour agree.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamapp.settings import BY_NAME
from tests.paths import DOCS, REPO_ROOT

README_LIMIT = 12_000
PAGE_LIMIT = 40_000
#: Where the product is described: its docs, its code and its tests.
SOURCES = ["README.md", "docs", "streamapp", "assignor", "tables", "standby", "examples", "tests"]
#: Words of past work: numbered stops and issues, the names of the branches of helpers,
#: which mean nothing to a reader. Upstream references ("faust-streaming/faust #385") pass.
PROCESS_WORDS = re.compile(
    r"\bstop [0-9]+|\bissue [0-9]+\b|\bh[0-9]{2,3}\b|" + "helper" + " branch", re.I
)
#: Numbered fixes of the runtime, which docs and code name by what they do instead.
NUMBERED_FIX = re.compile(r"\bfix(es)? [0-9]+", re.I)
#: A commit hash: 7 to 40 hex digits with at least one letter and one digit.
COMMIT_HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
#: Top-level files a user or contributor looks for.
PROJECT_FILES = ["LICENSE", "CHANGELOG.md", "CONTRIBUTING.md"]


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def text_files() -> list[Path]:
    found = []
    for name in SOURCES:
        path = REPO_ROOT / name
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        found += [
            p
            for p in candidates
            if p.is_file()
            and "__pycache__" not in p.parts
            and p.suffix in (".md", ".py", ".html", ".json", ".txt", "")
        ]
    return found


def test_the_readme_is_short() -> None:
    size = len((REPO_ROOT / "README.md").read_text())
    assert size < README_LIMIT, f"README.md has {size} characters"


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_each_page_has_a_readable_size(page: Path) -> None:
    assert len(page.read_text()) <= PAGE_LIMIT


def test_no_words_of_past_work_in_docs_code_or_tests() -> None:
    hits = [
        f"{path.relative_to(REPO_ROOT)}:{n}: {line.strip()[:100]}"
        for path in text_files()
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if PROCESS_WORDS.search(line) or NUMBERED_FIX.search(line)
    ]
    assert not hits, "\n".join(hits)


@pytest.mark.parametrize(
    "page",
    [*pages(), *(REPO_ROOT / name for name in ("README.md", "CHANGELOG.md", "CONTRIBUTING.md"))],
    ids=lambda p: p.name,
)
def test_no_page_names_a_commit_or_a_numbered_fix(page: Path) -> None:
    text = page.read_text()
    assert not COMMIT_HASH.findall(text)
    assert not NUMBERED_FIX.findall(text)


def test_the_patterns_find_what_they_are_for() -> None:
    # Built from parts, so that this file is not a hit of the check above.
    assert PROCESS_WORDS.search("measured in Stop " + "21's runs")
    assert PROCESS_WORDS.search("lost updates (issue " + "11)")
    assert not PROCESS_WORDS.search("faust-streaming/faust #385")
    assert COMMIT_HASH.search("at main 7e2b7d1 with this benchmark")
    assert not COMMIT_HASH.search("partition 1234567 of 20240501")
    assert NUMBERED_FIX.search("transport fix " + "25, amended")


@pytest.mark.parametrize("name", PROJECT_FILES)
def test_the_files_every_project_has_exist(name: str) -> None:
    assert (REPO_ROOT / name).read_text().strip()


def test_the_license_is_the_one_the_package_declares() -> None:
    assert 'license = "Apache-2.0"' in (REPO_ROOT / "pyproject.toml").read_text()
    text = (REPO_ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_changelog_keeps_a_changelog() -> None:
    text = (REPO_ROOT / "CHANGELOG.md").read_text()
    assert "https://keepachangelog.com/" in text
    assert re.search(r"^## \[Unreleased\]$", text, re.M)
    assert re.search(r"^### Added$", text, re.M)


def test_the_pages_agree_on_where_standbys_go() -> None:
    """Another rack first, else another host: the rule of assignor/standby_placement.py."""
    settings_row = next(
        line
        for line in (DOCS / "settings.md").read_text().splitlines()
        if line.startswith("| `rack`")
    )
    assert "another rack than its task's other copies when one is free, else to another host" in (
        settings_row
    )
    concepts = " ".join((DOCS / "concepts.md").read_text().split())
    assert (
        "They go to another rack than the task's other copies when one is free, else to another "
        "host" in concepts
    )
    assert "another rack first" in BY_NAME["rack"].help


def test_the_views_say_which_generation_they_show() -> None:
    operations = (DOCS / "operations.md").read_text()
    assert "### Which generation" in operations
    assert (
        "| the group page `/streamapp/` (heading, each worker, the rebalance history) | Kafka's |"
        in operations
    )
    assert "| `streamapp group` (`plan generation N` in its first line" in operations
