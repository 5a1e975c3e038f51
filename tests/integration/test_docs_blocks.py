"""Every code block of README.md and docs/getting-started.md runs as written and prints what the
page says it prints, on the session's broker.

The blocks are read from the pages themselves (the getting-started page's include of the
README's app resolved), and each one is claimed by exactly one rule below: a block no rule
claims fails the test, so a new block is either run here or named as one that is not. Not run:

- the ``make demo`` / ``make test`` block (the demo and the whole suite: `make test` runs this
  test, and the demo has tests of its own), and the line the README quotes from the demo;
- the install block of getting-started (``python3 -m venv`` and ``pip install -e .``): it is
  how the environment running this test was made (`make venv` runs the same install);
- ``streamapp kafka start``: the session's broker (tests/integration/conftest.py) stands for it.

Addresses are the pages' own, swapped for the session's: ``127.0.0.1:9092`` becomes the
session broker's bootstrap address and the web ports 6066 and 6067 become free ports.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from streamapp.kafka.probe import free_port
from tests.paths import DOCS, REPO_ROOT

README = REPO_ROOT / "README.md"
GETTING_STARTED = DOCS / "getting-started.md"
PAGE_BROKER = "127.0.0.1:9092"
PAGE_WEB_PORTS = ("6066", "6067")
FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```\n", re.M | re.S)
SNIPPET = re.compile(r'^--8<-- "(?P<file>[^":]+):(?P<section>[\w-]+)"\n', re.M)
#: The `streamapp` console script of the environment running the tests (not on PATH unless the
#: environment is activated).
STREAMAPP = str(Path(sys.executable).parent / "streamapp")
#: How long a worker, a rebalance or a command may take on a busy 2-core machine: generous,
#: since a deadline that passes fails the test, never a figure it asserts.
DEADLINE_S = 180.0
#: The first line of `streamapp group`, as the getting-started page shows it.
GROUP_LINE = (
    r"group clicks-per-user: Stable, protocol streamapp, plan generation \d+, 2 member\(s\)"
)


@dataclass(frozen=True)
class Block:
    page: str
    lang: str
    body: str


def resolved(path: Path) -> str:
    """The page's Markdown with its README sections included, as the site shows it."""

    def include(found: re.Match[str]) -> str:
        text = (REPO_ROOT / found["file"]).read_text()
        start = text.index(f"<!-- --8<-- [start:{found['section']}] -->")
        end = text.index(f"<!-- --8<-- [end:{found['section']}] -->")
        return text[text.index("\n", start) + 1 : end]

    return SNIPPET.sub(include, path.read_text())


def blocks() -> list[Block]:
    return [
        Block(path.name, found["lang"], found["body"])
        for path in (README, GETTING_STARTED)
        for found in FENCE.finditer(resolved(path))
    ]


def commands(block: Block) -> list[str]:
    """The commands of a shell block, one per line, without their comments."""
    lines = [line.split(" #")[0].strip() for line in block.body.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


class Session:
    """The pages' world: a directory holding the app, its workers, and the addresses swapped."""

    def __init__(self, directory: Path, bootstrap: str) -> None:
        self.directory = directory
        self.bootstrap = bootstrap
        self.ports = {page: str(free_port()) for page in PAGE_WEB_PORTS}
        self.workers: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}

    def swap(self, text: str) -> str:
        """The page's addresses swapped for the session's (web ports in URLs)."""
        text = text.replace(PAGE_BROKER, self.bootstrap)
        for page, port in self.ports.items():
            text = text.replace(f":{page}/", f":{port}/")
        return text

    def argv(self, command: str) -> list[str]:
        words = shlex.split(self.swap(command))
        for page, port in self.ports.items():  # `--web-port 6066` as two words
            words = [port if w == page else w for w in words]
        return [STREAMAPP, *words[1:]] if words[0] == "streamapp" else words

    def run(self, command: str) -> str:
        done = subprocess.run(
            self.argv(command),
            cwd=self.directory,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
            check=False,
        )
        assert done.returncode == 0, f"{command!r} exited {done.returncode}:\n{done.stderr}"
        return done.stdout

    def start_worker(self, command: str) -> None:
        if command in self.workers:
            return  # the README and the getting-started page start the same first worker
        log = self.directory / f"worker-{len(self.workers) + 1}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                self.argv(command),
                cwd=self.directory,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.workers[command] = (process, log)

    def logs(self) -> str:
        return "\n".join(log.read_text(errors="replace") for _, log in self.workers.values())

    def web(self, page_port: str, path: str) -> bytes:
        url = f"http://127.0.0.1:{self.ports[page_port]}{path}"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return bytes(answer.read())

    def wait(self, what: str, holds: Callable[[], bool]) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            for command, (process, _) in self.workers.items():
                if process.poll() is not None:
                    raise AssertionError(f"{command!r} exited:\n{self.logs()[-4000:]}")
            try:
                if holds():
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
                pass
            time.sleep(0.5)
        raise AssertionError(f"{what}: not within {DEADLINE_S:.0f} s\n{self.logs()[-4000:]}")

    def stop(self) -> None:
        for process, _ in self.workers.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process, _ in self.workers.values():
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def session(tmp_path: Path, kafka_bootstrap: str) -> Iterator[Session]:
    world = Session(tmp_path, kafka_bootstrap)
    try:
        yield world
    finally:
        world.stop()


def test_every_block_is_claimed_once() -> None:
    """The rules of the test below cover every block of both pages, and nothing else."""
    claimed = [rule for block in blocks() for rule in RULES if rule.claims(block)]
    assert len(claimed) == len(blocks()), [
        (b.page, b.body[:60]) for b in blocks() if sum(r.claims(b) for r in RULES) != 1
    ]


def test_the_blocks_run_and_print_what_the_pages_say(session: Session) -> None:
    done: set[str] = set()
    for block in blocks():
        [rule] = [rule for rule in RULES if rule.claims(block)]
        rule.run(session, block)
        done.add(rule.name)
    # Each page's own steps ran: the app, the topics, both workers, the records, the views.
    assert done >= {"app", "shell", "producer", "migration"}, done
    assert len(session.workers) == 2


# -- the rules ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    name: str
    claims: Callable[[Block], bool]
    run: Callable[[Session, Block], None]


def _not_run(session: Session, block: Block) -> None:
    """See the module's docs for why these blocks are not run."""


def _write_app(session: Session, block: Block) -> None:
    path = session.directory / "myapp.py"
    if path.exists():  # the getting-started page includes the README's app
        assert path.read_text() == block.body
        return
    path.write_text(block.body)


def _migration(session: Session, block: Block) -> None:
    """The README's one-line migration imports what it says."""
    subprocess.run([sys.executable, "-c", block.body], check=True, cwd=session.directory)


def _producer(session: Session, block: Block) -> None:
    """The getting-started page's producer sends four clicks; each is counted once, in one
    worker's log or the other's, as the page says."""
    script = session.directory / "produce.py"
    script.write_text(session.swap(block.body))
    subprocess.run([sys.executable, str(script)], check=True, timeout=DEADLINE_S)
    for line in ("ann has 1 clicks", "ann has 2 clicks", "bob has 1 clicks", "cid has 1 clicks"):
        session.wait(f"a worker log ending in {line!r}", lambda line=line: line in session.logs())
    assert "ann has 3 clicks" not in session.logs()


def _held(session: Session, page_port: str) -> set[int]:
    view = json.loads(session.web(page_port, "/streamapp/assignment"))
    return set(view["active"].get("clicks", []))


def _settled(session: Session) -> bool:
    """Both workers hold the eight partitions of `clicks` between them, four each."""
    if len(session.workers) < 2:
        return True
    first, second = (_held(session, port) for port in PAGE_WEB_PORTS)
    return len(first) == len(second) == 4 and first | second == set(range(8))


def _shell(session: Session, block: Block) -> None:
    for command in commands(block):
        words = shlex.split(command)
        if words[:3] == ["streamapp", "kafka", "start"]:
            continue  # the session's broker stands for it
        if words[:3] == ["streamapp", "topics", "create"]:
            out = session.run(command)
            # Both pages run it: the first run creates, the next finds the topic there.
            assert out.strip() in (
                "created clicks (8 partitions, replication factor 1)",
                "already there: clicks (8 partitions)",
            ), out
            again = session.run(command)
            assert "already there: clicks (8 partitions)" in again, again
        elif words[:2] == ["streamapp", "worker"]:
            session.start_worker(command)
            session.wait("the workers share the partitions", lambda: _settled(session))
        elif words[0] == "curl":
            _curl(session, command)
        elif words[:2] == ["streamapp", "group"]:
            out = session.run(command)
            first = out.splitlines()[0]
            assert re.fullmatch(GROUP_LINE, first), out
        else:
            raise AssertionError(f"{block.page}: no rule runs {command!r}")


def _curl(session: Session, command: str) -> None:
    out = session.run(command)
    if "/streamapp/assignment" in command:
        view = json.loads(out)
        assert {"active", "standby", "warmup"} <= view.keys(), view
        assert view["active"].get("clicks"), view
    elif command.rstrip().endswith("/metrics"):
        assert "streamapp_rebalances_total" in out, out[:2000]
    else:
        raise AssertionError(f"no rule checks {command!r}")


def _expected_output(session: Session, block: Block) -> None:
    """Output a page shows after its command: checked where that command runs (`_shell`)."""
    assert "created clicks (8 partitions, replication factor 1)" in block.body


RULES = [
    Rule("not run", lambda b: "make demo" in b.body or b.body.startswith("demo: "), _not_run),
    Rule("not run", lambda b: "python3 -m venv" in b.body, _not_run),
    Rule("app", lambda b: b.lang == "python" and "@app.agent" in b.body, _write_app),
    Rule(
        "migration",
        lambda b: b.lang == "python" and b.body.startswith("from streamapp import App  #"),
        _migration,
    ),
    Rule("producer", lambda b: b.lang == "python" and "AIOKafkaProducer" in b.body, _producer),
    Rule(
        "shell",
        lambda b: b.lang == "sh" and "make demo" not in b.body and "venv" not in b.body,
        _shell,
    ),
    Rule(
        "output",
        lambda b: b.lang in ("", "text") and b.body.startswith("created "),
        _expected_output,
    ),
]
