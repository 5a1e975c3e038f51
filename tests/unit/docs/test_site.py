"""The documentation site (mkdocs.yml) shows every page under docs/, and what it includes exists.

`make docs` builds the site with `mkdocs build --strict`, which fails on broken links, anchors
and snippets; these checks need no mkdocs and say which page or section is wrong.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.paths import DOCS, REPO_ROOT

CONFIG = REPO_ROOT / "mkdocs.yml"
#: A nav entry naming a page: `- Title: page.md` or `- page.md`, at any depth.
NAV_PAGE = re.compile(r"^\s+-\s+(?:[^:]+:\s+)?(?P<page>\S+\.md)\s*$")
#: A pymdownx.snippets include of a file's section: --8<-- "FILE:SECTION".
SNIPPET = re.compile(r'^\s*--8<-- "(?P<file>[^":]+)(?::(?P<section>[\w-]+))?"\s*$', re.M)


def nav_pages() -> list[str]:
    lines = CONFIG.read_text().splitlines()
    start = lines.index("nav:")
    pages = []
    for line in lines[start + 1 :]:
        if line and not line.startswith(" "):
            break  # the next top-level key
        found = NAV_PAGE.match(line)
        if found:
            pages.append(found["page"])
    return pages


def docs_pages() -> set[str]:
    return {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}


def test_every_page_under_docs_is_in_the_nav() -> None:
    missing = sorted(docs_pages() - set(nav_pages()))
    assert not missing, f"pages missing from the nav of mkdocs.yml: {missing}"


def test_every_nav_entry_is_a_page_once() -> None:
    pages = nav_pages()
    assert "index.md" in pages
    assert not sorted(set(pages) - docs_pages()), "the nav names pages docs/ does not have"
    assert len(pages) == len(set(pages)), "a page is in the nav twice"


def test_the_site_is_built_from_docs_into_an_ignored_dir() -> None:
    config = CONFIG.read_text()
    assert re.search(r"^docs_dir: docs$", config, re.M)
    assert re.search(r"^site_dir: build/site$", config, re.M)
    assert "build/" in (REPO_ROOT / ".gitignore").read_text().split()


def included_sections() -> list[tuple[Path, str, str | None]]:
    return [
        (page, found["file"], found["section"])
        for page in sorted(DOCS.rglob("*.md"))
        for found in SNIPPET.finditer(page.read_text())
    ]


def test_every_included_file_and_section_exists() -> None:
    included = included_sections()
    assert included, "no page includes anything: the pattern above is stale"
    for page, name, section in included:
        path = REPO_ROOT / name
        assert path.is_file(), f"{page.name} includes {name}, which does not exist"
        if section is None:
            continue
        text = path.read_text()
        for end in ("start", "end"):
            marker = f"<!-- --8<-- [{end}:{section}] -->"
            assert text.count(marker) == 1, f"{page.name}: {name} needs one {marker} line"
