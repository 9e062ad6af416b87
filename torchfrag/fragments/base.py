"""The :class:`Fragment` base class: a TensorDict-in/TensorDict-out step of a loop."""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey, unravel_key_list
from torch import nn

from torchfrag.fragments.replica_state import per_replica_keys

logger = logging.getLogger(__name__)

__all__ = ["Fragment", "GradientSyncOptimizer", "Wrap", "wrap", "merge_states"]

#: ``reduce(flat_gradient)`` averages a flat gradient tensor over replicas, in place.
GradientReduce = Callable[[torch.Tensor], None]


def _modules(objs: Iterable[Any] | Any | None) -> list[nn.Module]:
    if objs is None:
        return []
    if isinstance(objs, nn.Module):
        return [objs]
    return [o for o in objs if isinstance(o, nn.Module)]


#: Keys read from each TensorDict argument: one list per position, or position/keyword -> keys.
ArgInKeys = Sequence[Sequence[NestedKey]] | Mapping[int | str, Sequence[NestedKey]]


def _per_argument_keys(arg_in_keys: ArgInKeys | None) -> dict[int | str, list[NestedKey]] | None:
    """``arg_in_keys`` as a dict: argument position or keyword -> keys (``None`` stays ``None``)."""
    if arg_in_keys is None:
        return None
    items = arg_in_keys.items() if isinstance(arg_in_keys, Mapping) else enumerate(arg_in_keys)
    out: dict[int | str, list[NestedKey]] = {}
    for slot, keys in items:
        if not isinstance(slot, (int, str)):
            raise TypeError("arg_in_keys: an argument is named by its position (int) or "
                            f"keyword (str), got {slot!r}")
        if isinstance(keys, (str, tuple)):
            raise TypeError(f"arg_in_keys[{slot!r}] must be a list of keys, got {keys!r}")
        out[slot] = unravel_key_list(list(keys))
    return out


def _unique_keys(keys: list[NestedKey]) -> list[NestedKey]:
    """``keys`` without repeats, first occurrence first."""
    return list(dict.fromkeys(keys))


class Fragment(TensorDictModuleBase):
    """A node of a fragmented dataflow graph: TensorDict in, TensorDict out.

    A fragment declares what it reads (``in_keys``), what it writes
    (``out_keys``), whether it has side effects (``impure``: env steps,
    buffer writes, optimizer steps, which dead-code elimination must keep) and
    which parameters it *owns* (updates) or only *reads*. :func:`torchfrag.capture`
    turns shared parameters into weight-sync edges between fragments.

    Subclass it and implement :meth:`forward`, or wrap an existing TensorDict
    module in one line with :func:`wrap`.

    A fragment may take several TensorDicts (``self.merge(td_a, td_b)``, or
    keyword TensorDicts). Capture then draws a data edge from every one of them
    and checks the keys read: per argument when ``arg_in_keys`` says what is read
    from which (each declared key must be supplied by *that* argument), and
    otherwise against their union (each of ``in_keys`` must be supplied by at
    least one argument; keys read but not declared cannot be checked). The
    output of a ``passthrough`` fragment carries the keys of its *first*
    TensorDict argument plus ``out_keys``.

    Args:
        in_keys: Keys read from the input TensorDict(s). With ``arg_in_keys``,
            the keys it declares are added.
        out_keys: Keys written to the output TensorDict.
        impure: Whether calling the fragment has side effects.
        owns: Modules whose parameters this fragment updates.
        reads: Modules whose parameters this fragment reads without updating.
        state: Stateful objects (envs, replay buffers) this fragment uses;
            fragments sharing one get a state edge in the captured graph.
        passthrough: ``True`` when the output carries the input's keys plus
            ``out_keys`` (the TorchRL convention of writing into the input);
            ``False`` when the output is a fresh TensorDict holding only
            ``out_keys`` (metrics, a rollout).
        arg_in_keys: For a fragment taking several TensorDicts, the keys read from
            each: a sequence (one key list per positional TensorDict argument, in
            order) or a mapping from argument position (``int``) or keyword name
            (``str``) to its keys. Stored as :attr:`arg_in_keys` (a dict, or
            ``None`` when undeclared).

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchfrag import Fragment
        >>> class Double(Fragment):
        ...     def __init__(self):
        ...         super().__init__(in_keys=["x"], out_keys=["y"])
        ...     def forward(self, td):
        ...         return td.set("y", td["x"] * 2)
        >>> Double()(TensorDict(x=torch.ones(2), batch_size=[2]))["y"]
        tensor([2., 2.])

        Two TensorDict inputs, each with the keys read from it:

        >>> class Add(Fragment):
        ...     def __init__(self):
        ...         super().__init__(out_keys=["z"], arg_in_keys=[["x"], ["y"]])
        ...     def forward(self, a, b):
        ...         return a.set("z", a["x"] + b["y"])
        >>> Add().in_keys, Add().arg_in_keys
        (['x', 'y'], {0: ['x'], 1: ['y']})
    """

    #: Class-level default for :attr:`impure`; subclasses with side effects set ``True``.
    impure: bool = False
    #: Class-level default for :attr:`passthrough`.
    passthrough: bool = True
    #: What the fragment is, for placement rules: ``"rollout"`` (drives an env over time and
    #: returns a batch: a policy may replicate it on actors, each over a slice of the envs),
    #: ``"env"`` (one env call), ``"act"``, ``"learn"``, or ``None``.
    role: ClassVar[str | None] = None
    #: Computes every env's rows from that env's rows alone, so running it on env slices and
    #: concatenating equals running it on the whole batch (a policy may move it to the actors).
    per_env: bool = False
    #: Python-number attributes (paths from the fragment) that ``forward`` changes and that are
    #: deliberately per process (counters): placement does not report them as unsynced state
    #: (:mod:`torchfrag.policies.python_state`). Other changing state belongs in a buffer.
    local_state: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        in_keys: Sequence[NestedKey] = (),
        out_keys: Sequence[NestedKey] = (),
        *,
        impure: bool | None = None,
        owns: Iterable[nn.Module] | nn.Module | None = None,
        reads: Iterable[nn.Module] | nn.Module | None = None,
        passthrough: bool | None = None,
        state: Iterable[Any] | None = None,
        arg_in_keys: ArgInKeys | None = None,
    ) -> None:
        super().__init__()
        self.arg_in_keys = _per_argument_keys(arg_in_keys)
        declared = [k for keys in (self.arg_in_keys or {}).values() for k in keys]
        self.in_keys = _unique_keys(unravel_key_list(list(in_keys)) + declared)
        self.out_keys = unravel_key_list(list(out_keys))
        if impure is not None:
            self.impure = bool(impure)
        if passthrough is not None:
            self.passthrough = bool(passthrough)
        # Kept outside nn.Module registration on purpose: the fragment may
        # already hold these modules as children, and reads must not make
        # them part of this fragment's state_dict twice.
        self.__dict__["_owned_modules"] = _modules(owns)
        self.__dict__["_read_modules"] = _modules(reads)
        self.__dict__["_state_objects"] = list(state) if state is not None else []

    # torch.fx reads this to decide whether a call_module node has side effects.
    @property
    def _is_impure(self) -> bool:  # noqa: D401 - fx hook
        return self.impure

    def owned_parameters(self) -> list[nn.Parameter]:
        """Parameters this fragment updates (deduplicated, in a stable order)."""
        return _unique_params(self._owned_modules)

    def read_parameters(self) -> list[nn.Parameter]:
        """Parameters this fragment reads, including the ones it owns."""
        return _unique_params(self._owned_modules + self._read_modules)

    def state_objects(self) -> list[Any]:
        """Non-parameter state (envs, buffers) this fragment uses; linked by identity."""
        return list(self._state_objects)

    # -- declarations used by distribution policies ------------------------------------
    def tags(self) -> frozenset[str]:
        """Declared roles placement rules can match: :attr:`role`, ``"per_env"``, ``"impure"``,
        ``"optimizer"`` (it owns an optimizer and supports :meth:`install_gradient_sync`)."""
        out = {t for t in (self.role,) if t}
        if self.role == "rollout":
            out.add("env")
        if self.per_env:
            out.add("per_env")
        if self.impure:
            out.add("impure")
        if self.has_gradient_sync():
            out.add("optimizer")
        return frozenset(out)

    def shared_state(self) -> dict[str, torch.Tensor]:
        """Every tensor a copy of this fragment in another process needs to behave as this one.

        The default is the full ``state_dict`` (parameters *and* buffers: an epsilon, running
        statistics, BatchNorm statistics) of every module the fragment owns or reads, less the
        buffers marked each replica's own (:func:`~torchfrag.fragments.per_replica`), plus
        :meth:`produced_state`. Override (and call ``super()``) to add non-module state.
        The returned tensors are the live ones (no copies): :meth:`load_shared_state`
        writes into them.
        """
        out: dict[str, torch.Tensor] = {}
        for i, m in self.state_modules():
            own = per_replica_keys(m)
            for k, v in m.state_dict(keep_vars=True).items():
                if isinstance(v, torch.Tensor) and k not in own:
                    out[f"m{i}.{k}"] = v
        out.update({f"produced.{k}": v for k, v in self.produced_state().items()})
        return out

    def state_modules(self) -> list[tuple[int, nn.Module]]:
        """The modules whose state :meth:`shared_state` carries, with their index in its keys.

        The modules this fragment owns, then those it reads, each once (``m{index}.`` prefixes
        the module's ``state_dict`` keys in :meth:`shared_state`).
        """
        out: list[tuple[int, nn.Module]] = []
        seen: set[int] = set()
        for i, m in enumerate(self._owned_modules + self._read_modules):
            if id(m) not in seen:
                seen.add(id(m))
                out.append((i, m))
        return out

    def load_shared_state(self, state: dict[str, torch.Tensor]) -> None:
        """Copies a :meth:`shared_state` of this fragment's twin into this one."""
        produced = {k[len("produced."):]: v for k, v in state.items() if k.startswith("produced.")}
        live = {k: v for k, v in self.shared_state().items() if not k.startswith("produced.")}
        missing = sorted(set(state) - set(live) - {f"produced.{k}" for k in produced})
        if missing:
            raise KeyError(f"{type(self).__name__}.load_shared_state: unknown entries {missing[:5]}")
        with torch.no_grad():
            for k, v in state.items():
                if k in live:
                    live[k].copy_(v)
        if produced:
            self.load_produced_state(produced)

    def produced_state(self) -> dict[str, torch.Tensor]:
        """State this fragment itself updates as it runs (running observation statistics).

        A policy that runs replicas of the fragment elsewhere merges their produced state
        back into the owner's copy (:meth:`merge_produced_state`). Default: none.
        """
        return {}

    def load_produced_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restores what :meth:`produced_state` returned (default: copies into the live tensors)."""
        live = self.produced_state()
        with torch.no_grad():
            for k, v in state.items():
                live[k].copy_(v)

    def merge_produced_state(self, base: dict[str, torch.Tensor],
                             replicas: Sequence[dict[str, torch.Tensor]]) -> None:
        """Folds the produced state of replicas that all started from ``base`` into this fragment.

        The default (:func:`merge_states`) averages floating-point entries and adds the
        increments of integer ones (counters); override it for other statistics.
        """
        if replicas:
            self.load_produced_state(merge_states(base, replicas))

    def optimizer_steps(self, frames: int) -> int | None:
        """Optimizer steps one call takes when its loop collects ``frames`` frames an iteration.

        What :func:`~torchfrag.policies.explain` multiplies the gradient all-reduce by; a
        learner that steps several times per call (epochs of minibatches, ``updates``
        gradient steps on a replay sample) says how many. ``None`` (the default): not
        declared, counted as one.
        """
        return None

    def has_gradient_sync(self) -> bool:
        """Whether :meth:`install_gradient_sync` works (the default needs an ``optimizer`` attribute)."""
        return isinstance(getattr(self, "optimizer", None), torch.optim.Optimizer)

    def install_gradient_sync(self, reduce: GradientReduce) -> Callable[[], None]:
        """Makes every optimizer step first average gradients over replicas with ``reduce``.

        Multi-learner policies (``data_parallel``) call it on every fragment whose
        :meth:`has_gradient_sync` is true. The default wraps the ``optimizer`` attribute
        in a :class:`GradientSyncOptimizer`. A fragment that clips gradients before
        stepping by a ``max_grad_norm`` attribute (when not ``None``) has that clip moved
        into the wrapper, so that it applies to the averaged gradient; other fragments
        override this method.

        Returns:
            A function that undoes the installation.
        """
        inner = getattr(self, "optimizer", None)
        if not isinstance(inner, torch.optim.Optimizer):
            raise TypeError(f"{type(self).__name__} has no torch optimizer in .optimizer; override "
                            "has_gradient_sync()/install_gradient_sync() to support gradient sync")
        clips = hasattr(self, "max_grad_norm")
        clip = getattr(self, "max_grad_norm", None)
        self.optimizer = GradientSyncOptimizer(inner, reduce, clip)
        if clips:
            self.max_grad_norm = None

        def undo() -> None:
            self.optimizer = inner
            if clips:
                self.max_grad_norm = clip

        return undo

    def num_outputs(self) -> int:
        """How many values :meth:`forward` returns (1: a TensorDict; n: a tuple)."""
        return 1

    def output_keys(self, available: frozenset[NestedKey] | None) -> list[frozenset[NestedKey] | None]:
        """Key sets of each output given the keys available at the input.

        ``None`` means "unknown" (the check downstream is skipped).
        """
        out = frozenset(self.out_keys)
        if not self.passthrough:
            return [out]
        if available is None:
            return [None]
        return [available | out]

    def describe(self) -> str:
        """One-line description used in graph tables."""
        return type(self).__name__

    def forward(self, tensordict: TensorDictBase) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} must implement forward()")

    def extra_repr(self) -> str:
        return f"in_keys={self.in_keys}, out_keys={self.out_keys}, impure={self.impure}"


def merge_states(base: dict[str, torch.Tensor],
                 replicas: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Merges the states of replicas that all started from ``base``.

    Floating-point entries are averaged (replicas that each see an equal share of the
    envs: the mean of running means is the running mean of the union); integer entries
    (counters) get the sum of every replica's increment; an entry ``base`` lacks starts
    at zero.

    Example:
        >>> import torch
        >>> out = merge_states({"n": torch.tensor(2), "mu": torch.tensor(0.0)},
        ...                    [{"n": torch.tensor(5), "mu": torch.tensor(1.0)},
        ...                     {"n": torch.tensor(4), "mu": torch.tensor(3.0)}])
        >>> int(out["n"]), float(out["mu"])
        (7, 2.0)
    """
    out: dict[str, torch.Tensor] = {}
    for k in replicas[0]:
        vals = [r[k] for r in replicas]
        if vals[0].dtype == torch.bool:
            out[k] = vals[0].clone()
        elif vals[0].is_floating_point() or vals[0].is_complex():
            out[k] = torch.stack(vals).mean(0)
        else:
            b = base.get(k)
            b = torch.zeros_like(vals[0]) if b is None else b
            out[k] = b + sum(v - b for v in vals)
    return out


class GradientSyncOptimizer(torch.optim.Optimizer):
    """An optimizer whose ``step()`` first averages the gradients over replicas.

    Args:
        optimizer: The wrapped optimizer (its param groups and state are shared).
        reduce: Averages a flat gradient in place (``all_reduce`` then divide).
        max_grad_norm: Clip the averaged gradient to this norm before stepping.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, reduce: GradientReduce,
                 max_grad_norm: float | None = None) -> None:
        # No super().__init__: the wrapped optimizer keeps the state and param groups.
        self.optimizer = optimizer
        self.reduce = reduce
        self.max_grad_norm = max_grad_norm
        self.reduced_bytes = 0
        self.reduce_calls = 0

    @property
    def params(self) -> list[nn.Parameter]:
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    @property  # type: ignore[override]
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @property  # type: ignore[override]
    def state(self) -> Any:
        return self.optimizer.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        params = self.params
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        self.reduce(flat)
        i = 0
        for p in params:
            n = p.numel()
            if p.grad is None:
                p.grad = flat[i:i + n].view_as(p).clone()
            else:
                p.grad.copy_(flat[i:i + n].view_as(p))
            i += n
        self.reduced_bytes += flat.numel() * flat.element_size()
        self.reduce_calls += 1
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        return self.optimizer.step(closure)


def _unique_params(mods: list[nn.Module]) -> list[nn.Parameter]:
    seen: set[int] = set()
    out: list[nn.Parameter] = []
    for m in mods:
        for p in m.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


class Wrap(Fragment):
    """Wraps any TensorDict module (TorchRL actor, critic, transform, ...) as a fragment.

    Keys default to the module's ``in_keys``/``out_keys``; its parameters are
    *read*, and *owned* as well when ``owns=True``.

    Args:
        module: A module with ``in_keys``/``out_keys`` taking and returning a TensorDict.
        in_keys: Overrides the module's ``in_keys``.
        out_keys: Overrides the module's ``out_keys``.
        impure: Whether calling the module has side effects.
        no_grad: Run the module under :func:`torch.no_grad`.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchfrag.fragments import wrap
        >>> frag = wrap(TensorDictModule(torch.nn.Linear(3, 1), ["obs"], ["value"]))
        >>> frag.in_keys, frag.out_keys
        (['obs'], ['value'])
        >>> frag(TensorDict(obs=torch.zeros(4, 3), batch_size=[4]))["value"].shape
        torch.Size([4, 1])
    """

    def __init__(
        self,
        module: nn.Module,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        *,
        impure: bool = False,
        owns: bool = False,
        no_grad: bool = False,
    ) -> None:
        if in_keys is None:
            in_keys = getattr(module, "in_keys", None)
        if out_keys is None:
            out_keys = getattr(module, "out_keys", None)
        if in_keys is None or out_keys is None:
            raise TypeError(
                f"cannot infer keys of {type(module).__name__}: pass in_keys= and out_keys="
            )
        super().__init__(
            in_keys,
            out_keys,
            impure=impure,
            owns=module if owns else None,
            reads=module,
        )
        self.module = module
        self.no_grad = no_grad

    def describe(self) -> str:
        return f"Wrap({type(self.module).__name__})"

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.no_grad:
            with torch.no_grad():
                return self.module(tensordict)
        return self.module(tensordict)


def wrap(module: nn.Module, **kwargs: Any) -> Fragment:
    """One-line wrapping of a TensorDict module as a :class:`Fragment`.

    Fragments are returned unchanged; everything else goes through :class:`Wrap`.

    Example:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from torchfrag.fragments import wrap
        >>> type(wrap(TensorDictModule(torch.nn.Identity(), ["a"], ["b"]))).__name__
        'Wrap'
    """
    if isinstance(module, Fragment) and not kwargs:
        return module
    return Wrap(module, **kwargs)
