"""The data dir lock: one holder at a time, named when refused, released by the OS on death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tables.data_dir_lock import LOCK_FILE, DataDirInUse, lock_data_dir
from tests.paths import REPO_ROOT

# Takes the lock, says so, then holds it until killed.
_HOLDER = """
import sys, time
from tables.data_dir_lock import lock_data_dir
lock = lock_data_dir(sys.argv[1])
print("locked", flush=True)
time.sleep(600)
"""

# Holds the flock without writing a pid: a holder caught between taking the lock and
# recording itself.
_SILENT_HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(600)
"""


# Holds the lock and starts a long-lived program that inherits every inheritable fd.
_PARENT_OF_A_LONG_CHILD = """
import subprocess, sys, time
from tables.data_dir_lock import lock_data_dir
lock = lock_data_dir(sys.argv[1])
child = subprocess.Popen(["sleep", "600"], close_fds=False)
print("locked", flush=True)
print(child.pid, flush=True)
time.sleep(600)
"""


def _start(script: str, target: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", script, str(target)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "locked"
    return process


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    process = _start(_HOLDER, tmp_path)
    yield process
    process.kill()
    process.wait()


def test_a_second_process_is_refused_with_the_holders_pid(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    with pytest.raises(DataDirInUse) as refused:
        lock_data_dir(tmp_path)
    assert refused.value.pid == holder.pid
    assert str(refused.value) == (
        f"data dir {tmp_path} is in use by pid {holder.pid} (another worker)"
    )
    # Refusing must not disturb the holder's record.
    assert (tmp_path / LOCK_FILE).read_text().strip() == str(holder.pid)


def test_a_sigkilled_holder_never_blocks_the_restart(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    with pytest.raises(DataDirInUse):
        lock_data_dir(tmp_path)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    # The dead holder's lock file is still there; the kernel dropped its flock.
    assert (tmp_path / LOCK_FILE).exists()
    lock = lock_data_dir(tmp_path)
    try:
        assert lock.held
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    finally:
        lock.release()


def test_release_lets_another_process_in(tmp_path: Path) -> None:
    lock = lock_data_dir(tmp_path)
    probe = [sys.executable, "-c", _HOLDER, str(tmp_path)]
    refused = subprocess.run(probe, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "DataDirInUse" in refused.stderr
    assert f"in use by pid {os.getpid()}" in refused.stderr
    lock.release()
    lock.release()  # idempotent
    assert not lock.held
    taker = _start(_HOLDER, tmp_path)
    try:
        assert (tmp_path / LOCK_FILE).read_text().strip() == str(taker.pid)
    finally:
        taker.kill()
        taker.wait()


def test_a_holder_that_has_not_written_its_pid_yet(tmp_path: Path) -> None:
    silent = _start(_SILENT_HOLDER, tmp_path / LOCK_FILE)
    try:
        with pytest.raises(DataDirInUse) as refused:
            lock_data_dir(tmp_path)
    finally:
        silent.kill()
        silent.wait()
    assert refused.value.pid is None
    assert str(refused.value) == f"data dir {tmp_path} is in use by another worker"


def test_a_child_process_does_not_keep_the_lock_after_its_parent_dies(tmp_path: Path) -> None:
    """A program the worker starts (and that outlives it) must not block the restart."""
    parent = _start(_PARENT_OF_A_LONG_CHILD, tmp_path)
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    try:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        os.kill(child_pid, 0)  # the child still runs, with every fd it could inherit
        lock = lock_data_dir(tmp_path)
        lock.release()
    finally:
        os.kill(child_pid, signal.SIGKILL)


def test_a_missing_directory_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        lock_data_dir(tmp_path / "absent")
