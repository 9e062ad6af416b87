"""Crash-safe checkpoints: SIGKILL at random points never leaves a checkpoint that loads wrong."""
from __future__ import annotations

import os
import signal
import multiprocessing
import time

import numpy as np
import pytest
import torch

from torchfrag.runtime.checkpoint import (
    CheckpointError,
    find_latest_checkpoint,
    load_checkpoint,
    load_for_resume,
    remove_partial_writes,
    save_checkpoint,
)

def _writer(folder: str, report_fd: int) -> None:
    """Writes checkpoints forever; reports each completed iteration on a pipe."""
    i = 0
    while True:
        i += 1
        # Every tensor holds the iteration number: a mixed-up file cannot pass.
        state = {"iteration": i, "weights": torch.full((256, 1024), float(i)),
                 "optim": {"step": torch.tensor(i)}}
        save_checkpoint(state, os.path.join(folder, f"ckpt-{i % 3}.pt"))
        save_checkpoint(state, os.path.join(folder, "latest.pt"))
        os.write(report_fd, f"{i}\n".encode())


def _consistent(state: dict) -> bool:
    i = state["iteration"]
    return bool((state["weights"] == float(i)).all()) and int(state["optim"]["step"]) == i


def test_sigkill_at_random_points(tmp_path) -> None:
    rng = np.random.default_rng(0)
    trials, outcomes = 40, {"none": 0, "resumed": 0}
    ctx = multiprocessing.get_context("fork")  # a forked writer starts in milliseconds
    for trial in range(trials):
        folder = tmp_path / f"trial{trial}"
        folder.mkdir()
        read_fd, write_fd = os.pipe()
        proc = ctx.Process(target=_writer, args=(str(folder), write_fd), daemon=True)
        proc.start()
        os.close(write_fd)
        time.sleep(float(rng.uniform(0.0, 0.3)))
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=30)
        with os.fdopen(read_fd) as reports:
            written = [int(x) for x in reports.read().split()]
        last_reported = max(written, default=0)
        # Every file under a final name either verifies with consistent content or is refused.
        for name in os.listdir(folder):
            path = os.path.join(folder, name)
            try:
                state = load_checkpoint(path)
            except CheckpointError:
                # Only a temp file of an interrupted write may be unusable.
                assert name.startswith(".tmp-"), path
                continue
            assert _consistent(state), path
        found = find_latest_checkpoint(str(folder))
        if found is None:
            outcomes["none"] += 1
            assert last_reported == 0
        else:
            outcomes["resumed"] += 1
            _, state = found
            assert _consistent(state)
            assert state["iteration"] >= last_reported  # nothing reported is lost
    assert outcomes["resumed"] >= 1
    print(f"SIGKILL trials: {trials}, outcomes: {outcomes}")


def test_corruption_and_truncation_are_refused(tmp_path) -> None:
    path = str(tmp_path / "c.pt")
    save_checkpoint({"iteration": 3, "w": torch.arange(1000.0)}, path)
    data = open(path, "rb").read()
    (tmp_path / "trunc.pt").write_bytes(data[:-10])
    with pytest.raises(CheckpointError, match="truncated"):
        load_checkpoint(str(tmp_path / "trunc.pt"))
    flipped = bytearray(data)
    flipped[-100] ^= 0xFF
    (tmp_path / "flip.pt").write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match="corrupted"):
        load_checkpoint(str(tmp_path / "flip.pt"))
    (tmp_path / "foreign.pt").write_bytes(b"not a checkpoint\n")
    with pytest.raises(CheckpointError, match="bad header"):
        load_checkpoint(str(tmp_path / "foreign.pt"))
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(str(tmp_path / "missing.pt"))
    # The newest *good* file wins over newer broken ones.
    os.utime(path, (time.time() - 100, time.time() - 100))
    found_path, state = find_latest_checkpoint(str(tmp_path))
    assert found_path == path and state["iteration"] == 3


def test_resume_from_folder_uses_newest_good_checkpoint(tmp_path) -> None:
    from torchfrag.runtime.checkpoint import load_for_resume

    ckpts = tmp_path / "checkpoints"
    with pytest.raises(CheckpointError, match="no usable checkpoint"):
        ckpts.mkdir() or load_for_resume(str(tmp_path))
    save_checkpoint({"iteration": 1}, str(ckpts / "iter_000001.pt"))
    save_checkpoint({"iteration": 2}, str(ckpts / "iter_000002.pt"))
    newest = ckpts / "iter_000003.pt"
    newest.write_bytes(b"TORCHFRAG-CKPT 1 sha256=00 size=5\nxx")  # a torn write
    os.utime(newest, (time.time() + 5, time.time() + 5))
    path, state = load_for_resume(str(tmp_path))
    assert state["iteration"] == 2 and path.endswith("iter_000002.pt")
    with pytest.raises(CheckpointError, match="truncated"):
        load_for_resume(str(newest))


def test_partial_files_of_killed_writes_are_removed_on_next_start(tmp_path) -> None:
    ctx = multiprocessing.get_context("fork")
    read_fd, write_fd = os.pipe()
    proc = ctx.Process(target=_writer, args=(str(tmp_path), write_fd), daemon=True)
    proc.start()
    os.close(write_fd)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # kill it while a write is in progress
        if any(n.startswith(".tmp-") for n in os.listdir(tmp_path)) and os.path.exists(tmp_path / "latest.pt"):
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.001)
    proc.join(timeout=30)
    os.close(read_fd)
    partial = [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]
    assert partial and all(f"-{proc.pid}-" in n for n in partial), partial
    # A write in progress of a live process (this one) is left alone.
    live = tmp_path / f".tmp-latest.pt-{os.getpid()}-abcd"
    live.write_bytes(b"in progress")
    path, state = load_for_resume(str(tmp_path))
    assert _consistent(state)
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith(".tmp-")) == [live.name]
    # The same holds when resume names the file, and for an older torchfrag's name (no pid).
    old = tmp_path / ".tmp-latest.pt-x8k2"
    old.write_bytes(b"partial")
    load_for_resume(path)
    assert not old.exists() and live.exists()
    assert remove_partial_writes(str(tmp_path / "absent")) == []
