"""The shared state on the wire (runtime.state_sync): packed per dtype, unpacked into the actor's shapes."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from torchfrag.fragments import Fragment
from torchfrag.runtime.state_sync import pack_state, unpack_state


class _Eps(Fragment):
    """A user fragment with a parameter-free module: an epsilon buffer and a step counter."""

    def __init__(self) -> None:
        net = nn.Linear(3, 2)
        net.register_buffer("eps", torch.tensor(0.5))
        net.register_buffer("steps", torch.tensor(0, dtype=torch.int64))
        net.register_buffer("seen", torch.zeros(2, dtype=torch.bool))
        super().__init__(["observation"], ["action"], reads=net)
        self.net = net

    def forward(self, td):  # pragma: no cover - not run here
        return td


def test_round_trip_reaches_a_second_copy_through_load_shared_state() -> None:
    torch.manual_seed(0)
    driver, actor = _Eps(), _Eps()
    with torch.no_grad():
        driver.net.weight.mul_(3.0)
        driver.net.eps.fill_(0.05)
        driver.net.steps.fill_(1234)
        driver.net.seen[1] = True
    packed = pack_state([driver.shared_state()])
    assert {d for d in packed} == {torch.float32, torch.int64, torch.bool}
    assert all(b.dim() == 1 and b.device.type == "cpu" for b in packed.values())
    (values,) = unpack_state(packed, [actor.shared_state()])
    actor.load_shared_state(values)
    for (k, a), (k2, b) in zip(actor.shared_state().items(), driver.shared_state().items()):
        assert k == k2 and a.dtype == b.dtype and torch.equal(a, b), k


def test_packed_state_is_a_copy_of_the_live_tensors() -> None:
    frag = _Eps()
    packed = pack_state([frag.shared_state()])
    before = packed[torch.float32].clone()
    with torch.no_grad():
        frag.net.weight.add_(1.0)  # the learner steps after the request was built
    assert torch.equal(packed[torch.float32], before)


def test_several_fragments_keep_their_order() -> None:
    a, b = nn.Linear(2, 2), nn.Linear(2, 1)
    groups = [{"w": a.weight, "b": a.bias}, {"w": b.weight, "b": b.bias}]
    out = unpack_state(pack_state(groups), [{k: torch.empty_like(v) for k, v in g.items()} for g in groups])
    for g, o in zip(groups, out):
        assert list(o) == list(g)
        assert all(torch.equal(o[k], g[k].detach()) for k in g)


def test_layouts_that_differ_are_refused_with_a_clear_error() -> None:
    packed = pack_state([{"w": torch.ones(4)}])
    with pytest.raises(ValueError, match="missing from what the driver sent"):
        unpack_state(packed, [{"w": torch.empty(5)}])
    with pytest.raises(ValueError, match="more shared state"):
        unpack_state(packed, [{"w": torch.empty(3)}])
    with pytest.raises(ValueError, match="missing"):
        unpack_state(packed, [{"w": torch.empty(4, dtype=torch.float64)}])
