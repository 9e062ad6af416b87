"""A stack of linear layers with ReLU between them as one autograd node, for small networks on a CPU.

Autograd records a ReLU MLP of ``L`` layers as about ``3L`` nodes (``addmm`` or
``baddbmm``, ``relu``, views), each with its own saved tensors, its own
backward call and fresh output buffers; for SAC's 256x256 networks at batch 256
on one CPU core that bookkeeping costs about as much as the matrix products
(``benchmarks/sac_update.py``). :func:`relu_mlp` runs the same layers as one
:class:`torch.autograd.Function`: ReLU in place on each product, the
post-activation outputs saved once (they are both the next layer's input and
ReLU's mask), and a hand-written backward that computes only what is asked for
(no weight gradients for weights passed detached, no input gradient when the
input does not need one). Values and gradients are those of the layer-by-layer
network (``tests/test_relu_mlp.py``).

Weights are ``[out, in]`` (one network) or ``[N, out, in]`` (``N`` networks of
the same shape run as batched matrix products, as TorchRL's stacked ensemble
parameters are); a ``[B, in]`` input is shared by all ``N`` networks.

Example:
    >>> import torch
    >>> from torchfrag.algos.relu_mlp import relu_mlp
    >>> w0, b0 = torch.randn(4, 3, requires_grad=True), torch.zeros(4, requires_grad=True)
    >>> w1, b1 = torch.randn(2, 4, requires_grad=True), torch.zeros(2, requires_grad=True)
    >>> x = torch.randn(5, 3)
    >>> y = relu_mlp(x, [(w0, b0), (w1, b1)])
    >>> ref = torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(x, w0, b0)), w1, b1)
    >>> torch.allclose(y, ref)
    True
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["relu_mlp", "relu_mlp_split"]


def _affine(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """``x @ w^T + b`` for one network (``w`` 2-D) or ``N`` stacked ones (``w`` ``[N, out, in]``)."""
    if w.dim() == 2:
        return torch.addmm(b, x, w.t()) if b is not None else x.mm(w.t())
    if x.dim() == 2:  # one input for every network
        x = x.expand(w.shape[0], *x.shape)
    if b is None:
        return torch.bmm(x, w.transpose(1, 2))
    return torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))


def _cast(t: torch.Tensor, dtype: torch.dtype, cache: dict | None) -> torch.Tensor:
    """``t`` in ``dtype``, from ``cache`` (keyed by storage address, shape and dtype) when it holds it."""
    if cache is None or t.dtype == dtype:
        return t.to(dtype)
    key = (t.data_ptr(), t.shape, t.stride(), t.dtype)
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = t.to(dtype)
    return hit


def _forward(x: torch.Tensor, layers: Sequence[tuple[torch.Tensor, torch.Tensor | None]],
             dtype: torch.dtype | None, cache: dict | None = None
             ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """The network's output (in ``x``'s dtype), the input of every layer (post-ReLU activations after
    the first) and the weights as multiplied (in ``dtype`` when given)."""
    out_dtype = x.dtype
    if dtype is not None:
        x = x.to(dtype)
        layers = [(_cast(w, dtype, cache), _cast(b, dtype, cache) if b is not None else None) for w, b in layers]
    inputs = [x]
    h = x
    last = len(layers) - 1
    for i, (w, b) in enumerate(layers):
        h = _affine(h, w, b)
        if i < last:
            h = h.relu_()  # a fresh product: nothing else holds it
            inputs.append(h)
    return h.to(out_dtype), inputs, [w for w, _ in layers]


class _ReluMLP(torch.autograd.Function):
    """``relu_mlp`` as one autograd node: inputs ``(x, w0, b0, w1, b1, ...)``."""

    @staticmethod
    def forward(ctx: Any, dtype: torch.dtype | None, cache: dict | None, param_rows: int | None,
                head_rows: int | None, input_grad: tuple[int, int] | None, x: torch.Tensor,
                *flat: torch.Tensor | None) -> Any:
        layers = list(zip(flat[0::2], flat[1::2]))
        out, inputs, weights = _forward(x, layers, dtype, cache)
        ctx.n_layers = len(layers)
        ctx.has_bias = [b is not None for _, b in layers]
        ctx.dtypes = (x.dtype, flat[0].dtype)  # of the input, of the parameters
        ctx.param_rows = param_rows
        ctx.x_rows = x.shape[-2]
        ctx.head_rows = head_rows
        ctx.input_grad = input_grad
        if head_rows is None:
            ctx.save_for_backward(*inputs, *weights)
            return out
        # split: the backward runs on the head rows alone, the tail is a constant
        ctx.save_for_backward(*(t.narrow(-2, 0, head_rows) for t in inputs), *weights)
        tail = out.narrow(-2, head_rows, out.shape[-2] - head_rows).clone()
        ctx.mark_non_differentiable(tail)
        return out.narrow(-2, 0, head_rows), tail

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *_tail: Any) -> tuple[torch.Tensor | None, ...]:
        n = ctx.n_layers
        saved = ctx.saved_tensors
        inputs, weights = saved[:n], saved[n:]
        needs = ctx.needs_input_grad[5:]  # after dtype, cache, param_rows, head_rows and input_grad
        rows = ctx.param_rows
        x_dtype, p_dtype = ctx.dtypes
        grads: list[torch.Tensor | None] = [None] * (1 + 2 * n)
        g = grad.to(weights[0].dtype)
        for i in range(n - 1, -1, -1):
            a, w = inputs[i], weights[i]
            stacked = w.dim() == 3
            # the rows whose loss trains the parameters (param_rows: the leading ones only)
            ga, aa = (g, a) if rows is None else (g.narrow(-2, 0, rows), a.narrow(-2, 0, rows))
            if needs[1 + 2 * i]:  # dL/dW = g^T a (per network)
                if stacked:
                    if rows is not None:
                        # the leading rows of each network's [rows, features] block: not one
                        # dense batch of matrices (its batch stride is the full block's), which
                        # the batched product handles ~1.7x slower (bf16 on one AVX-512 core)
                        # than a dense copy of it, the copy included
                        ga = ga.contiguous()
                        if aa.dim() == 3:
                            aa = aa.contiguous()
                    a3 = aa if aa.dim() == 3 else aa.expand(w.shape[0], *aa.shape)
                    grads[1 + 2 * i] = torch.bmm(ga.transpose(1, 2), a3).to(p_dtype)
                else:
                    grads[1 + 2 * i] = ga.t().mm(aa).to(p_dtype)
            if ctx.has_bias[i] and needs[2 + 2 * i]:
                # summed in g's dtype (a bfloat16 sum accumulates in float32 and rounds once, as the
                # weight gradient's product does): sum(dtype=float32) first copies all of g to float32
                grads[2 + 2 * i] = ga.sum(-2).to(p_dtype)
            if i == 0 and not needs[0]:
                break
            if i == 0 and ctx.input_grad is not None:
                grads[0] = _input_grad_block(g, w, a, ctx.input_grad, x_dtype)
                break
            g = torch.bmm(g, w) if stacked else g.mm(w)
            if i > 0:
                # ReLU's gradient, zero where its output is zero, in place (masked_fill_ and where
                # with a boolean mask are ~20x slower on a CPU core)
                g = _relu_grad_(g, a)
            elif stacked and a.dim() == 2:
                g = g.sum(0)  # the shared input's gradient: summed over the networks
        if needs[0] and ctx.input_grad is None:
            grads[0] = g.to(x_dtype)
            if ctx.head_rows is not None:  # the tail rows' outputs are constants: no gradient
                grads[0] = torch.cat([grads[0], grads[0].new_zeros(
                    (*grads[0].shape[:-2], ctx.x_rows - ctx.head_rows, grads[0].shape[-1]))], -2)
        return (None, None, None, None, None, *grads)


def _input_grad_block(g: torch.Tensor, w: torch.Tensor, x: torch.Tensor, block: tuple[int, int],
                      x_dtype: torch.dtype) -> torch.Tensor:
    """The input's gradient where only its rows from ``block[0]`` and columns from ``block[1]`` get one.

    ``g`` is the first layer's output gradient, ``w`` its weight (``[out, in]`` or ``[N, out, in]``),
    ``x`` the input as saved (``[B, in]`` or ``[N, B, in]``). The product runs on that block alone;
    the rest of the gradient is zero.
    """
    rows, cols = block
    gb = g.narrow(-2, rows, g.shape[-2] - rows)
    wb = w.narrow(-1, cols, w.shape[-1] - cols)
    if w.dim() == 3:
        gx = torch.bmm(gb, wb)
        if x.dim() == 2:
            gx = gx.sum(0)  # the shared input's gradient: summed over the networks
    else:
        gx = gb.mm(wb)
    out = torch.zeros(x.shape, dtype=x_dtype, device=x.device)
    out.narrow(-2, rows, gx.shape[-2]).narrow(-1, cols, gx.shape[-1]).copy_(gx)
    return out


_INT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16}


def _relu_grad_(g: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``g`` zeroed in place where the ReLU output ``out`` is not positive (ReLU's gradient).

    For 16-bit floats this runs on the bits: a post-ReLU value is positive exactly when its
    sign bit is clear and it is not zero, i.e. when its ``int16`` view is > 0, so
    ``g *= clamp(out_bits, 0, 1)`` on the ``int16`` views is ReLU's gradient in two integer
    passes (``threshold_backward`` converts every element to float32 and back: ~2x slower on an
    AVX-512 core). It differs from ``threshold_backward`` only where ``out`` is a NaN with a
    clear sign bit: the gradient passes there, where the forward output is already NaN.
    """
    view = _INT_VIEW.get(g.dtype)
    if view is not None and out.dtype == g.dtype and g.is_contiguous() and out.is_contiguous():
        g.view(view).mul_(out.view(view).clamp(0, 1))
        return g
    return torch.ops.aten.threshold_backward.grad_input(g, out, 0.0, grad_input=g)


def _check_layers(layers: Sequence[tuple[torch.Tensor, torch.Tensor | None]]) -> None:
    if not layers:
        raise ValueError("relu_mlp needs at least one (weight, bias) layer")
    dims = {w.dim() for w, _ in layers}
    if dims not in ({2}, {3}):
        raise ValueError(f"relu_mlp needs weights all [out, in] or all [N, out, in]; got dims {sorted(dims)}")


def relu_mlp(x: torch.Tensor, layers: Sequence[tuple[torch.Tensor, torch.Tensor | None]],
             dtype: torch.dtype | None = None, cache: dict | None = None,
             param_rows: int | None = None, input_grad_from: tuple[int, int] | None = None) -> torch.Tensor:
    """``linear -> ReLU -> ... -> linear`` over ``layers`` (``(weight, bias or None)`` pairs, the input first).

    Gradients reach every tensor that requires one; pass a weight ``.detach()``-ed to
    leave it without a gradient. Under ``torch.no_grad()`` (or when nothing needs a
    gradient) it runs the layers without recording anything.

    Args:
        x: ``[B, in]``, or ``[N, B, in]`` for ``N`` stacked networks.
        layers: ``(weight, bias)`` per layer; weights ``[out, in]`` or ``[N, out, in]``.
        dtype: Multiply in this dtype (e.g. ``torch.bfloat16``: AMX/AVX-512-BF16 matrix units on
            recent x86 CPUs, tensor cores on GPUs), the input, weights and activations cast to it;
            the output, the input's gradient and the parameters' gradients come back in their own
            dtypes (weight and bias gradients rounded to ``dtype`` once, then cast). ``None``: the input's dtype, no casts.
        cache: With ``dtype``, a dict that keeps the cast parameters for the caller's next calls
            (a network run twice on the same weights casts them once). The caller empties it
            whenever a parameter may have changed in place (after an optimizer step).
        param_rows: Only the first ``param_rows`` rows of the batch (dimension -2) give the
            parameters their gradients; the other rows' outputs still pass gradients to ``x``.
            Two evaluations of one network, one training it and one only differentiated
            through (SAC's critic on replayed and on policy actions, the second with
            detached weights), run as one call on the stacked rows (``None``: every row).
        input_grad_from: ``(rows, cols)``: only ``x[..., rows:, cols:]`` gets a gradient (the rest
            of ``x``'s gradient is zero, as if those entries were constants); the first layer's
            input gradient is then one product over that block instead of the whole input (SAC's
            critic: only the policy rows' action columns lead back to the actor). ``None``: all of ``x``.

    Returns:
        ``[B, out]``, or ``[N, B, out]`` for stacked networks.

    Raises:
        ValueError: No layers, or layers whose weights are not all 2-D or all 3-D.

    Example:
        >>> import torch
        >>> from torchfrag.algos.relu_mlp import relu_mlp
        >>> w = torch.randn(2, 4, 3)  # two networks of one layer
        >>> relu_mlp(torch.randn(5, 3), [(w, None)]).shape
        torch.Size([2, 5, 4])
    """
    _check_layers(layers)
    if param_rows is not None and not 0 <= param_rows <= x.shape[-2]:
        raise ValueError(f"relu_mlp: param_rows must be in [0, {x.shape[-2]}] (the batch), got {param_rows}")
    if input_grad_from is not None:
        rows, cols = input_grad_from
        if not (0 <= rows <= x.shape[-2] and 0 <= cols <= x.shape[-1]):
            raise ValueError(f"relu_mlp: input_grad_from must be (rows, cols) within {tuple(x.shape[-2:])}, "
                             f"got {input_grad_from}")
        input_grad_from = (int(rows), int(cols))
    flat = [t for layer in layers for t in layer]
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, *flat)):
        return _ReluMLP.apply(dtype, cache, param_rows, None, input_grad_from, x, *flat)
    return _forward(x, layers, dtype, cache)[0]


def relu_mlp_split(x: torch.Tensor, layers: Sequence[tuple[torch.Tensor, torch.Tensor | None]], head_rows: int,
                   dtype: torch.dtype | None = None, cache: dict | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`relu_mlp` on all rows of ``x`` in one call, differentiable on the first ``head_rows`` only.

    For one network evaluated on two batches where only the first needs gradients (SAC's actor
    on the replayed observations, with gradients, and on the next observations, for the
    targets, without): one pass over the stacked rows instead of two calls, and a backward
    over the head rows alone (not over zeros for the tail).

    Args:
        x: ``[B, in]`` (or ``[N, B, in]`` for stacked networks), the head rows first.
        layers: As for :func:`relu_mlp`.
        head_rows: Rows (dimension -2) whose outputs are differentiable.
        dtype: As for :func:`relu_mlp`.
        cache: As for :func:`relu_mlp`.

    Returns:
        ``(head, tail)``: the outputs of the first ``head_rows`` rows (differentiable) and of the
        others (constants, as computed under ``torch.no_grad()``).

    Raises:
        ValueError: ``head_rows`` outside ``[0, B]``, or what :func:`relu_mlp` refuses.

    Example:
        >>> import torch
        >>> from torchfrag.algos.relu_mlp import relu_mlp_split
        >>> w = torch.randn(2, 3, requires_grad=True)
        >>> head, tail = relu_mlp_split(torch.randn(5, 3), [(w, None)], 2)
        >>> head.shape, tail.shape, head.requires_grad, tail.requires_grad
        (torch.Size([2, 2]), torch.Size([3, 2]), True, False)
    """
    if not 0 <= head_rows <= x.shape[-2]:
        raise ValueError(f"relu_mlp_split: head_rows must be in [0, {x.shape[-2]}] (the batch), got {head_rows}")
    _check_layers(layers)
    flat = [t for layer in layers for t in layer]
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, *flat)):
        return _ReluMLP.apply(dtype, cache, None, head_rows, None, x, *flat)
    out = relu_mlp(x, layers, dtype, cache)
    return out.narrow(-2, 0, head_rows), out.narrow(-2, head_rows, out.shape[-2] - head_rows)
