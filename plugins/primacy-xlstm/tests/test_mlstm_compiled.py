"""primacy_xlstm.mlstm_compiled: the compiled mLSTM cell equals xlstm's parallel form and the chunkwise form (outputs
and every gradient) in float64 (the backbone on it: test_paths), passes gradcheck, is float64's to a few parts in a
million in float32, gives the same bits on any number of threads; XLSTMBackbone runs it with mlstm_loop='auto' (the
default) where it builds, records it, resumes a checkpoint on the cell it was trained on, and refuses in one line
where that cannot run."""

import pytest
import torch
from primacy.errors import UsageError
from test_mlstm_chunkwise import GRADS, inputs, output_and_gradients
from xlstm.blocks.mlstm.backends import parallel_stabilized_simple

import primacy_xlstm.mlstm_compiled
from primacy_xlstm import XLSTMBackbone
from primacy_xlstm.mlstm import ChunkwisemLSTMCell, mlstm_chunkwise
from primacy_xlstm.mlstm_compiled import mlstm_compiled


def close_to(reference, reference_grads, out, grads, atol, relative=False):
    """out and each gradient within atol of the reference's (times its largest entry with ``relative``)."""
    scale = reference.abs().max().item() if relative else 1.0
    torch.testing.assert_close(out.detach().double(), reference.detach(), rtol=0, atol=atol * scale)
    for name, mine, theirs in zip(GRADS, grads, reference_grads):
        scale = theirs.abs().max().item() if relative else 1.0
        torch.testing.assert_close(mine.double(), theirs, rtol=0, atol=atol * scale,
                                   msg=lambda text, name=name: f"{name}: {text}")


@pytest.mark.parametrize("length", [1, 5, 13, 24], ids=lambda t: f"T{t}")
@pytest.mark.parametrize("saturated", [True, False], ids=["saturated", "plain"])
def test_the_compiled_cell_is_xlstms_parallel_form_with_its_gradients_in_float64(length, saturated):
    """Outputs and the gradients of q, k, v, ĩ, f̃ within 1e-10 (measured ≤ 1e-11); f̃_0's gradient is exactly 0, as
    the parallel form's (the first position forgets nothing)."""
    arguments = inputs(length, saturated=saturated)
    reference, reference_grads = output_and_gradients(parallel_stabilized_simple, arguments)
    out, grads = output_and_gradients(mlstm_compiled, arguments)
    close_to(reference, reference_grads, out, grads, 1e-10)
    assert torch.all(grads[-1][:, :, 0] == 0)


def test_longer_sequences_other_value_widths_and_the_chunkwise_form_agree_too():
    """T 64 with saturated gates (gradients reach 100: within 1e-10 of their largest entry, measured 1.4e-13), values
    wider than q and k (the influence's identity values), and the chunkwise form (the PyTorch path) alike."""
    arguments = inputs(64, saturated=True)
    arguments["values"] = torch.randn(2, 3, 64, 7, dtype=torch.float64)
    reference, reference_grads = output_and_gradients(parallel_stabilized_simple, arguments)
    out, grads = output_and_gradients(mlstm_compiled, arguments)
    close_to(reference, reference_grads, out, grads, 1e-10, relative=True)
    chunkwise, chunkwise_grads = output_and_gradients(lambda **kw: mlstm_chunkwise(**kw, chunk_size=8), arguments)
    close_to(chunkwise, chunkwise_grads, out, grads, 1e-10, relative=True)


def test_gradcheck():
    arguments = inputs(7, batch=1, heads=2, width=3, saturated=False)
    tensors = [arguments[name].requires_grad_() for name in GRADS]
    assert torch.autograd.gradcheck(lambda *xs: mlstm_compiled(*xs), tensors)


def test_float32_is_float64_to_a_few_parts_in_a_million():
    """Measured against float64's parallel form, relative to the largest entry (T 64 plain, d 32 / T 96 saturated,
    d 8 / T 256, d 16): outputs 3.3e-6 / 2.3e-6 / 5.1e-6, gradients ≤ 2.5e-6 / 3.2e-6 / 9.9e-6, where the chunkwise
    form's are 2.1e-5 / 1.1e-5 / 6.2e-6 and ≤ 3e-5 / 2.4e-5 / 1.8e-5, and xlstm's parallel form's in float32 2.2e-6 /
    2.4e-5 / 1.6e-4 and ≤ 3.5e-6 / 4.9e-5 / 2.8e-4. Asserted here (T 96): 3e-5."""
    arguments = inputs(96, batch=2, heads=3, width=8, saturated=True)
    reference, reference_grads = output_and_gradients(parallel_stabilized_simple, arguments)
    single = {name: x.float() if x.is_floating_point() else x for name, x in arguments.items()}
    out, grads = output_and_gradients(mlstm_compiled, single)
    assert out.dtype == torch.float32 and all(torch.isfinite(g).all() for g in grads)
    close_to(reference, reference_grads, out, grads, 3e-5, relative=True)


def test_the_same_bits_on_any_number_of_threads():
    arguments = inputs(20, batch=3, dtype=torch.float32, saturated=False)
    threads = torch.get_num_threads()
    try:
        results = []
        for count in (1, 3):
            torch.set_num_threads(count)
            results.append(output_and_gradients(mlstm_compiled, arguments))
    finally:
        torch.set_num_threads(threads)
    (one, one_grads), (three, three_grads) = results
    assert torch.equal(one, three) and all(torch.equal(a, b) for a, b in zip(one_grads, three_grads))


@pytest.mark.parametrize("width", [8, 16, 32])
def test_the_loops_built_for_a_common_head_width_give_the_bits_of_the_loops_for_any_width(width):
    """In float32, d = dv of 8, 16 or 32 runs on loops compiled for that width; values one column wider (zeros) run on
    the loops for any width, with the same operations in the same order (the zero column adds +0 to every sum): the
    same bits, output and every gradient. (float64 runs the loops for any width at every width.)"""
    for dtype in (torch.float32,):
        arguments = inputs(40, dtype=dtype, batch=2, heads=3, width=width)
        padded = {**arguments, "values": torch.cat([arguments["values"], arguments["values"][..., :1] * 0], -1)}
        results = []
        for given in (arguments, padded):
            given = {name: (x.detach().clone().requires_grad_() if name in GRADS else x) for name, x in given.items()}
            out = mlstm_compiled(**given)
            weights = torch.linspace(-1.0, 2.0, 2 * 3 * 40 * width, dtype=dtype).view(2, 3, 40, width)
            weights = torch.cat([weights, weights[..., :out.shape[-1] - width] * 0], -1)
            grads = torch.autograd.grad((weights * out).sum(), [given[name] for name in GRADS])
            results.append((out[..., :width], grads[:2] + (grads[2][..., :width],) + grads[3:]))
        (out, grads), (any_out, any_grads) = results
        assert torch.equal(out, any_out) and all(torch.equal(a, b) for a, b in zip(grads, any_grads))


def small(**settings):
    torch.manual_seed(0)
    return XLSTMBackbone(d_model=8, blocks=["mlstm", "slstm"], mlstm_heads=2, slstm_heads=2, **settings)


def cells(model):
    return {m.mlstm_loop for m in model.modules() if isinstance(m, ChunkwisemLSTMCell)} | {model.mlstm_loop}


def test_auto_is_a_compiled_cell_where_it_builds_said_once_and_recorded(caplog):
    """compiled_layer since primacy-xlstm 0.5 (test_mlstm_layer), compiled_qkv in 0.4 (test_mlstm_qkv), compiled in
    0.3."""
    with caplog.at_level("INFO", logger="primacy_xlstm"):
        model = small()
    assert model.mlstm_setting == "auto" and cells(model) == {"compiled_layer"}
    assert model.state_dict()["_extra_state"]["mlstm_loop"] == "compiled_layer"
    assert ("XLSTMBackbone runs the compiled_layer mLSTM cell (mlstm_loop='auto' and the machine's C++ compiler built "
            "the compiled cell)") in caplog.text
    assert small(mlstm_loop="pytorch").state_dict()["_extra_state"]["mlstm_loop"] == "pytorch"


@pytest.fixture
def no_compiler(tmp_path, monkeypatch):
    """An empty kernel cache and a compiler that does not exist; the real library is found again afterwards."""
    monkeypatch.setenv("PRIMACY_KERNEL_CACHE", str(tmp_path / "kernels"))
    monkeypatch.setenv("CXX", "no-such-c++")
    primacy_xlstm.mlstm_compiled._library.cache_clear()
    yield
    primacy_xlstm.mlstm_compiled._library.cache_clear()


def test_without_a_compiler_auto_is_the_chunkwise_cell_and_compiled_is_refused_in_one_line(no_compiler, caplog):
    with caplog.at_level("INFO", logger="primacy_xlstm"):
        model = small(slstm_loop="pytorch")
    assert cells(model) == {"pytorch"}
    assert ("runs the pytorch mLSTM cell (mlstm_loop='auto' and the compiled cell cannot be built here: "
            "mlstm_loop='compiled' needs a C++ compiler and 'no-such-c++' (CXX) is not one on PATH") in caplog.text
    with pytest.raises(UsageError, match=r"^mlstm_loop='compiled' needs a C\+\+ compiler .* use mlstm_loop='pytorch'$"):
        small(slstm_loop="pytorch", mlstm_loop="compiled")
    state = small(slstm_loop="pytorch", mlstm_loop="pytorch").state_dict()
    state["_extra_state"] = {"slstm_loop": "pytorch", "mlstm_loop": "compiled"}
    with pytest.raises(UsageError, match=r"^this checkpoint was trained with mlstm_loop='compiled', which cannot run "
                                         r"here \(.*\); set mlstm_loop explicitly to run it on the other loop"):
        small(slstm_loop="pytorch").load_state_dict(state)
    small(slstm_loop="pytorch", mlstm_loop="pytorch").load_state_dict(state)  # an explicit setting runs it


def test_a_checkpoint_resumes_on_its_cell_with_the_same_bits():
    """A state dict of the chunkwise cell, and one from before the record (the chunkwise cell, the only one then),
    load into auto and run the chunkwise cell; one of the compiled cell loads as compiled; an explicit setting wins."""
    trained = small(mlstm_loop="pytorch")
    x = torch.randn(2, 5, 8)
    state = trained.state_dict()
    before = {**state, "_extra_state": {"slstm_loop": state["_extra_state"]["slstm_loop"]}}
    for given in (state, before):
        resumed = small()
        resumed.load_state_dict(given)  # strict
        assert cells(resumed) == {"pytorch"} and torch.equal(resumed(x), trained(x))
    compiled = small(mlstm_loop="compiled")
    resumed = small()
    resumed.load_state_dict(compiled.state_dict())
    assert cells(resumed) == {"compiled"} and torch.equal(resumed(x), compiled(x))
    explicit = small(mlstm_loop="compiled")
    explicit.load_state_dict(state)
    assert cells(explicit) == {"compiled"}


def test_auto_takes_the_chunkwise_cell_for_an_input_the_compiled_one_does_not_take(caplog):
    """bfloat16 here, as on a GPU: the model runs, the log says why and the record follows; an explicit setting
    refuses in one line."""
    model = small(slstm_loop="pytorch").bfloat16()
    x = torch.randn(2, 5, 8, dtype=torch.bfloat16, requires_grad=True)
    with caplog.at_level("INFO", logger="primacy_xlstm"):
        model(x).float().sum().backward()
    assert cells(model) == {"pytorch"} and model.state_dict()["_extra_state"]["mlstm_loop"] == "pytorch"
    assert ("XLSTMBackbone runs the pytorch mLSTM cell (mlstm_loop='auto' and the input is torch.bfloat16 on cpu, "
            "which the compiled cell does not take)") in caplog.text
    with pytest.raises(UsageError, match=r"^mlstm_loop='compiled' runs on float32 or float64 CPU tensors"):
        small(slstm_loop="pytorch", mlstm_loop="compiled").bfloat16()(x)
