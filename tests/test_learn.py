"""The Learn fragment: minibatch epochs, torch's LambdaLR annealing, checkpoints that resume the schedule."""
from __future__ import annotations

import io

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from torchfrag.fragments import Learn


class _Recorder(nn.Module):
    """A loss that records which sample indices each minibatch holds."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.in_keys, self.out_keys = ["i"], ["loss_fit"]
        self.seen: list[list[int]] = []

    def forward(self, td):
        self.seen.append(td["i"].tolist())
        return TensorDict(loss_fit=((self.w - td["i"].float().mean()) ** 2).sum())


def _data(n: int) -> TensorDict:
    return TensorDict(i=torch.arange(n), batch_size=[n])


def test_each_epoch_visits_every_sample_once():
    loss = _Recorder()
    learn = Learn(loss, epochs=3, minibatch_size=4)
    learn(_data(12))
    assert len(loss.seen) == 9 and all(len(mb) == 4 for mb in loss.seen)
    for epoch in range(3):
        assert sorted(sum(loss.seen[3 * epoch:3 * epoch + 3], [])) == list(range(12))
    assert loss.seen[:3] != loss.seen[3:6]  # reshuffled per epoch


def test_incomplete_last_minibatch_is_dropped():
    loss = _Recorder()
    Learn(loss, epochs=2, minibatch_size=4)(_data(10))
    assert len(loss.seen) == 4 and all(len(mb) == 4 for mb in loss.seen)
    for epoch in range(2):  # 8 distinct samples of the 10 in each epoch, none twice
        visited = sum(loss.seen[2 * epoch:2 * epoch + 2], [])
        assert len(set(visited)) == 8


def test_num_minibatches():
    loss = _Recorder()
    Learn(loss, epochs=1, num_minibatches=3)(_data(9))
    assert len(loss.seen) == 3 and sorted(sum(loss.seen, [])) == list(range(9))


def test_a_whole_batch_minibatch_is_the_batch_itself():
    """One minibatch of all samples (DQN/SAC: one update per replay sample): no gather, each epoch."""
    loss = _Recorder()
    Learn(loss, epochs=2)(_data(6))
    assert loss.seen == [list(range(6))] * 2


def test_lr_anneals_linearly_to_zero():
    learn = Learn(_Recorder(), lr=0.1, minibatch_size=4, anneal_steps=4)
    lrs = [float(learn(_data(8))["lr"]) for _ in range(6)]
    assert lrs == pytest.approx([0.1, 0.075, 0.05, 0.025, 0.0, 0.0])
    assert float(learn.optimizer.param_groups[0]["lr"]) == 0.0
    constant = Learn(_Recorder(), lr=0.1, minibatch_size=4)
    assert [float(constant(_data(8))["lr"]) for _ in range(3)] == pytest.approx([0.1] * 3)
    with pytest.raises(ValueError, match="anneal_steps.*-1"):
        Learn(_Recorder(), anneal_steps=-1)


def _regression(seed: int = 0):
    torch.manual_seed(seed)
    x = torch.randn(64, 3)
    data = TensorDict(x=x, y=x @ torch.tensor([[1.0], [-2.0], [0.5]]), batch_size=[64])

    class MSE(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(3, 1)
            self.in_keys, self.out_keys = ["x", "y"], ["loss_mse"]

        def forward(self, td):
            return TensorDict(loss_mse=((self.net(td["x"]) - td["y"]) ** 2).mean())

    return MSE(), data


def _resumed_equals_uninterrupted(strip_scheduler: bool) -> None:
    loss, data = _regression()
    learn = Learn(loss, lr=0.05, epochs=2, minibatch_size=16, anneal_steps=6)
    for _ in range(3):
        learn(data)
    # through bytes, as a checkpoint file would (the optimizer's state_dict aliases its live tensors)
    buf = io.BytesIO()
    torch.save({"params": loss.state_dict(), "extra": learn.state_dict_extra()}, buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=False)
    if strip_scheduler:  # a checkpoint written before Learn had a scheduler
        state["extra"] = {k: v for k, v in state["extra"].items() if k != "scheduler"}
    torch.manual_seed(1)
    rest = [learn(data) for _ in range(4)]

    loss2, _ = _regression(seed=5)
    loss2.load_state_dict(state["params"])
    learn2 = Learn(loss2, lr=0.05, epochs=2, minibatch_size=16, anneal_steps=6)
    learn2.load_state_dict_extra(state["extra"])
    assert learn2.calls == 3 and learn2.scheduler.last_epoch == 3
    torch.manual_seed(1)
    rest2 = [learn2(data) for _ in range(4)]
    assert [float(m["lr"]) for m in rest2] == pytest.approx([0.05 * (1 - c / 6) for c in (3, 4, 5, 6)])
    assert [float(m["lr"]) for m in rest2] == [float(m["lr"]) for m in rest]
    for a, b in zip(rest, rest2):
        assert torch.equal(a["loss"], b["loss"])
    for k, v in loss.state_dict().items():
        assert torch.equal(v, loss2.state_dict()[k])


def test_checkpoint_carries_the_scheduler_and_resumes_exactly():
    assert "scheduler" in Learn(_Recorder(), anneal_steps=3).state_dict_extra()
    _resumed_equals_uninterrupted(strip_scheduler=False)


def test_checkpoint_without_scheduler_state_resumes_the_schedule_at_its_call_count():
    _resumed_equals_uninterrupted(strip_scheduler=True)


def test_ppo_loop_resume_continues_the_lr_schedule():
    """The main job's loop: training_state() -> a fresh loop -> the same annealed rates from there on."""
    from torchfrag.algos.ppo import PPOConfig, make_ppo

    cfg = PPOConfig(num_envs=2, steps=16, epochs=1, minibatch_size=16, total_frames=32 * 5)
    loop = make_ppo("CartPole-v1", cfg, seed=0)
    first = [float(loop()["lr"]) for _ in range(2)]
    state = loop.training_state()
    loop.close()
    loop2 = make_ppo("CartPole-v1", cfg, seed=3)
    loop2.load_training_state(state)
    rest = [float(loop2()["lr"]) for _ in range(4)]
    loop2.close()
    assert first + rest == pytest.approx([cfg.lr * (1 - i / 5) for i in range(5)] + [0.0])


def test_anneal_buffers_follow_the_lr_schedule():
    """PPO's clip range annealed as CleanRL/SB3 do (the objective's clip_epsilon buffer)."""
    from torchfrag.algos.ppo import PPOConfig, make_ppo

    cfg = PPOConfig(num_envs=2, steps=16, epochs=1, minibatch_size=16, total_frames=32 * 4, anneal_clip=True)
    loop = make_ppo("CartPole-v1", cfg, seed=0)
    clips = []
    for _ in range(5):
        loop()
        clips.append(float(loop.learn.loss.clip_epsilon))  # the value the call just used
    loop.close()
    assert clips == pytest.approx([0.2, 0.15, 0.1, 0.05, 0.0])
    with pytest.raises(ValueError, match="anneal_lr"):
        PPOConfig(anneal_clip=True, anneal_lr=False)
    with pytest.raises(ValueError, match="no buffer 'nope'"):
        Learn(_Recorder(), anneal_steps=3, anneal_buffers=["nope"])
    with pytest.raises(ValueError, match="anneal_steps"):
        Learn(_Recorder(), anneal_buffers=["w"])


def test_total_norm_equals_torch_get_total_norm_bit_for_bit():
    from torchfrag.fragments.learn import _total_norm

    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(s, generator=g) for s in ((256, 17), (256,), (6, 256), (1,), (2, 256, 256))]
    assert torch.equal(_total_norm(grads), torch.nn.utils.get_total_norm(grads))
    mixed = [grads[0], grads[1].double()]  # two dtypes: torch's own path
    assert torch.equal(_total_norm(mixed), torch.nn.utils.get_total_norm(mixed))
    assert torch.equal(_total_norm([]), torch.nn.utils.get_total_norm([]))


def test_one_minibatch_metrics_are_the_loss_values_themselves():
    """One gradient step per call (SAC, DQN): the reported means are that step's values."""
    from torchfrag.fragments.learn import _MetricSums

    sums = _MetricSums()
    out = {"loss_a": torch.tensor(0.1), "loss_b": torch.tensor(1 / 3), "alpha": torch.tensor(7.0)}
    sums.add(out, torch.tensor(0.1) + torch.tensor(1 / 3), torch.tensor(2.5))
    means = sums.means()
    assert list(means) == ["loss_a", "loss_b", "alpha", "loss", "grad_norm"]
    for k, v in out.items():
        assert torch.equal(means[k], v)
    assert torch.equal(means["grad_norm"], torch.tensor(2.5))
    two = _MetricSums()
    for x in (1.0, 2.0):
        two.add({"loss_a": torch.tensor(x)}, torch.tensor(x), torch.tensor(x))
    assert float(two.means()["loss_a"]) == 1.5
