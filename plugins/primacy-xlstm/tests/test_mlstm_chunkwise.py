"""primacy_xlstm.mlstm: the chunkwise mLSTM equals xlstm's parallel form (outputs and gradients) in float64, stays
finite in float32 with saturated gates, and XLSTMBackbone trains with it without changing its outputs or gradients."""

import copy

import pytest
import torch
from xlstm.blocks.mlstm.backends import parallel_stabilized_simple
from xlstm.blocks.mlstm.cell import mLSTMCell

import primacy_xlstm.mlstm
from primacy_xlstm import XLSTMBackbone
from primacy_xlstm.mlstm import CHUNK, ChunkwisemLSTMCell, chunk_for, mlstm_chunkwise


def inputs(length: int, dtype: torch.dtype = torch.float64, batch: int = 2, heads: int = 3, width: int = 5,
           saturated: bool = True) -> dict[str, torch.Tensor]:
    """The cell's keyword arguments for ``backend_fn``: q, k, v (B, H, T, d), gate pre-activations (B, H, T, 1) of
    scale 3, and, ``saturated``, forget gates nearly shut (f̃ = -30) and input gates wide open (ĩ = +20) at some
    positions, so that the stabiliser m jumps and whole stretches of the past are forgotten."""
    torch.manual_seed(length)
    q, k, v = (torch.randn(batch, heads, length, width, dtype=dtype) for _ in range(3))
    i_pre, f_pre = (3 * torch.randn(batch, heads, length, 1, dtype=dtype) for _ in range(2))
    if saturated:
        f_pre[:, :, 3::5] = -30.0
        f_pre[:, 1, 1::4] = 30.0
        i_pre[:, :, 2::7] = 20.0
        i_pre[:, 2, ::3] = -20.0
    mask = torch.ones(length, length, dtype=torch.bool).tril()
    return {"queries": q, "keys": k, "values": v, "igate_preact": i_pre, "fgate_preact": f_pre,
            "lower_triangular_matrix": mask}


GRADS = ("queries", "keys", "values", "igate_preact", "fgate_preact")


def output_and_gradients(function, arguments: dict[str, torch.Tensor]) -> tuple[torch.Tensor, tuple[torch.Tensor]]:
    """function(**arguments) and the gradients of a loss weighing every output entry differently w.r.t. q, k, v and
    both gate pre-activations."""
    arguments = {name: (x.detach().clone().requires_grad_() if name in GRADS else x) for name, x in arguments.items()}
    out = function(**arguments)
    weights = torch.linspace(-1.0, 2.0, out.numel(), dtype=out.dtype).view_as(out)
    return out, torch.autograd.grad((weights * out).sum(), [arguments[name] for name in GRADS])


@pytest.mark.parametrize("length, chunk", [(24, 4), (30, 8), (27, 4), (13, 8), (5, 8), (1, 4)],
                         ids=["multiple", "multiple-8", "ragged", "ragged-8", "shorter", "one-position"])
@pytest.mark.parametrize("saturated", [True, False], ids=["saturated", "plain"])
def test_the_chunkwise_form_is_xlstms_parallel_form_with_its_gradients_in_float64(length, chunk, saturated):
    """T a multiple of C, a ragged last chunk, T < C; measured ≤ 2e-13 (outputs) and ≤ 1e-12 (gradients)."""
    arguments = inputs(length, saturated=saturated)
    reference, reference_grads = output_and_gradients(parallel_stabilized_simple, arguments)
    out, grads = output_and_gradients(lambda **kw: mlstm_chunkwise(**kw, chunk_size=chunk), arguments)
    assert out.shape == reference.shape
    torch.testing.assert_close(out, reference, rtol=0, atol=1e-10)
    for name, mine, theirs in zip(GRADS, grads, reference_grads):
        assert theirs.abs().max() > 0 or (name == "fgate_preact" and length == 1), name  # f̃_0 forgets nothing
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-8, msg=lambda text, name=name: f"{name}: {text}")


def test_other_value_widths_and_the_default_chunk_agree_too():
    """Values of another width than q and k (the influence calls backend_fn with the identity as values), no mask
    given, and the default C (the head dimension's: 8 for d = 4, ten chunks here)."""
    assert [chunk_for(d) for d in (2, 4, 8, 16, 32, 64)] == [8, 8, 8, 16, 32, 32]
    arguments = {**inputs(2 * CHUNK + CHUNK // 2, width=4), "lower_triangular_matrix": None}
    arguments["values"] = torch.randn(2, 3, arguments["values"].shape[2], 7, dtype=torch.float64)
    reference, reference_grads = output_and_gradients(parallel_stabilized_simple, arguments)
    out, grads = output_and_gradients(mlstm_chunkwise, arguments)
    torch.testing.assert_close(out, reference, rtol=0, atol=1e-10)
    for mine, theirs in zip(grads, reference_grads):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-8)


def test_saturated_gates_stay_finite_and_close_in_float32():
    """f̃ = ±30, ĩ = ±20 in float32: every output and gradient is finite, and the outputs are float64's to float32
    rounding (measured 5e-4 where outputs reach 43: the chunks' sums of log σ(f̃) are shorter than the parallel form's
    sums over the whole sequence, whose own float32 result is 3e-3 off)."""
    arguments = inputs(96, dtype=torch.float32, batch=2, heads=3, width=8)
    out, grads = output_and_gradients(lambda **kw: mlstm_chunkwise(**kw, chunk_size=16), arguments)
    assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads)
    exact = parallel_stabilized_simple(**{name: x.double() if x.is_floating_point() else x
                                          for name, x in arguments.items()})
    torch.testing.assert_close(out.double(), exact, rtol=1e-4, atol=1e-4)


def test_what_the_chunkwise_form_does_not_do_is_xlstms_function():
    """stabilize_rowwise=False (one maximum for the whole matrix) is xlstm's result; a causal mask shorter than the
    input is refused as xlstm refuses it."""
    arguments = inputs(12)
    torch.testing.assert_close(mlstm_chunkwise(**arguments, stabilize_rowwise=False, chunk_size=4),
                               parallel_stabilized_simple(**arguments, stabilize_rowwise=False), rtol=0, atol=0)
    short = {**arguments, "lower_triangular_matrix": arguments["lower_triangular_matrix"][:8, :8]}
    with pytest.raises(RuntimeError):
        parallel_stabilized_simple(**short)
    with pytest.raises(RuntimeError):
        mlstm_chunkwise(**short, chunk_size=4)


def run(model: XLSTMBackbone, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The model's output on x and the gradients of a weighted sum of it w.r.t. every parameter."""
    model.zero_grad(set_to_none=True)
    out = model(x)
    weights = torch.linspace(-1.0, 2.0, out.numel(), dtype=out.dtype).view_as(out)
    (weights * out).sum().backward()
    return out, [p.grad for p in model.parameters()]


def test_the_backbone_is_the_same_map_with_the_same_gradients_in_float64():
    """XLSTMBackbone with its chunkwise cells and a copy with xlstm's cell, parameters moved at random (the gates'
    weights start at zero), on a length of two chunks and a half: outputs and every parameter's gradient agree."""
    torch.manual_seed(0)
    ours = XLSTMBackbone(d_model=16, blocks=["mlstm"], mlstm_heads=2).double()
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(0.5 * torch.randn_like(p))
    theirs = copy.deepcopy(ours)
    [cell] = [m for m in theirs.modules() if isinstance(m, mLSTMCell)]
    cell.__class__ = mLSTMCell
    x = torch.randn(2, 2 * CHUNK + CHUNK // 2, 16, dtype=torch.float64)
    out, grads = run(ours, x)
    reference, reference_grads = run(theirs, x)
    torch.testing.assert_close(out, reference, rtol=0, atol=1e-8)
    assert len(grads) == len(reference_grads) and all(g is not None for g in grads)
    for mine, theirs_grad in zip(grads, reference_grads):
        torch.testing.assert_close(mine, theirs_grad, rtol=0, atol=1e-8)


def test_the_backbone_builds_the_chunkwise_cell_and_runs_it_unless_backend_fn_is_replaced(monkeypatch):
    """Same state dict as xlstm's cell, backend_fn still xlstm's parallel function (the influence records it);
    forward calls the chunkwise form (mlstm_loop='pytorch'), or a backend_fn someone set instead."""
    model = XLSTMBackbone(d_model=16, blocks=["mlstm", "slstm"], context_length=8, mlstm_loop="pytorch")
    [cell] = [m for m in model.modules() if isinstance(m, mLSTMCell)]
    assert type(cell) is ChunkwisemLSTMCell and cell.backend_fn is parallel_stabilized_simple
    assert model.state_dict().keys() == XLSTMBackbone(d_model=16, blocks=["mlstm", "slstm"]).state_dict().keys()
    assert cell.state_dict().keys() == mLSTMCell(cell.config).state_dict().keys()
    calls = []

    def counted(**kwargs):
        calls.append("chunkwise")
        return mlstm_chunkwise(**kwargs)

    monkeypatch.setattr(primacy_xlstm.mlstm, "mlstm_chunkwise", counted)
    x = torch.randn(2, 8, 16)
    model(x)
    assert calls == ["chunkwise"]
    cell.backend_fn = lambda **kwargs: calls.append("replaced") or parallel_stabilized_simple(**kwargs)
    model(x)
    assert calls == ["chunkwise", "replaced"]

