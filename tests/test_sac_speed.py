"""SAC's faster pieces keep TorchRL's maths, and the SAC peers of benchmarks/time_to_solve.py behave.

* :class:`~torchfrag.algos.sac.ForeachSoftUpdate` against TorchRL's ``SoftUpdate``,
  also after a checkpoint is loaded into the loss;
* one SAC iteration leaves ``target = lerp(target_before, online_after, tau)``;
* the CleanRL-style actor's log-probability against ``torch.distributions``'
  tanh-and-affine transformed Normal;
* both peers train a few hundred frames and print what ``RunWatch`` follows.
"""
from __future__ import annotations

import copy
import math
import re

import numpy as np
import pytest
import torch
from torchrl.objectives import SACLoss, SoftUpdate

from benchmarks.sac_peers import (
    SACPeerConfig,
    _SquashedGaussian,
    run_cleanrl_style,
    run_torchrl_style,
)
from benchmarks.time_to_solve import summarize
from torchfrag.algos.envs import make_env
from torchfrag.algos.sac import ForeachSoftUpdate, make_sac, make_sac_networks
from torchfrag.graph import capture
from torchfrag.runtime import run


def _targets(loss: SACLoss) -> dict:
    return dict(loss.target_qvalue_network_params.flatten_keys().items())


def test_foreach_soft_update_matches_torchrl_soft_update() -> None:
    env = make_env("Pendulum-v1", 1)
    try:
        torch.manual_seed(0)
        actor, qnet = make_sac_networks(env, [8, 8])
        spec = env.action_spec_unbatched
        ref, ours = (SACLoss(copy.deepcopy(actor), copy.deepcopy(qnet), num_qvalue_nets=2, delay_qvalue=True,
                             action_spec=spec) for _ in range(2))
        ours.load_state_dict(ref.state_dict())
        updaters = [SoftUpdate(ref, tau=0.1), ForeachSoftUpdate(ours, tau=0.1)]
        for k in range(3):
            for loss in (ref, ours):
                gen = torch.Generator().manual_seed(k)
                with torch.no_grad():
                    for p in loss.qvalue_network_params.values(True, True):
                        p.add_(torch.randn(p.shape, generator=gen))
            for upd in updaters:
                upd.step()
        a, b = _targets(ref), _targets(ours)
        assert a.keys() == b.keys() and len(a) == 6  # 3 layers x (weight, bias), twin nets stacked
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert not torch.equal(a["module.0.weight"], ref.qvalue_network_params.flatten_keys()["module.0.weight"])
        # a checkpoint loaded into the loss copies into the tensors the update holds: it keeps working
        ours.load_state_dict(ref.state_dict())
        for upd in updaters:
            upd.step()
        a, b = _targets(ref), _targets(ours)
        assert all(torch.equal(a[k], b[k]) for k in a)
    finally:
        env.close()


def test_foreach_soft_update_needs_init() -> None:
    env = make_env("Pendulum-v1", 1)
    try:
        actor, qnet = make_sac_networks(env, [8])
        loss = SACLoss(actor, qnet, num_qvalue_nets=2, delay_qvalue=True, action_spec=env.action_spec_unbatched)
        upd = ForeachSoftUpdate(loss, tau=0.5)
        upd.initialized = False
        with pytest.raises(RuntimeError, match="initialized"):
            upd.step()
    finally:
        env.close()


def test_sac_iteration_moves_targets_by_tau_towards_the_trained_critics() -> None:
    tau = 0.25
    loop = make_sac("Pendulum-v1", {"num_envs": 2, "steps": 2, "updates": 1, "batch_size": 8,
                                    "learning_starts": 16, "hidden": [16], "tau": tau}, seed=0)
    try:
        assert isinstance(loop.learn.optimizer, torch.optim.Adam) and loop.learn.optimizer.defaults["fused"]
        before = {k: v.clone() for k, v in _targets(loop.loss).items()}
        run(capture(loop), iterations=1)
        online = dict(loop.loss.qvalue_network_params.flatten_keys().items())
        after = _targets(loop.loss)
        for k, v in after.items():
            torch.testing.assert_close(v, torch.lerp(before[k], online[k].detach(), tau))
            assert not torch.equal(v, before[k])
    finally:
        loop.close()


def test_cleanrl_style_log_prob_is_the_squashed_gaussian_density() -> None:
    from torch.distributions import (
        AffineTransform,
        Independent,
        Normal,
        TanhTransform,
        TransformedDistribution,
    )

    torch.manual_seed(0)
    low, high = np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32)
    actor = _SquashedGaussian(3, 2, 16, low, high)
    obs = torch.randn(64, 3)
    torch.manual_seed(1)
    action, logp = actor(obs)
    h = actor.body(obs)
    log_std = -5.0 + 3.5 * (torch.tanh(actor.log_std(h)) + 1.0)
    dist = TransformedDistribution(Independent(Normal(actor.mean(h), log_std.exp()), 1),
                                   [TanhTransform(), AffineTransform(actor.bias, actor.scale)])
    assert ((action >= torch.tensor(low)) & (action <= torch.tensor(high))).all()
    # rows away from the box's edges (atanh is exact there; CleanRL's 1e-6 inside the log is negligible)
    y = (action - actor.bias) / actor.scale
    inner = (y.abs() < 0.99).all(-1)
    assert inner.sum() > 16
    torch.testing.assert_close(logp.squeeze(-1)[inner], dist.log_prob(action)[inner], atol=1e-3, rtol=1e-4)
    assert math.isfinite(float(logp.sum()))


@pytest.mark.parametrize("style", ["cleanrl", "torchrl"])
def test_sac_peers_train_and_report_episodes(style: str, capsys) -> None:
    cfg = SACPeerConfig(env_id="Pendulum-v1", total_frames=600, learning_starts=200, seed=0)
    if style == "cleanrl":
        run_cleanrl_style(cfg)
    else:
        run_torchrl_style(cfg, frames_per_batch=200)
    out = capsys.readouterr().out
    steps = [int(m) for m in re.findall(r"global_step=(\d+), episodes=\d+, episodic_return=[-0-9.e]+", out)]
    assert steps and steps[-1] == 600 and len(steps) == 3  # Pendulum's episodes end every 200 frames
    fps = re.search(r"learn_fps=([0-9.e+]+)", out)
    assert fps and float(fps.group(1)) > 0


def test_summary_shows_learning_frames_per_second_ratio() -> None:
    def rec(fps: float) -> dict:
        return {"seconds_to_target": None, "wall_seconds": 30.0, "fps": fps, "learn_fps": fps, "curve": []}

    result = {"records": {"speed": {"torchfrag": [rec(100.0), rec(120.0)], "cleanrl": [rec(50.0), rec(70.0)]}}}
    rows, _ = summarize(result)
    assert rows[0][5] == "110" and rows[1][5] == "60"
    assert rows[1][-1].startswith("0.55x")  # time per learning frame: 1/110 over 1/60


def test_parallel_mode_pins_each_system_to_its_own_cpus() -> None:
    import os
    import subprocess
    import sys

    from benchmarks.time_to_solve import TASKS, pinned, sac_task, split_cpus

    assert split_cpus(3, range(16)) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14]]
    assert split_cpus(3, [4, 7]) == [[4, 7], [4, 7], [4, 7]]  # shared equally, not 2:1
    with pytest.raises(ValueError, match="need n >= 1"):
        split_cpus(0, [0])
    mine = sorted(os.sched_getaffinity(0))
    out = subprocess.run(pinned([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                                [mine[-1]]), capture_output=True, text=True, check=True).stdout
    assert out.strip() == str([mine[-1]])
    task = sac_task("HalfCheetah-v5", 3000, device="cuda")
    assert "algo.device=cuda" in task.torchfrag and task.sac_peers_args[-2:] == ["--device", "cuda"]
    assert "sac-halfcheetah" in TASKS  # the registered tasks are untouched


def test_sac_device_is_checked_before_anything_is_built() -> None:
    from torchfrag.algos.sac import SACConfig

    with pytest.raises(ValueError, match="algo.device must be a torch device such as 'cpu' or 'cuda:0', got 'gpu0'"):
        make_sac("Pendulum-v1", {"device": "gpu0"})
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="algo.device='cuda': CUDA is not available"):
            SACConfig(device="cuda").validate()


def test_sac_moves_its_sample_to_the_device_by_a_fragment_on_every_device() -> None:
    """``algo.device=cuda`` once failed to capture on a GPU (``sample.to(device)`` written in the
    loop only when the device was not the CPU): the move is now a ToDevice fragment that the CPU
    loop captures and runs too, so this test runs the GPU's graph."""
    loop = make_sac("Pendulum-v1", {"num_envs": 2, "steps": 2, "updates": 1, "batch_size": 8,
                                    "learning_starts": 16, "hidden": [16]}, seed=0)
    try:
        graph = capture(loop)
        assert "to_device" in [n.name for n in graph.nodes]
        run(graph, iterations=1)
    finally:
        loop.close()


def test_sac_update_benchmark_splits_a_profiled_step() -> None:
    """``benchmarks/sac_update.py``: the kernel split adds up to the step, and a profiled step of a
    small SAC finds its matrix products and its fused Adam."""
    from benchmarks.sac_update import (
        build,
        cleanrl_side,
        iteration_split,
        kernel_split,
        profile_step,
        timed,
    )

    split = kernel_split({"aten::baddbmm": 2.0, "aten::mm": 1.0, "aten::relu": 1.5, "aten::_fused_adam_": 0.5,
                          "autograd::engine::evaluate_function: MmBackward0": 9.0}, 10.0)
    assert split == {"matmul": 0.3, "adam": 0.05, "other ops": 0.15, "python/dispatch/autograd": 0.5}
    assert kernel_split({"aten::mm": 12.0}, 10.0)["python/dispatch/autograd"] == 0.0  # never negative
    loop, sample = build(32, "Pendulum-v1", hidden=(16, 16), learning_starts=64)
    try:
        threads = torch.get_num_threads()
        assert timed(loop.learn, sample, steps=2, threads=threads + 1) > 0
        assert torch.get_num_threads() == threads
        prof = profile_step(loop.learn, sample, steps=2)
        assert prof["split"]["matmul"] > 0 and prof["split"]["adam"] > 0
        assert sum(prof["split"].values()) == pytest.approx(1.0, abs=0.01)
        assert profile_step(loop.learn, sample, steps=1, threads=2)["step_ms"] > 0
        assert torch.get_num_threads() == threads
        assert cleanrl_side(loop, sample)(2) > 0  # CleanRL's step on the same sample
        frames = len(loop.buffer)
        parts = iteration_split(loop, iterations=3)
        assert list(parts) == ["rollout", "write", "sample", "to_device", "learn", "target"]
        assert all(v >= 0 for v in parts.values()) and len(loop.buffer) == frames + 5  # 2 warm-up + 3
    finally:
        loop.close()


def test_critic_lr_steps_critics_and_temperature_at_their_own_rate() -> None:
    """critic_lr (CleanRL's q_lr) drives the critics and the temperature; lr the actor only.

    With critic_lr equal to lr the run is the single-rate one, parameter for parameter; a
    larger critic_lr moves the critics' first Adam step (|step| ~ lr for Adam's first step)
    by that factor and leaves the actor's unchanged.
    """
    def first_step(critic_lr: float | None) -> dict[str, torch.Tensor]:
        loop = make_sac("Pendulum-v1", {"hidden": [16], "num_envs": 2, "steps": 4, "updates": 1,
                                        "batch_size": 8, "learning_starts": 16, "lr": 3e-4,
                                        "critic_lr": critic_lr}, seed=3)
        before = {n: p.detach().clone() for n, p in loop.loss.named_parameters()}
        run(capture(loop), "local", iterations=1)
        moved = {n: (p.detach() - before[n]).abs().max() for n, p in loop.loss.named_parameters()}
        loop.close()
        return moved

    same, none, fast = first_step(3e-4), first_step(None), first_step(3e-3)
    assert same.keys() == none.keys() and all(torch.equal(same[k], none[k]) for k in same)
    for name in fast:
        ratio = float(fast[name] / same[name]) if same[name] > 0 else 1.0
        if name.startswith("actor_network_params."):
            assert ratio == pytest.approx(1.0, rel=1e-4), name
        else:
            assert ratio == pytest.approx(10.0, rel=0.05), name


def test_sac_frame_benchmark_times_every_piece_of_a_frame() -> None:
    """``benchmarks/sac_frame.py``: every piece of a frame is timed, the loop trains as it runs."""
    from benchmarks.sac_frame import PIECES, build, frame_split

    loop = build("float32", learning_starts=300)
    try:
        before = loop.learn.optimizer.state_dict()["state"]
        split = frame_split(loop, 3)
        assert list(split) == list(PIECES)
        assert all(v > 0 for v in split.values())
        assert loop.rollout.frames == 303 and not before and loop.learn.optimizer.state_dict()["state"]
    finally:
        loop.close()
