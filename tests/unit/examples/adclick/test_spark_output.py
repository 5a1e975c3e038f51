"""Spark's JVM output goes to a log file: a process started under `output_to` writes there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from examples.adclick.spark.session import output_to

CHILD = (
    "import sys; print('ivy: resolving'); "
    "print('proxy server not well configured', file=sys.stderr)"
)


def test_a_process_started_inside_writes_to_the_log_and_ours_is_given_back(
    tmp_path: Path,
) -> None:
    log = tmp_path / "report" / "spark.log"
    after = tmp_path / "after.txt"
    before_fds = os.fstat(1).st_ino, os.fstat(2).st_ino
    with output_to(log):
        subprocess.run([sys.executable, "-c", CHILD], check=True)
    assert (os.fstat(1).st_ino, os.fstat(2).st_ino) == before_fds
    assert log.read_text().splitlines() == ["ivy: resolving", "proxy server not well configured"]
    # Afterwards a child writes where this process writes again, not to the log.
    with after.open("wb") as out:
        subprocess.run([sys.executable, "-c", CHILD], check=True, stdout=out, stderr=out)
    assert len(log.read_text().splitlines()) == 2


def test_none_changes_nothing(tmp_path: Path) -> None:
    before_fds = os.fstat(1).st_ino, os.fstat(2).st_ino
    with output_to(None):
        assert (os.fstat(1).st_ino, os.fstat(2).st_ino) == before_fds
    assert list(tmp_path.iterdir()) == []
