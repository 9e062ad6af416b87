"""Distribution policies: the same captured loop placed on processes and devices.

=====================  =========================================================
policy                 what runs where
=====================  =========================================================
``local``              everything in one process
``actors``             N actor workers run the rollout; the learner gathers, broadcasts weights
``async_actors``       actors run ahead on stale weights, bounded by ``staleness``
``central_inference``  env steps on N workers; act and learn on the learner
``data_parallel``      every rank runs the loop; gradients all-reduced (gloo)
``multi_learner``      several learners, each with its own actors; gradients all-reduced
``single_device``      everything on one device, networks compiled
``apex``               actors write to a replay worker; the learner samples from it
``actor_pools``        several actor pools, each running one rollout on its own envs
=====================  =========================================================

:func:`torchfrag.runtime.run` executes a graph under a policy;
:func:`explain` shows the placement and what crosses between processes.

Example:
    >>> from torchfrag.policies import as_policy
    >>> as_policy({"name": "actors", "actors": 4}).num_workers
    4
"""
from __future__ import annotations

from torchfrag.policies.base import (
    MAX_WORKERS,
    POLICY_CLASSES,
    ActorsPolicy,
    AsyncActorsPolicy,
    CentralInferencePolicy,
    DataParallelPolicy,
    LocalPolicy,
    MultiLearnerPolicy,
    Placement,
    Policy,
    PolicyError,
    SingleDevicePolicy,
    as_policy,
    load_policy_file,
    register_policy,
)
from torchfrag.policies.actor_pools import ActorPoolsPolicy
from torchfrag.policies.apex import ApexPolicy
from torchfrag.policies.explain import Crossing, crossings, explain
from torchfrag.policies.factory import EnvSlice, LoopFactory, PPOFactory

__all__ = [
    "MAX_WORKERS", "POLICY_CLASSES", "ActorPoolsPolicy", "ActorsPolicy", "ApexPolicy", "AsyncActorsPolicy", "CentralInferencePolicy",
    "Crossing", "DataParallelPolicy", "EnvSlice", "LocalPolicy", "LoopFactory", "MultiLearnerPolicy", "PPOFactory", "Placement",
    "Policy", "PolicyError", "SingleDevicePolicy", "as_policy", "crossings", "explain",
    "load_policy_file", "register_policy", "register_schemas",
]


def register_schemas() -> None:
    """Registers every policy dataclass as a Hydra structured config ``policy/<name>_schema``."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    for name, cls in POLICY_CLASSES.items():
        if name == "local":
            continue
        cs.store(group="policy", name=f"{name}_schema", node=cls)
