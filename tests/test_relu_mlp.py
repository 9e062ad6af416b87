"""relu_mlp against the same layers run by autograd op by op: values and every gradient, for one
network and for stacked twins; detached weights get no gradient; bad layer lists are refused."""
from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from torchfrag.algos.relu_mlp import relu_mlp


def _layers(sizes: list[int], stack: int | None, gen: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:
    lead = () if stack is None else (stack,)
    return [(torch.randn(*lead, o, i, generator=gen, dtype=torch.float64).requires_grad_(),
             torch.randn(*lead, o, generator=gen, dtype=torch.float64).requires_grad_())
            for i, o in itertools.pairwise(sizes)]


def _reference(x: torch.Tensor, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Layer by layer with nn.functional (stacked weights: one network at a time, stacked after)."""
    if layers[0][0].dim() == 3:
        n = layers[0][0].shape[0]
        xs = x.unbind(0) if x.dim() == 3 else [x] * n
        return torch.stack([_reference(xs[k], [(w[k], b[k]) for w, b in layers]) for k in range(n)])
    h = x
    for i, (w, b) in enumerate(layers):
        h = nn.functional.linear(h, w, b)
        if i < len(layers) - 1:
            h = torch.relu(h)
    return h


@pytest.mark.parametrize(("stack", "x_dims"), [(None, 2), (2, 2), (3, 3)])
def test_relu_mlp_matches_layer_by_layer(stack: int | None, x_dims: int) -> None:
    gen = torch.Generator().manual_seed(0)
    layers = _layers([5, 7, 6, 3], stack, gen)
    shape = (9, 5) if x_dims == 2 else (stack, 9, 5)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(*((9, 3) if stack is None else (stack, 9, 3)), generator=gen, dtype=torch.float64)
    flat = [x, *(t for layer in layers for t in layer)]
    outs, grads = [], []
    for fn in (_reference, relu_mlp):
        y = fn(x, layers)
        outs.append(y)
        grads.append(torch.autograd.grad(y, flat, upstream))
    torch.testing.assert_close(outs[1], outs[0])
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want)
    assert torch.autograd.gradcheck(lambda inp, *p: relu_mlp(inp, list(zip(p[0::2], p[1::2]))),
                                    tuple(flat), fast_mode=True)


def test_detached_weights_get_no_gradient_and_no_grad_records_nothing() -> None:
    gen = torch.Generator().manual_seed(1)
    layers = _layers([4, 8, 1], 2, gen)
    act = torch.randn(6, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    y = relu_mlp(act, [(w.detach(), b.detach()) for w, b in layers])
    y.sum().backward()
    assert act.grad is not None and act.grad.abs().sum() > 0
    assert all(w.grad is None and b.grad is None for w, b in layers)
    with torch.no_grad():
        z = relu_mlp(act, layers)
    assert z.grad_fn is None
    torch.testing.assert_close(z, y.detach())


def test_bfloat16_products_keep_the_callers_dtypes_and_stay_close() -> None:
    """dtype=bfloat16: output and every gradient in float32, within bfloat16's ~3 digits of the
    float64 reference; the cache casts a weight used twice once."""
    gen = torch.Generator().manual_seed(2)
    # weights scaled as networks are initialised (He: std sqrt(2 / fan_in)); unscaled random ones
    # make the first layer's gradient ill-conditioned: rounding the inputs alone moves it ~7%
    layers64 = [(w.detach().mul((2.0 / w.shape[-1]) ** 0.5).requires_grad_(), b.detach().mul(0.1).requires_grad_())
                for w, b in _layers([23, 64, 64, 1], 2, gen)]
    layers = [(w.detach().float().requires_grad_(), b.detach().float().requires_grad_()) for w, b in layers64]
    x64 = torch.randn(32, 23, generator=gen, dtype=torch.float64)
    cache: dict = {}
    y = relu_mlp(x64.float(), layers, torch.bfloat16, cache)
    y2 = relu_mlp(x64.float(), [(w.detach(), b.detach()) for w, b in layers], torch.bfloat16, cache)
    assert len(cache) == 6  # 3 weights and 3 biases, cast once for both calls
    torch.testing.assert_close(y2, y.detach())
    ref = _reference(x64, layers64)
    assert y.dtype == torch.float32
    scale = ref.abs().max()
    assert (y.double() - ref).abs().max() < 0.02 * scale
    y.sum().backward()
    ref.sum().backward()
    for (w, b), (w64, b64) in zip(layers, layers64):
        for got, want in ((w.grad, w64.grad), (b.grad, b64.grad)):
            assert got.dtype == torch.float32
            # bfloat16 keeps 8 bits: each product ~0.2% off, the first layer's gradient (three
            # rounded products deep) ~4% here; a wrong gradient is off by ~100%
            assert (got.double() - want).norm() < 0.08 * want.norm()


def test_relu_mlp_refuses_bad_layer_lists() -> None:
    with pytest.raises(ValueError, match="at least one"):
        relu_mlp(torch.zeros(2, 3), [])
    with pytest.raises(ValueError, match=r"all \[out, in\] or all \[N, out, in\]"):
        relu_mlp(torch.zeros(2, 3), [(torch.zeros(4, 3), None), (torch.zeros(2, 1, 4), None)])


@pytest.mark.parametrize("stack", [None, 2])
def test_param_rows_train_the_weights_on_the_leading_rows_only(stack: int | None) -> None:
    """param_rows=n: one call on stacked rows gives what a call on the first n rows (weights trained)
    and one on the rest with detached weights give together: outputs, the input's gradient and
    parameter gradients from the first rows alone (SAC's critic on replayed and on policy actions)."""
    gen = torch.Generator().manual_seed(7)
    layers = _layers([5, 16, 16, 1], stack, gen)
    x = torch.randn(12, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    w_out = torch.randn(*(() if stack is None else (stack,)), 12, 1, generator=gen, dtype=torch.float64)
    params = [t for layer in layers for t in layer]

    def grads(y: torch.Tensor) -> list[torch.Tensor]:
        got = torch.autograd.grad((y * w_out).sum(), [x, *params], allow_unused=True)
        return [torch.zeros_like(t) if g is None else g for g, t in zip(got, [x, *params])]

    y = relu_mlp(x, layers, param_rows=7)
    want = torch.cat([relu_mlp(x[:7], layers), relu_mlp(x[7:], [(w.detach(), b.detach()) for w, b in layers])], -2)
    torch.testing.assert_close(y, want)
    for got, ref in zip(grads(y), grads(want)):
        torch.testing.assert_close(got, ref)
    with pytest.raises(ValueError, match="param_rows must be in"):
        relu_mlp(x, layers, param_rows=13)


@pytest.mark.parametrize(("stack", "dtype"), [(None, torch.float64), (2, torch.float64), (2, torch.bfloat16)])
def test_input_grad_from_gives_the_inputs_gradient_on_its_block_only(stack: int | None, dtype: torch.dtype) -> None:
    """input_grad_from=(r, c): the same outputs and parameter gradients as without it (param_rows as
    well), and the input's gradient equal to the plain one on x[r:, c:] and zero elsewhere (SAC's
    critic: the policy rows' action columns), also with bfloat16 products."""
    gen = torch.Generator().manual_seed(11)
    layers = _layers([6, 16, 16, 1], stack, gen)
    x = torch.randn(12, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    w_out = torch.randn(*(() if stack is None else (stack,)), 12, 1, generator=gen, dtype=torch.float64)
    params = [t for layer in layers for t in layer]
    mm_dtype = None if dtype is torch.float64 else dtype

    def grads(y: torch.Tensor) -> list[torch.Tensor]:
        return list(torch.autograd.grad((y * w_out).sum(), [x, *params]))

    plain = relu_mlp(x, layers, mm_dtype, param_rows=7)
    block = relu_mlp(x, layers, mm_dtype, param_rows=7, input_grad_from=(7, 4))
    torch.testing.assert_close(block, plain)
    (gx_block, *gp_block), (gx_plain, *gp_plain) = grads(block), grads(plain)
    for got, ref in zip(gp_block, gp_plain):
        torch.testing.assert_close(got, ref)
    mask = torch.zeros_like(gx_plain)
    mask[7:, 4:] = 1.0
    torch.testing.assert_close(gx_block, gx_plain * mask)
    assert gx_block[7:, 4:].abs().sum() > 0
    with pytest.raises(ValueError, match="input_grad_from must be"):
        relu_mlp(x, layers, input_grad_from=(13, 0))


@pytest.mark.parametrize("stack", [None, 2])
def test_relu_mlp_split_is_a_call_with_gradients_and_one_without(stack: int | None) -> None:
    """relu_mlp_split(x, layers, n): the first n rows as relu_mlp with gradients, the rest as under
    no_grad (constants); the input's gradient is zero on the constant rows."""
    from torchfrag.algos.relu_mlp import relu_mlp_split

    gen = torch.Generator().manual_seed(11)
    layers = _layers([5, 16, 16, 3], stack, gen)
    params = [t for layer in layers for t in layer]
    x = torch.randn(9, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    head, tail = relu_mlp_split(x, layers, 4)
    want_head = relu_mlp(x[:4], layers)
    with torch.no_grad():
        want_tail = relu_mlp(x[4:], layers)
    torch.testing.assert_close(head, want_head)
    torch.testing.assert_close(tail, want_tail)
    assert head.requires_grad and not tail.requires_grad
    w_out = torch.randn_like(head)
    got = torch.autograd.grad((head * w_out).sum(), [x, *params])
    want = torch.autograd.grad((want_head * w_out).sum(), [x, *params], allow_unused=True)
    want = [torch.zeros_like(x) if want[0] is None else want[0], *want[1:]]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert not got[0][4:].any()
    with pytest.raises(ValueError, match="head_rows must be in"):
        relu_mlp_split(x, layers, 10)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_relu_gradient_on_the_bits_is_threshold_backward(dtype: torch.dtype) -> None:
    """ReLU's gradient from the 16-bit pattern of its output equals ``threshold_backward`` for every
    post-ReLU value (positive, +0 and -0), and a NaN output still passes a NaN forward."""
    from torchfrag.algos.relu_mlp import _relu_grad_

    gen = torch.Generator().manual_seed(3)
    pre = torch.randn(4, 64, 32, generator=gen).to(dtype)
    pre[0, 0, :4] = torch.tensor([0.0, -0.0, 1e-30, -1e-30])
    out = pre.relu()
    out[1, 1, 1] = -0.0  # a -0 output (relu may keep the sign of zero)
    g = torch.randn(4, 64, 32, generator=gen).to(dtype)
    want = torch.ops.aten.threshold_backward(g, out, 0.0)
    got = _relu_grad_(g.clone(), out)
    assert torch.equal(got, want)
    # the forward stays NaN where the pre-activation is NaN (ReLU propagates it)
    nan = torch.tensor([float("nan"), -float("nan")], dtype=dtype)
    assert relu_mlp(nan.view(2, 1), [(torch.ones(1, 1, dtype=dtype), None), (torch.ones(1, 1, dtype=dtype), None)]
                    ).isnan().all()
