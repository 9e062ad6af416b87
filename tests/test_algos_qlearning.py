"""The lean DQN update (torchfrag.algos.qlearning) against TorchRL's DQNLoss and replay storage."""
from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.modules import QValueActor
from torchrl.objectives import DQNLoss

from torchfrag.algos.qlearning import QLearn, TensorReplay


def _batch(n: int, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict({"observation": torch.randn(n, 4, generator=g),
                       "action": torch.randint(0, 3, (n,), generator=g),
                       ("next", "observation"): torch.randn(n, 4, generator=g),
                       ("next", "reward"): torch.randn(n, 1, generator=g),
                       ("next", "done"): torch.rand(n, 1, generator=g) < 0.2,
                       ("next", "terminated"): torch.rand(n, 1, generator=g) < 0.2}, batch_size=[n])


def _net(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


@pytest.mark.parametrize("loss_function", ["l2", "smooth_l1"])
@pytest.mark.parametrize("double_dqn", [False, True])
def test_one_step_matches_torchrl_dqnloss(loss_function: str, double_dqn: bool) -> None:
    """Same net, same batch, same target: the loss, the gradient and the Adam step equal TorchRL's."""
    batch = _batch(32)
    ours = QLearn(_net(), lr=1e-2, updates=1, batch_size=32, gamma=0.9, double_dqn=double_dqn,
                  loss_function=loss_function, max_grad_norm=0.5, target_update_interval=1000)
    with torch.no_grad():  # a target different from the online net, on both sides
        for p in ours.target.parameters():
            p.add_(0.1)
    ref_net = copy.deepcopy(_net())
    actor = QValueActor(ref_net, in_keys=["observation"], action_space="categorical")
    loss = DQNLoss(actor, loss_function=loss_function, delay_value=True, double_dqn=double_dqn,
                   action_space="categorical")
    loss.make_value_estimator(gamma=0.9)
    targets = list(loss.target_value_network_params.values(True, True))
    assert [t.shape for t in targets] == [p.shape for p in ours.target.parameters()]
    with torch.no_grad():
        for t, p in zip(targets, ours.target.parameters()):
            t.copy_(p)
    ref_opt = torch.optim.Adam(loss.parameters(), lr=1e-2, eps=1e-8)
    out = loss(batch.clone())
    ref_opt.zero_grad()
    out["loss"].backward()
    ref_norm = torch.nn.utils.clip_grad_norm_(list(ref_net.parameters()), 0.5)
    ref_opt.step()
    metrics = ours(batch.clone())
    assert float(metrics["loss"]) == pytest.approx(float(out["loss"].detach()), rel=1e-5)
    assert float(metrics["grad_norm"]) == pytest.approx(float(ref_norm), rel=1e-5)
    for a, b in zip(ours.net.parameters(), ref_net.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_target_copies_every_interval_and_soft_update() -> None:
    batch = _batch(64)
    hard = QLearn(_net(), lr=1e-2, updates=4, batch_size=16, target_update_interval=3)
    start = [p.clone() for p in hard.target.parameters()]
    hard(batch)  # steps 1..4: one copy, after step 3
    assert hard.steps == 4
    assert not all(torch.equal(a, b) for a, b in zip(hard.target.parameters(), start))
    assert not all(torch.equal(a, b) for a, b in zip(hard.target.parameters(), hard.net.parameters()))
    hard(batch[:32])  # steps 5, 6 (two minibatches of 16): a copy after step 6
    assert hard.steps == 6
    assert all(torch.equal(a, b) for a, b in zip(hard.target.parameters(), hard.net.parameters()))
    soft = QLearn(_net(), lr=1e-2, updates=1, batch_size=16, tau=0.25)
    before = [p.clone() for p in soft.target.parameters()]
    soft(batch[:16])
    for t, b, o in zip(soft.target.parameters(), before, soft.net.parameters()):
        torch.testing.assert_close(t, b + 0.25 * (o - b))


def test_checkpoint_state_roundtrip() -> None:
    a = QLearn(_net(0), lr=1e-2, updates=2, batch_size=8, target_update_interval=3)
    a(_batch(16))
    b = QLearn(_net(1), lr=1e-2, updates=2, batch_size=8, target_update_interval=3)
    b.net.load_state_dict(a.net.state_dict())
    b.load_state_dict_extra(copy.deepcopy(a.state_dict_extra()))  # as through torch.save
    assert b.steps == 2 and b.calls == 1
    for x, y in zip(a.target.parameters(), b.target.parameters()):
        assert torch.equal(x, y)
    batch = _batch(16, seed=5)
    a(batch)
    b(batch)  # same optimizer state, same counters: the same next step and target copy
    for x, y in zip(list(a.net.parameters()) + list(a.target.parameters()),
                    list(b.net.parameters()) + list(b.target.parameters())):
        torch.testing.assert_close(x, y)


def test_replay_keeps_the_newest_like_torchrl() -> None:
    """After writes that wrap around, the stored transitions are the newest `capacity` ones."""
    ours, ref = TensorReplay(10), ReplayBuffer(storage=LazyTensorStorage(10))
    seen = []
    for k, n in enumerate([4, 5, 7, 3, 12]):
        td = _batch(n, seed=k)
        ours.extend(td)
        ref.extend(td.select(*ours.keys))
        seen.append(td.select(*ours.keys))
    assert len(ours) == len(ref) == 10
    newest = torch.cat(seen)[-10:]
    key = ("next", "observation")
    got = sorted(map(tuple, ours.sample(2000).get(key).tolist()))
    assert set(got) == set(map(tuple, newest.get(key).tolist()))
    assert set(map(tuple, ref[:].get(key).tolist())) == set(map(tuple, newest.get(key).tolist()))


def test_bad_arguments_named() -> None:
    with pytest.raises(ValueError, match="capacity must be a positive integer, got 0"):
        TensorReplay(0)
    with pytest.raises(RuntimeError, match="empty"):
        TensorReplay(4).sample(2)
    with pytest.raises(ValueError, match="loss_function must be one of"):
        QLearn(_net(), lr=1e-3, loss_function="l1")
    with pytest.raises(ValueError, match="tau must be in"):
        QLearn(_net(), lr=1e-3, tau=0.0)
    with pytest.raises(ValueError, match="target_update_interval must be a positive integer"):
        QLearn(_net(), lr=1e-3, target_update_interval=0)
