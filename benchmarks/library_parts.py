"""Speed of the library parts that replaced hand-written ones (issue 16, item 7), side by side.

Each row times the hand-written version (the "peer": the code torchfrag shipped
before, as written out in ``tests/test_library_parts.py``) and the library-based
one now in the package, on the same inputs, alternating the two (reversed every
other repeat), medians of the repeats; one thread.

* ``NatureCNN``: forward, and forward + backward, of the Nature-DQN torso on a
  ``[32, 4, 84, 84]`` uint8 batch (TorchRL ``ConvNet`` + ``MLP`` vs the
  hand-written ``nn.Sequential``);
* ``RandomActor``: one call on a 16-env CartPole carry (TorchRL ``RandomPolicy``
  vs ``spec.rand``);
* ``RewardScale``: one call on a ``[16, 128]`` batch (TorchRL ``RewardScaling``
  vs a product);
* ``EpisodeStats``: a 16-env x 128-step CartPole rollout plus episode returns and
  lengths: ``PoolEnv.rollout`` + ``EpisodeStats`` (kept, the "ours" side) vs
  TorchRL's ``RewardSum`` + ``StepCounter`` transforms on the env (the library's);
* ``collector random actions``: the ``PoolCollector``'s ``policy=None`` actions
  for 16 envs: ``_RandomPolicy.sample`` (kept, "ours") vs TorchRL's
  ``RandomPolicy`` on a TensorDict built per call (the library's).

Run: ``python -m benchmarks.library_parts`` (writes
``benchmarks/results/library_parts.{json,png}``).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from collections.abc import Callable

import torch

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import (alternate, bar_plot, fmt_rate, fmt_ratio, median,  # noqa: E402
                                print_table, write_json)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _references():
    """The hand-written versions, from the test that compares them with the library parts."""
    path = os.path.join(ROOT, "tests", "test_library_parts.py")
    spec = importlib.util.spec_from_file_location("_library_parts_refs", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def calls_per_second(fn: Callable[[], object], seconds: float) -> Callable[[], float]:
    def measure() -> float:
        for _ in range(3):
            fn()
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            fn()
            n += 1
        return n / (time.perf_counter() - start)
    return measure


def cases(seconds: float) -> dict[str, tuple[str, str, Callable, Callable]]:
    """Row -> (peer name, ours name, peer measurement, ours measurement)."""
    from tensordict import TensorDict
    from torchrl.envs import Compose, RewardSum, StepCounter, TransformedEnv
    from torchrl.envs.utils import RandomPolicy

    from torchfrag.algos.fragments import RewardScale
    from torchfrag.algos.networks import NatureCNN
    from torchfrag.algos.replay import RandomActor
    from torchfrag.collectors.pool_collector import _RandomPolicy
    from torchfrag.envs import PoolEnv
    from torchfrag.envs._torchrl_compat import new_tensordict
    from torchfrag.fragments import EpisodeStats

    ref = _references()
    out = {}

    old_cnn, new_cnn = ref.HandWrittenNatureCNN(), NatureCNN()
    x = torch.randint(0, 256, (32, 4, 84, 84), dtype=torch.uint8)

    def fwd(net):
        def f():
            with torch.no_grad():
                net(x)
        return f
    out["NatureCNN forward, batch 32"] = ("hand-written", "ConvNet+MLP",
                                          calls_per_second(fwd(old_cnn), seconds),
                                          calls_per_second(fwd(new_cnn), seconds))

    def train(net):
        def f():
            net.zero_grad(set_to_none=True)
            net(x).square().mean().backward()
        return f
    out["NatureCNN forward+backward, batch 32"] = ("hand-written", "ConvNet+MLP",
                                                   calls_per_second(train(old_cnn), seconds),
                                                   calls_per_second(train(new_cnn), seconds))

    env = PoolEnv("CartPole-v1", 16, seed=0, categorical_action_encoding=True)
    carry = env.reset()
    actor = RandomActor(env)
    out["RandomActor call, 16 envs"] = (
        "spec.rand", "RandomPolicy",
        calls_per_second(lambda: ref.hand_written_random_actions(env, carry), seconds),
        calls_per_second(lambda: actor(carry), seconds))

    batch = TensorDict({("next", "reward"): torch.randn(16, 128, 1)}, batch_size=[16, 128])
    frag = RewardScale(0.1)
    out["RewardScale call, [16, 128]"] = (
        "product", "RewardScaling",
        calls_per_second(lambda: ref.hand_written_reward_scale(batch, 0.1), seconds),
        calls_per_second(lambda: frag(batch), seconds))

    stats = EpisodeStats()
    counted = TransformedEnv(PoolEnv("CartPole-v1", 16, seed=0, categorical_action_encoding=True),
                             Compose(RewardSum(), StepCounter()))

    def kept():
        b = env.rollout(128, break_when_any_done=False)
        nxt = b.get("next")
        stats.update(nxt.get("reward"), nxt.get("done"))
        stats.returns, stats.lengths = [], []

    def library():
        counted.rollout(128, break_when_any_done=False)
    # rates in frames (16 x 128 per call)
    frames = 16 * 128
    out["episode stats, rollout 16x128 (frames/s)"] = (
        "RewardSum+StepCounter", "EpisodeStats (kept)",
        lambda: frames * calls_per_second(library, seconds)(),
        lambda: frames * calls_per_second(kept, seconds)())

    spec = env.action_spec_unbatched
    fast = _RandomPolicy(spec)
    lib = RandomPolicy(env.action_spec)
    obs = torch.zeros(16, 4)

    def with_library():
        td = new_tensordict({"observation": obs}, torch.Size([16]))
        return lib(td).get("action")
    out["collector random actions, 16 envs"] = (
        "RandomPolicy + TensorDict", "_RandomPolicy (kept)",
        calls_per_second(with_library, seconds), calls_per_second(lambda: fast.sample(16), seconds))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="per measurement")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows, payload, groups, peer_s, ours_s = [], {}, [], [], []
    for name, (peer_name, ours_name, peer, ours) in cases(args.seconds).items():
        res = alternate({"peer": peer, "ours": ours}, args.repeats)
        p, o = median(res["peer"]), median(res["ours"])
        rows.append([name, peer_name, fmt_rate(p), ours_name, fmt_rate(o), fmt_ratio(o / p)])
        payload[name] = {"peer": peer_name, "ours": ours_name, "peer_rate": p, "ours_rate": o,
                         "ratio": o / p, "peer_all": res["peer"], "ours_all": res["ours"]}
        groups.append(name)
        peer_s.append(p)
        ours_s.append(o)
    print_table(["case", "peer", "peer /s", "ours", "ours /s", "ours/peer"], rows,
                title="Library parts vs the hand-written code they replaced (medians, 1 thread)")
    write_json("library_parts", {"seconds": args.seconds, "repeats": args.repeats,
                                 "results": payload})
    bar_plot("library_parts", groups, {"peer (hand-written / other)": peer_s, "ours": ours_s},
             ylabel="calls (or frames) per second", title="Library parts vs hand-written")


if __name__ == "__main__":
    main()
