"""The :class:`Fragment` base class: a TensorDict-in/TensorDict-out step of a loop."""
from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey, unravel_key_list
from torch import nn

logger = logging.getLogger(__name__)

__all__ = ["Fragment", "Wrap", "wrap"]


def _modules(objs: Iterable[Any] | Any | None) -> list[nn.Module]:
    if objs is None:
        return []
    if isinstance(objs, nn.Module):
        return [objs]
    return [o for o in objs if isinstance(o, nn.Module)]


class Fragment(TensorDictModuleBase):
    """A node of a fragmented dataflow graph: TensorDict in, TensorDict out.

    A fragment declares what it reads (``in_keys``), what it writes
    (``out_keys``), whether it has side effects (``impure``: env steps,
    buffer writes, optimizer steps, which dead-code elimination must keep) and
    which parameters it *owns* (updates) or only *reads*. :func:`torchfrag.capture`
    turns shared parameters into weight-sync edges between fragments.

    Subclass it and implement :meth:`forward`, or wrap an existing TensorDict
    module in one line with :func:`wrap`.

    Args:
        in_keys: Keys read from the input TensorDict.
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
    """

    #: Class-level default for :attr:`impure`; subclasses with side effects set ``True``.
    impure: bool = False
    #: Class-level default for :attr:`passthrough`.
    passthrough: bool = True

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
    ) -> None:
        super().__init__()
        self.in_keys = unravel_key_list(list(in_keys))
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
