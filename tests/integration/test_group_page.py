"""The group page ``GET /streamapp/`` of a live 3-worker group, rendered by headless Chromium.

Chromium (Debian's ``chromium`` package, installed by ``make browser`` before the integration
tests) loads one worker's page, runs its script, and dumps the DOM it drew from
``GET /streamapp/group``: every worker must appear, and every partition of the source topic with
the worker that says, in its own ``/streamapp/assignment``, that it holds it. A screenshot of
the page is saved as build/test-artifacts/group-page.png; its path is printed.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from streamapp.testing.kafka_io import create_topic, produce
from streamapp.testing.worker import WorkerProcess
from tests.integration.apps.page_counter import APP_ID, PARTITIONS
from tests.paths import artifact

from .workers import wait_for_workers

APP = "tests.integration.apps.page_counter:app"
TOPIC = f"{APP_ID}-events"
NAMES = ("worker-1", "worker-2", "worker-3")
#: Virtual time Chromium gives the page's script: several 2 s polls.
VIRTUAL_TIME_MS = 8000


@pytest.fixture(scope="module")
def workers(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, WorkerProcess]]:
    asyncio.run(create_topic(kafka_bootstrap, TOPIC, PARTITIONS))
    asyncio.run(produce(kafka_bootstrap, TOPIC, range(300), lambda seq: f"k{seq % 31}"))
    root = tmp_path_factory.mktemp("page")
    started: dict[str, WorkerProcess] = {}
    try:
        for name in NAMES:
            worker = WorkerProcess(APP, kafka_bootstrap, root / name, "--client-id", name)
            started[name] = worker.start()
        yield started
    finally:
        for worker in started.values():
            worker.stop()


def _actives(workers: dict[str, WorkerProcess]) -> dict[int, str]:
    """Source partition -> the worker whose own view says it holds it (the last one wins)."""
    out: dict[int, str] = {}
    for name, worker in workers.items():
        for p in worker.get_json("/streamapp/assignment")["active"].get(TOPIC, []):
            out[p] = name
    return out


def _settled(workers: dict[str, WorkerProcess]) -> bool:
    """One plan everywhere, each source partition active once, and the page's data complete."""
    views = [w.get_json("/streamapp/assignment") for w in workers.values()]
    held = sorted(p for v in views for p in v["active"].get(TOPIC, []))
    if len({v["plan_generation"] for v in views}) != 1 or held != list(range(PARTITIONS)):
        return False
    if any(v["warmup"] or v["followup_pending"] for v in views):
        return False
    group = workers[NAMES[0]].get_json("/streamapp/group")
    return not group["unreachable"] and {w["client_id"] for w in group["workers"]} == set(NAMES)


class _DomReader(HTMLParser):
    """The workers' cards and the partition rows the page's script drew."""

    def __init__(self) -> None:
        super().__init__()
        self.workers: list[str] = []
        self.partitions: dict[tuple[str, int], str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = a.get("class", "").split()
        if tag == "section" and "worker" in classes:
            self.workers.append(a["data-worker"])
        if tag == "tr" and "partition" in classes:
            self.partitions[(a["data-topic"], int(a["data-partition"]))] = a["data-active"]


def _chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("chromium is missing: `make browser` installs Debian's chromium package")
    return path


def _chromium_run(url: str, profile: Path, *args: str) -> str:
    result = subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={VIRTUAL_TIME_MS}",
            *args,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, f"chromium failed ({result.returncode}):\n{result.stderr}"
    return result.stdout


def test_page_shows_every_worker_and_who_holds_each_partition(
    workers: dict[str, WorkerProcess], tmp_path: Path
) -> None:
    wait_for_workers(workers, "a settled 3-worker group", lambda: _settled(workers), timeout=180)
    url = f"http://127.0.0.1:{workers[NAMES[0]].web_port}/streamapp/"
    # The plan could still change under the page (a follow-up rebalance): read it again until
    # the holders before and after the page was drawn are the same.
    for _attempt in range(5):
        before = _actives(workers)
        dom = _chromium_run(url, tmp_path / "profile", "--dump-dom")
        after = _actives(workers)
        if before == after:
            break
    else:
        pytest.fail(f"the group kept rebalancing while the page was drawn: {before} -> {after}")
    (tmp_path / "page.html").write_text(dom, encoding="utf-8")
    drawn = _DomReader()
    drawn.feed(dom)
    assert sorted(drawn.workers) == sorted(NAMES), dom
    source_rows = {p: holder for (topic, p), holder in drawn.partitions.items() if topic == TOPIC}
    assert source_rows == before, dom

    screenshot = artifact("group-page.png")
    _chromium_run(url, tmp_path / "profile", f"--screenshot={screenshot}", "--window-size=1280,900")
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"group page screenshot: {screenshot}")
