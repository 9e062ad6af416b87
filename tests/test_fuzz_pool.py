"""Property-based fuzzing of the public pool API (Hypothesis stateful testing).

Random programs of make / reset / step / send / async_reset / recv / close with
random env ids (duplicates, out of range, wrong length), shapes, dtypes and
values (NaN, inf, huge, negative). A model of the pool's accounting predicts
whether each call must fail; a call that should succeed must succeed, one that
should fail must raise one of the documented exceptions, and the pool's
in-flight count must always match the model.

``TORCHFRAG_FUZZ_EXAMPLES`` sets the number of programs (default 150, each up
to 30 calls); the slow test runs ten times as many.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from torchfrag.envs import EnvError, PoolClosedError, make

DOCUMENTED = (ValueError, TypeError, RuntimeError, TimeoutError, PoolClosedError, EnvError)
ENV_IDS = ["CartPole-v1", "Pendulum-v1", "Debug-v0", "MountainCarContinuous-v0", "Acrobot-v1"]
ACTION_KINDS = ["ok", "ok", "ok", "shape", "dtype", "nan", "inf", "range", "huge", "overflow",
                "list"]
CALLS = {"count": 0}


class PoolMachine(RuleBasedStateMachine):
    """Drives one pool and a model of which envs are started and in flight."""

    @initialize(env_id=st.sampled_from(ENV_IDS), n=st.integers(1, 6), data=st.data(),
                autoreset=st.sampled_from(["next_step", "same_step"]))
    def build(self, env_id: str, n: int, data, autoreset: str) -> None:
        bs = data.draw(st.integers(1, n))
        threads = data.draw(st.integers(1, 3))
        self.pool = make(env_id, num_envs=n, batch_size=bs, num_threads=threads,
                         autoreset=autoreset, seed=data.draw(st.integers(0, 2**64 - 1)))
        self.n, self.bs = n, bs
        self.started: set[int] = set()
        self.in_flight: set[int] = set()
        self.closed = False
        self.discrete = hasattr(self.pool.action_space, "n")

    # -- generators ---------------------------------------------------------------
    def _ids(self, data) -> tuple[list[int] | None, bool]:
        """Random env ids and whether they are valid (None means all envs)."""
        if data.draw(st.booleans()):
            return None, True
        ids = data.draw(st.lists(st.integers(-2, self.n + 1), min_size=1, max_size=self.n + 2))
        valid = len(set(ids)) == len(ids) and all(0 <= i < self.n for i in ids)
        return ids, valid

    def _actions(self, data, count: int) -> tuple[object, bool]:
        kind = data.draw(st.sampled_from(ACTION_KINDS))
        space = self.pool.action_space
        if self.discrete:
            a = np.array(data.draw(st.lists(st.integers(0, space.n - 1), min_size=count,
                                            max_size=count)), dtype=np.int64)
            if kind == "shape":
                return np.zeros(count + 1, dtype=np.int64), False
            if kind == "dtype":
                return a.astype(np.float32), False
            if kind == "range":
                a[0] = data.draw(st.sampled_from([-1, space.n, 2**40, -(2**62)]))
                return a, False
            if kind == "list":
                return a.tolist(), True
            return a, True  # nan/inf/huge/overflow do not apply to integers
        shape = (count, *space.shape)
        a = np.asarray(data.draw(st.lists(st.floats(-3, 3), min_size=int(np.prod(shape)),
                                          max_size=int(np.prod(shape))))).reshape(shape)
        if kind == "shape":
            return np.zeros((count, space.shape[0] + 1)), False
        if kind == "dtype":
            return a.astype(np.complex64), False
        if kind == "nan":
            a.flat[0] = np.nan
            return a, False
        if kind == "inf":
            a.flat[0] = -np.inf
            return a, False
        if kind == "huge":
            a.flat[0] = -1e30
            return a, True  # clipped like Gymnasium
        if kind == "overflow":
            a.flat[0] = 1e300  # beyond float32
            return a, False
        if kind == "list":
            return a.tolist(), True
        return a.astype(np.float32), True

    def _call(self, should_fail: bool, fn):
        CALLS["count"] += 1
        if should_fail:
            with pytest.raises(DOCUMENTED):
                fn()
            return None
        return fn()

    # -- rules --------------------------------------------------------------------
    @rule(data=st.data())
    def reset(self, data) -> None:
        ids, valid = self._ids(data)
        fail = self.closed or not valid or bool(self.in_flight)
        out = self._call(fail, lambda: self.pool.reset(ids))
        if out is not None:
            obs, _ = out
            target = range(self.n) if ids is None else ids
            assert obs.shape[0] == len(target)
            self.started |= set(target)

    @rule(data=st.data())
    def step(self, data) -> None:
        ids, valid = self._ids(data)
        count = self.n if ids is None else len(ids)
        actions, ok = self._actions(data, count)
        target = set(range(self.n)) if ids is None else set(ids)
        fail = (self.closed or not valid or not ok or bool(self.in_flight)
                or not target <= self.started)
        out = self._call(fail, lambda: self.pool.step(actions, ids))
        if out is not None:
            obs, reward, terminated, truncated, info = out
            assert obs.shape[0] == count and np.isfinite(reward).all()
            expected = np.arange(self.n) if ids is None else np.asarray(ids)
            np.testing.assert_array_equal(info["env_id"], expected)

    @rule(data=st.data())
    def send(self, data) -> None:
        ids, valid = self._ids(data)
        count = self.n if ids is None else len(ids)
        actions, ok = self._actions(data, count)
        target = set(range(self.n)) if ids is None else set(ids)
        fail = (self.closed or not valid or not ok or bool(target & self.in_flight)
                or not target <= self.started)
        self._call(fail, lambda: self.pool.send(actions, ids))
        if not fail:
            self.in_flight |= target

    @rule(data=st.data())
    def async_reset(self, data) -> None:
        ids, valid = self._ids(data)
        target = set(range(self.n)) if ids is None else set(ids)
        fail = self.closed or not valid or bool(target & self.in_flight)
        self._call(fail, lambda: self.pool.async_reset(ids))
        if not fail:
            self.in_flight |= target
            self.started |= target

    @rule()
    def recv(self) -> None:
        fail = self.closed or len(self.in_flight) < self.bs
        out = self._call(fail, lambda: self.pool.recv(timeout=30.0))
        if out is not None:
            *_, info = out
            got = set(info["env_id"].tolist())
            assert len(got) == self.bs and got <= self.in_flight
            self.in_flight -= got

    @precondition(lambda self: not self.closed)
    @rule()
    def close(self) -> None:
        self.pool.close()
        self.closed = True

    @invariant()
    def accounting_matches(self) -> None:
        if not self.closed:
            assert self.pool.in_flight == len(self.in_flight)

    def teardown(self) -> None:
        self.pool.close()


def _run(examples: int) -> None:
    PoolMachine.TestCase.settings = settings(
        max_examples=examples, stateful_step_count=30, deadline=None,
        suppress_health_check=list(HealthCheck), database=None)
    before = CALLS["count"]
    PoolMachine.TestCase().runTest()
    # Visible with -s / in the CI log: how many API calls were fuzzed.
    print(f"fuzzed {examples} programs, {CALLS['count'] - before} pool API calls")


def test_fuzz_pool_api() -> None:
    _run(int(os.environ.get("TORCHFRAG_FUZZ_EXAMPLES", "150")))


@pytest.mark.slow
def test_fuzz_pool_api_long() -> None:
    _run(10 * int(os.environ.get("TORCHFRAG_FUZZ_EXAMPLES", "150")))
