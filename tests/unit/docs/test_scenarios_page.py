"""docs/scenarios.md shows what `streamapp plan --format table` prints for its examples."""

from __future__ import annotations

import io
import re

import pytest

from assignor.cli import main as plan_main
from tests.paths import DOCS, REPO_ROOT

PAGE = DOCS / "scenarios.md"
#: A ```sh block running `streamapp plan ... --format table` (a file, or stdin from a heredoc),
#: then the ```text block of what it prints.
EXAMPLE = re.compile(
    r"```sh\nstreamapp plan (?P<file>\S+) --format table(?: <<'EOF'\n(?P<stdin>.*?)\nEOF)?\n```"
    r"\n\n```text\n(?P<output>.*?)```",
    re.S,
)


def examples() -> list[tuple[str, str | None, str]]:
    return [(m["file"], m["stdin"], m["output"]) for m in EXAMPLE.finditer(PAGE.read_text())]


def test_the_page_has_its_examples() -> None:
    files = [file for file, _, _ in examples()]
    assert files.count("-") == 1
    assert len(files) == 4


@pytest.mark.parametrize(("file", "stdin", "output"), examples())
def test_each_table_is_what_the_command_prints(
    file: str,
    stdin: str | None,
    output: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    else:
        file = str(REPO_ROOT / file)
    assert plan_main(["plan", file, "--format", "table"], prog="streamapp") == 0
    assert capsys.readouterr().out == output
