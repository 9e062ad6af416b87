"""The ``replay`` executor (Ape-X, policy ``apex``): actors write to a replay worker, the learner samples.

Worker layout: ``worker1`` holds the replay buffer (its loop's ReplayWrite and ReplaySample
fragments, built from the factory like every worker's), ``worker2 ..`` are the actors. Per
iteration each actor runs its rollout (as under ``actors``: the learner's state comes with
the request every ``sync_every`` iterations, produced state goes back as deltas), writes the
batch into the replay worker with a call of its own, and returns only the batch's
``("next", "reward")`` and ``("next", "done")`` to the driver, which counts frames and
episodes. The driver's batch then has every key the write takes, with the right shapes and
dtypes, but the values of those that did not travel are zeros (broadcast views: no memory):
code on the driver between the rollout and the write may select keys and count frames, not
read observations. The driver's write is a passthrough; its sample asks the replay worker.

This module and :mod:`torchfrag.policies.apex` are all a new executor kind needed (plus one
line in :data:`torchfrag.runtime.executor.BUILTIN`).
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase
from torch import nn

from torchfrag.runtime.comm import Passthrough, graph_module_with, nbytes
from torchfrag.runtime.executor import register_executor
from torchfrag.runtime.replicated_rollout import ReplicatedRollout, actor_chain, actor_sizes, setup_actor
from torchfrag.runtime.worker import WORKER, _remote_rollout, _remote_setup, worker_extra

__all__ = ["Replay"]

#: What the driver gets back of an actor's batch (for its frame and episode counts).
_SUMMARY = (("next", "reward"), ("next", "done"))


def _remote_replay_nodes(write: str, sample: str) -> bool:
    """On the replay worker: keeps the write and sample fragments of its loop."""
    graph = WORKER["graph"]
    WORKER["replay"] = (graph.fragment(write), graph.fragment(sample))
    WORKER["replay_lock"] = threading.Lock()
    return True


def _remote_replay_write(batch: TensorDictBase) -> int:
    """On the replay worker: writes an actor's batch; returns the buffer's size."""
    write, _ = WORKER["replay"]
    with WORKER["replay_lock"]:
        write(batch)
        return len(write.buffer)


def _remote_replay_sample() -> TensorDictBase:
    """On the replay worker: one sample for the learner."""
    _, sample = WORKER["replay"]
    with WORKER["replay_lock"]:
        return sample()


def _remote_rollout_to_replay(state: dict[torch.dtype, torch.Tensor] | None, version: int, replay: str,
                              keys: list[Any]) -> tuple[TensorDictBase, int, None, list[list[torch.Tensor]], int]:
    """On an actor: runs its rollout (:func:`~torchfrag.runtime.worker._remote_rollout`), writes the
    batch's ``keys`` into ``replay``; returns the summary, version, produced state and bytes written."""
    from torch.distributed import rpc

    batch, held, _raw, produced = _remote_rollout(state, version)
    data = batch.select(*keys) if keys else batch
    rpc.rpc_sync(replay, _remote_replay_write, args=(data,))
    summary = batch.select(*[k for k in _SUMMARY if k in batch.keys(True)])
    return summary, held, None, produced, nbytes(data)


def replay_view(placement: Any) -> Any:
    """``placement`` with its groups named as this executor reads them.

    The group holding the :class:`~torchfrag.fragments.ReplayWrite` becomes ``replay`` and the
    other worker group (the rollout's) ``actor``, so a user's policy may name its groups freely
    (``{collectors: {size: 4, executor: replay}, buffer: {size: 1, executor: replay}}``).

    Raises:
        PolicyError: Not exactly two worker groups, one holding the replay write and sample.
    """
    from torchfrag.fragments import ReplaySample, ReplayWrite
    from torchfrag.policies.base import Placement, PolicyError
    from torchfrag.policies.groups import DRIVER_GROUP, policy_groups

    policy, graph = placement.policy, placement.graph
    holding = [g for g in placement.groups_holding() if g != DRIVER_GROUP]
    buffer = [g for g in holding
              if {type(graph.fragment(n)) for n in placement.nodes_of(g)} >= {ReplayWrite, ReplaySample}]
    if len(holding) != 2 or len(buffer) != 1:
        raise PolicyError(f"policy {policy.name}: the replay executor runs two worker groups, the actors and "
                          f"one holding a ReplayWrite and a ReplaySample; the groups holding fragments are "
                          f"{holding}, those with both replay fragments {buffer}")
    replay, actor = buffer[0], next(g for g in holding if g != buffer[0])
    if (actor, replay) == ("actor", "replay"):
        return placement
    groups = policy_groups(policy)
    renamed = {actor: "actor", replay: "replay"}
    view = dataclasses.replace(policy, groups={
        renamed[g]: {"size": groups[g].size, "device": groups[g].device, "executor": groups[g].executor}
        for g in (actor, replay)})
    return Placement(view, graph, {n: renamed.get(r, r) for n, r in placement.roles.items()},
                     dict(placement.env_split))


class _SampleStub(nn.Module):
    """The driver's sample: one call to the replay worker."""

    def __init__(self, ex: Replay) -> None:
        super().__init__()
        self.ex = ex

    def forward(self, *args: Any, **kwargs: Any) -> TensorDictBase:
        ex = self.ex
        return ex.calls.wait_one(ex.calls.call(ex.replay_worker, _remote_replay_sample), ex.replay_worker)


@register_executor
class Replay(ReplicatedRollout):
    """``replay``: the rollout on actors that write into a replay worker; the learner samples from it.

    Attributes:
        replay_worker: RPC name of the replay worker.
        replay_bytes: Tensor bytes the actors wrote into the replay worker (never through the driver).
    """

    kind: ClassVar[str] = "replay"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.replay_worker = ""
        self.replay_bytes = 0
        self._keys: list[Any] = []
        self._shapes: dict[Any, tuple[torch.Size, torch.dtype]] = {}

    @classmethod
    def check(cls, graph: Any, placement: Any, factory: Any) -> None:
        from torchfrag.policies.base import PolicyError
        from torchfrag.runtime.comm import envs_of

        placement = replay_view(placement)
        chain = actor_chain(placement)
        actors = placement.workers("actor")
        if placement.option("envs_per_actor") is None and envs_of(graph, factory, chain[0]) < actors:
            raise PolicyError(f"policy {placement.policy.name}: {actors} actors but the loop has only "
                              f"{envs_of(graph, factory, chain[0])} envs")

    @classmethod
    def first_slice(cls, placement: Any, total: int) -> Any:
        from torchfrag.policies.factory import EnvSlice

        placement = replay_view(placement)
        per = placement.option("envs_per_actor")
        n = placement.workers("actor")
        if per is not None:
            return EnvSlice(0, int(per), int(per) * n, 0, 2)
        count = total // n + (1 if total % n else 0)
        return EnvSlice(0, count, total, 0, 2)

    @classmethod
    def crossings(cls, placement: Any) -> list[Any]:
        from torchfrag.policies.explain import replay_crossings

        view = replay_view(placement)
        out = replay_crossings(view)
        names = {f"@{r}[": f"@{placement.roles[view.nodes_of(r)[0]]}[" for r in ("actor", "replay")}

        def named(where: str) -> str:
            for old, new in names.items():
                where = where.replace(old, new)
            return where

        return [dataclasses.replace(c, src=named(c.src), dst=named(c.dst)) for c in out]

    def setup(self, placement: Any, replace: dict[str, nn.Module]) -> Any:
        """Sets the replay worker and the actors up; returns the driver's placed graph module."""
        from torchfrag.fragments import ReplayWrite
        from torchfrag.policies.factory import EnvSlice

        placement = replay_view(placement)
        self.policy = placement.policy  # the same settings, its groups named actor and replay
        graph, calls, policy = self.graph, self.calls, self.policy
        workers = self.cluster.workers
        replay, actors = workers[0], workers[1:]
        held = placement.nodes_of("replay")
        write = next(n for n in held if isinstance(graph.fragment(n), ReplayWrite))
        sample = next(n for n in held if n != write)
        extra = worker_extra(self, placement)
        chain = [n for n in actor_chain(placement) if n not in held]
        sizes = actor_sizes(self, chain[0], len(actors))
        all_envs = sum(sizes)
        offsets = [sum(sizes[:i]) for i in range(len(actors))]
        futs = [calls.call(replay, _remote_setup, self.factory, None, "replay", None, 0,
                           {**extra, "device": policy.device("replay")}, timeout=policy.timeout)]
        futs += [setup_actor(self, w, chain, EnvSlice(o, s, all_envs, i, i + 2), i + 1, extra)
                 for i, (w, o, s) in enumerate(zip(actors, offsets, sizes))]
        self.wait_setup(futs, workers)
        calls.wait([calls.call(replay, _remote_replay_nodes, write, sample)], [replay], count_bytes=False)
        self.replay_worker = replay
        self._keys = list(graph.fragment(write).in_keys)
        from torchfrag.policies.explain import _fake_batch

        # the batch as the actors write it: after their whole chain (keys a per-env fragment adds too)
        fake, _ = _fake_batch(graph, chain, 1)
        self._shapes = {k: (fake.get(k).shape[fake.batch_dims:], fake.get(k).dtype) for k in self._keys
                        if k in fake.keys(True)}
        self.install(chain, actors, all_envs, replace)
        replace[graph.node(write).target] = Passthrough()
        replace[graph.node(sample).target] = _SampleStub(self)
        self.reset_counts()
        return graph_module_with(graph, replace)

    def request(self, worker: str, weights: dict[torch.dtype, torch.Tensor] | None) -> Any:
        fut = self.calls.call(worker, _remote_rollout_to_replay, weights, self.version, self.replay_worker,
                              self._keys)

        def written(answer: Any) -> Any:
            summary, held, raw, produced, sent = answer
            self.replay_bytes += int(sent)
            return summary, held, raw, produced

        return fut.then(lambda f: written(f.wait()))

    def account(self, batch: TensorDictBase, reward: torch.Tensor | None = None) -> None:
        """Counts the frames and episodes; gives the batch the write's other keys as zero views."""
        super().account(batch, reward)
        for key, (shape, dtype) in self._shapes.items():
            if key not in batch.keys(True):
                batch.set(key, torch.zeros((), dtype=dtype).expand(*batch.shape, *shape))

    def report(self, extra: dict[str, Any], done: int) -> None:
        extra["comm"]["replay_bytes"] = self.replay_bytes / max(1, done)
