"""Checkpoint cadence (iterations, frames, seconds), retention (the last few plus the best), the
checkpoint written on Ctrl-C, and a ``total_frames`` the warm-up would use up."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import torchfrag
from torchfrag.runtime import load_checkpoint
from torchfrag.train import compose_config, train
from torchfrag.train_checkpoints import Cadence, Retention

FAST = ["algo.num_envs=4", "algo.steps=64", "algo.epochs=1", "algo.minibatch_size=128",
        "eval_episodes=0", "progress=false", "logger=none", "plot=false"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(torchfrag.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_root, env.get("PYTHONPATH", "")])
    env.pop("HYDRA_FULL_ERROR", None)
    return env


def test_cadence_in_frames_counts_crossed_multiples_and_seconds_since_the_last():
    frames = Cadence(every_frames=1000)
    frames.start(frames=0, now=0.0)
    due = []
    for it, f in enumerate(range(300, 4000, 300), start=1):  # 300 frames an iteration
        if frames.due(it, f, now=float(it)):
            frames.mark(it, f, now=float(it))
            due.append(f)
    assert due == [1200, 2100, 3000]  # the first count at or past each multiple of 1000
    secs = Cadence(every_seconds=10.0)
    secs.start(frames=0, now=100.0)
    assert not secs.due(1, 10, now=109.0) and secs.due(2, 20, now=110.0)
    secs.mark(2, 20, now=110.0)
    assert not secs.due(3, 30, now=119.9)
    assert not Cadence().due(100, 10**9, now=1e9)  # all off


def test_sac_mujoco_defaults_write_no_checkpoint_within_a_2048_frame_run():
    # Issue 27: algo=sac_mujoco wrote a checkpoint every 50 frames (42 files, 123 MB kept for a
    # 2,048-frame run). With the composed defaults only the final one is written, and 3 + best kept.
    cfg = compose_config(["algo=sac_mujoco", "env=HalfCheetah-v5", "algo.total_frames=2048"])
    cadence = Cadence.from_config(cfg)
    cadence.start(frames=0, now=0.0)
    assert not any(cadence.due(iteration=f, frames=f, now=60.0) for f in range(1, 2049))
    assert cfg.checkpoint_keep == 3 and cfg.checkpoint_keep_best


def test_retention_keeps_the_last_few_and_the_best(tmp_path):
    r = Retention(keep=2, keep_best=True)
    scores = [1.0, 50.0, None, 3.0, 4.0, 2.0]
    for i, s in enumerate(scores):
        (tmp_path / f"{i}.pt").write_bytes(b"x")
        r.add(str(tmp_path / f"{i}.pt"), s)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1.pt", "4.pt", "5.pt"]
    assert r.best == str(tmp_path / "1.pt")
    (tmp_path / "5.pt").write_bytes(b"y")  # the same file written again (the final checkpoint)
    assert r.add(str(tmp_path / "5.pt"), 2.0) == []
    plain = Retention(keep=1, keep_best=False)
    for i in range(3):
        (tmp_path / f"p{i}.pt").write_bytes(b"x")
        plain.add(str(tmp_path / f"p{i}.pt"), 100.0 - i)
    assert not (tmp_path / "p0.pt").exists() and (tmp_path / "p2.pt").exists()
    with pytest.raises(ValueError, match="checkpoint_keep must be an integer >= 1, got 0"):
        Retention(keep=0)


def test_a_run_checkpoints_by_frames_and_keeps_the_last_two_and_the_best(tmp_path):
    # 256 frames an iteration, 8 iterations; a checkpoint each 512 frames: iterations 2, 4, 6, 8
    summary = train(compose_config([*FAST, "algo.total_frames=2048", "checkpoint_every_frames=512",
                                    "checkpoint_every_seconds=0", "checkpoint_keep=2", "target_window=3"]),
                    run_dir=str(tmp_path))
    ckpts = tmp_path / "checkpoints"
    latest = load_checkpoint(str(ckpts / "latest.pt"))
    curve = latest["curve"]
    # the mean training return each checkpoint saw: the last 3 iterations' returns up to its frames
    scores = {}
    for it in (2, 4, 6, 8):
        seen = [r for f, r in curve if f <= it * 256][-3:]
        scores[it] = sum(seen) / len(seen) if seen else None
    best = max((it for it in scores if scores[it] is not None), key=lambda it: scores[it])
    kept = {6, 8, best}
    on_disk = sorted(p.name for p in ckpts.iterdir())
    assert on_disk == sorted(["latest.pt", *(f"iter_{it:06d}.pt" for it in kept)]), (on_disk, scores)
    assert summary["checkpoint"] == str(ckpts / "iter_000008.pt")
    for it in kept:
        payload = load_checkpoint(str(ckpts / f"iter_{it:06d}.pt"))
        assert payload["state"]["frames"] == it * 256 and payload["state"]["frames"] % 512 == 0
        assert payload["train_return"] == pytest.approx(scores[it])
    assert [os.path.basename(c["path"]) for c in latest["checkpoints"]] == \
        [f"iter_{it:06d}.pt" for it in sorted(kept)]


def test_ctrl_c_writes_a_checkpoint_before_exiting(tmp_path):
    """No cadence is due before Ctrl-C (the defaults: 100,000 frames, 600 s): the only checkpoint
    is the one Ctrl-C writes, and the one line names it."""
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "torchfrag.train", *FAST[:-2], "logger=csv", "plot=false",
                             "total_frames=100000000", f"hydra.run.dir={run}"],
                            cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    fps = run / "train" / "scalars" / "train" / "fps.csv"
    try:
        deadline = time.monotonic() + 240
        while not (fps.exists() and fps.stat().st_size > 0) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        assert not (run / "checkpoints" / "latest.pt").exists()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = (out + err).strip().splitlines()
    assert proc.returncode == 130, lines[-20:]
    written = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert len(written) == 2 and written[1] == "latest.pt" and written[0].startswith("iter_"), written
    assert lines[-1].endswith(f"resume={run}/checkpoints/{written[0]} continues from its last checkpoint")
    assert sum("interrupted" in line for line in lines) == 1 and not any("Traceback" in x for x in lines)
    payload = load_checkpoint(str(run / "checkpoints" / written[0]))
    assert payload["iteration"] == int(written[0][5:11]) >= 1


@pytest.mark.parametrize("frames", [1000, 600])
def test_total_frames_within_the_warm_up_is_refused_in_one_line(tmp_path, frames):
    # DQN's default warm-up is 1,000 random frames (learning_starts), which count towards total_frames
    with pytest.raises(ValueError, match=f"total_frames={frames} is not more than the 1000 warm-up frames"):
        train(compose_config(["algo=dqn", f"total_frames={frames}", "eval_episodes=0", "logger=none"]),
              run_dir=str(tmp_path))
    assert not (tmp_path / "checkpoints").exists()
    if frames != 1000:
        return  # the command line's one line, once
    proc = subprocess.run([sys.executable, "-m", "torchfrag.train", "algo=dqn", f"total_frames={frames}",
                           f"hydra.run.dir={tmp_path / 'cli'}"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"torchfrag.train: error: total_frames={frames} is not more than the 1000 warm-up frames that count "
        "towards it (algo.learning_starts=1000, TorchRL's init_random_frames); raise total_frames above 1000 "
        "or lower algo.learning_starts"]
    assert not (tmp_path / "cli" / "checkpoints").exists()  # Hydra made the folder; nothing ran
