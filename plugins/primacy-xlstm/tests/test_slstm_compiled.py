"""primacy_xlstm.compiled: the compiled sLSTM loop equals xlstm's vanilla cell and the PyTorch loop (outputs, final
states, every gradient) in float64 (the backbone on it: test_paths), passes gradcheck, is close in float32, gives the
same bits on any number of threads, and XLSTMBackbone runs it with slstm_loop='compiled' or refuses in one line;
slstm_loop='auto' (the default) runs it where it builds, the PyTorch loop where not, and a checkpoint resumes on the
loop it records."""

import pytest
import torch
from primacy.errors import UsageError
from test_slstm_loop import cell_pair, run

import primacy_xlstm.compiled
from primacy_xlstm import XLSTMBackbone
from primacy_xlstm.compiled import compiled_sequence
from primacy_xlstm.slstm import FastsLSTMCell, _Sequence


def inputs(length=6, batch=3, heads=2, dh=3, dtype=torch.float64, initial="random", scale=2.0, seed=0):
    """Head-major pre-activations (T, B, 4H), initial states (4, B, H) (zeros: xlstm's first step; random: n > 0,
    m of any sign) and R (NH, 4dh, dh), all requiring gradients."""
    generator = torch.Generator().manual_seed(seed)
    width = heads * dh
    xb = scale * torch.randn(length, batch, 4 * width, dtype=dtype, generator=generator)
    states = torch.randn(4, batch, width, dtype=dtype, generator=generator)
    states[2] = states[2].abs() + 0.1
    if initial == "zeros":
        states.zero_()
    R = torch.randn(heads, 4 * dh, dh, dtype=dtype, generator=generator)
    return [x.requires_grad_() for x in (xb, states, R)]


def outputs_and_gradients(sequence, xb, states, R, outputs_only):
    out = sequence(xb, states, R, outputs_only)
    weights = torch.linspace(-1.0, 2.0, out.numel(), dtype=out.dtype).view_as(out)
    return (out, *torch.autograd.grad((weights * out).sum(), [xb, states, R]))


@pytest.mark.parametrize("initial", ["zeros", "random"])
def test_the_compiled_cell_is_xlstms_vanilla_cell_with_its_gradients_in_float64(initial):
    theirs, ours = cell_pair()
    ours.slstm_loop = "compiled"
    x = torch.randn(3, 9, 4 * 8, dtype=torch.float64)
    state = None
    if initial == "random":
        state = torch.randn(4, 3, 8, dtype=torch.float64)
        state[2] = state[2].abs() + 0.1
    out_theirs, final_theirs, grads_theirs = run(theirs, x, state)
    out_ours, final_ours, grads_ours = run(ours, x, state)
    torch.testing.assert_close(out_ours, out_theirs, rtol=0, atol=1e-12)
    torch.testing.assert_close(final_ours, final_theirs, rtol=0, atol=1e-12)
    assert len(grads_ours) == len(grads_theirs) == 3 + int(state is not None)
    for mine, reference in zip(grads_ours, grads_theirs):
        assert reference.abs().max() > 0
        torch.testing.assert_close(mine, reference, rtol=0, atol=1e-10)


@pytest.mark.parametrize("outputs_only", [False, True])
@pytest.mark.parametrize("initial,scale", [("zeros", 2.0), ("random", 2.0), ("zeros", 20.0), ("random", 20.0)])
def test_the_compiled_loop_equals_the_pytorch_loop_in_float64(initial, scale, outputs_only):
    """Every state after every step (or y alone) and the gradients of xb, the initial states and R; scale 20 makes
    the stabiliser switch between ĩ and log σ(f̃) + m often."""
    xb, states, R = inputs(initial=initial, scale=scale)
    ours = outputs_and_gradients(compiled_sequence, xb, states, R, outputs_only)
    reference = outputs_and_gradients(_Sequence.apply, xb, states, R, outputs_only)
    for mine, expected in zip(ours, reference):
        torch.testing.assert_close(mine, expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("outputs_only", [False, True])
@pytest.mark.parametrize("initial", ["zeros", "random"])
def test_gradcheck(initial, outputs_only):
    """From a zero state, not in the states: xlstm's first step is another map where every n is 0, so a finite
    difference of the states moves off it."""
    xb, states, R = inputs(length=4, batch=2, heads=2, dh=2, initial=initial, scale=1.0)
    if initial == "zeros":
        states = states.detach()
    assert torch.autograd.gradcheck(lambda *a: compiled_sequence(*a, outputs_only), (xb, states, R))


def test_float32_is_close_to_the_pytorch_loop():
    xb, states, R = inputs(length=16, batch=4, heads=4, dh=4, dtype=torch.float32, scale=1.0)
    with torch.no_grad():
        R.mul_(0.3)
    ours = outputs_and_gradients(compiled_sequence, xb, states, R, False)
    reference = outputs_and_gradients(_Sequence.apply, xb, states, R, False)
    for mine, expected in zip(ours, reference):
        torch.testing.assert_close(mine, expected, rtol=0, atol=1e-5 * expected.abs().max().item())


def test_the_same_bits_on_any_number_of_threads():
    threads = torch.get_num_threads()
    results = []
    try:
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            xb, states, R = inputs(length=8, batch=5, dtype=torch.float32, seed=1)
            results.append(outputs_and_gradients(compiled_sequence, xb, states, R, True))
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        for one, many in zip(results[0], other):
            assert torch.equal(one, many)


def test_refusals_in_one_line(tmp_path, monkeypatch):
    with pytest.raises(UsageError, match=r"^slstm_loop='cuda' is unknown"):
        XLSTMBackbone(d_model=8, slstm_heads=2, slstm_loop="cuda")
    xb, states, R = inputs()
    with pytest.raises(UsageError, match=r"^slstm_loop='compiled' runs on float32 or float64 CPU tensors of one "
                                         r"dtype, not torch.bfloat16 on cpu: use slstm_loop='pytorch'$"):
        compiled_sequence(*(x.detach().bfloat16() for x in (xb, states, R)))
    monkeypatch.setenv("PRIMACY_KERNEL_CACHE", str(tmp_path / "kernels"))
    monkeypatch.setenv("CXX", "no-such-c++")
    primacy_xlstm.compiled.library.cache_clear()
    try:
        with pytest.raises(UsageError, match=r"^slstm_loop='compiled' needs a C\+\+ compiler and 'no-such-c\+\+' "
                                             r"\(CXX\) is not one on PATH: install one \(g\+\+ or clang\+\+\) or use "
                                             r"slstm_loop='pytorch'$"):
            XLSTMBackbone(d_model=8, slstm_heads=2, backend="vanilla", slstm_loop="compiled")
        XLSTMBackbone(d_model=8, slstm_heads=2, backend="vanilla")  # the PyTorch loop needs no compiler
    finally:
        primacy_xlstm.compiled.library.cache_clear()


def test_a_cell_built_directly_runs_the_pytorch_loop():
    assert FastsLSTMCell.slstm_loop == "pytorch"


def loops(model):
    return {m.slstm_loop for m in model.modules() if isinstance(m, FastsLSTMCell)} | {model.slstm_loop}


@pytest.fixture
def no_compiler(tmp_path, monkeypatch):
    """An empty kernel cache and a compiler that does not exist; the real library is found again afterwards."""
    monkeypatch.setenv("PRIMACY_KERNEL_CACHE", str(tmp_path / "kernels"))
    monkeypatch.setenv("CXX", "no-such-c++")
    primacy_xlstm.compiled.library.cache_clear()
    yield
    primacy_xlstm.compiled.library.cache_clear()


def small(**settings):
    """The mLSTM cell the chunkwise form unless asked (test_mlstm_compiled checks its record)."""
    settings.setdefault("mlstm_loop", "pytorch")
    torch.manual_seed(0)
    return XLSTMBackbone(d_model=8, blocks=["mlstm", "slstm"], slstm_heads=2, backend="vanilla", **settings)


def test_auto_is_a_compiled_loop_where_it_builds_and_the_state_dict_records_it():
    """compiled_block since primacy-xlstm 0.6 (test_slstm_block), compiled_conv in 0.5 (test_slstm_conv),
    compiled_gates in 0.4 (test_slstm_gates), compiled before."""
    model = small()
    assert model.slstm_setting == "auto" and loops(model) == {"compiled_block"}
    assert model.state_dict()["_extra_state"] == {"slstm_loop": "compiled_block", "mlstm_loop": "pytorch"}
    expected = {"slstm_loop": "pytorch", "mlstm_loop": "pytorch"}
    assert small(slstm_loop="pytorch").state_dict()["_extra_state"] == expected


def test_auto_without_a_compiler_is_the_pytorch_loop_and_says_why(no_compiler, caplog):
    with caplog.at_level("INFO", logger="primacy_xlstm"):
        model = small()
    assert loops(model) == {"pytorch"}
    assert ("on the pytorch loop (slstm_loop='auto' and the compiled loop cannot be built here: slstm_loop='compiled' "
            "needs a C++ compiler and 'no-such-c++' (CXX) is not one on PATH") in caplog.text


def test_a_checkpoint_resumes_on_its_loop_with_the_same_bits():
    """A state dict of the PyTorch loop, and one from before the record (the PyTorch loop, the only one then), load
    into auto and run the PyTorch loop; one of the compiled loop loads into auto as compiled; an explicit loop is
    honoured whatever the record."""
    trained = small(slstm_loop="pytorch")
    x = torch.randn(2, 5, 8)
    state = trained.state_dict()
    old = {key: value for key, value in state.items() if key != "_extra_state"}
    for given in (state, old):
        resumed = small()
        resumed.load_state_dict(given)  # strict
        assert loops(resumed) == {"pytorch"}
        assert torch.equal(resumed(x), trained(x))  # the same path, the same bits
    compiled = small(slstm_loop="compiled")
    resumed = small()
    resumed.load_state_dict(compiled.state_dict())
    assert loops(resumed) == {"compiled"} and torch.equal(resumed(x), compiled(x))
    explicit = small(slstm_loop="compiled")
    explicit.load_state_dict(state)
    assert loops(explicit) == {"compiled"}


def test_a_checkpoint_of_the_compiled_loop_is_refused_in_one_line_where_it_cannot_run(no_compiler):
    state = small(slstm_loop="pytorch").state_dict()
    state["_extra_state"] = {"slstm_loop": "compiled"}
    with pytest.raises(UsageError, match=r"^this checkpoint was trained with slstm_loop='compiled', which cannot run "
                                         r"here \(slstm_loop='compiled' needs a C\+\+ compiler .*\); set slstm_loop "
                                         r"explicitly to run it on the other loop \(they agree to float rounding\)$"):
        small().load_state_dict(state)
    small(slstm_loop="pytorch").load_state_dict(state)  # an explicit loop runs it


def test_auto_takes_the_pytorch_loop_for_an_input_the_compiled_one_does_not_take(caplog):
    """bfloat16 here, as on a GPU: the model runs, the log says why and the record follows; an explicit loop refuses."""
    model = small().bfloat16()
    x = torch.randn(2, 5, 8, dtype=torch.bfloat16, requires_grad=True)
    with caplog.at_level("INFO", logger="primacy_xlstm"):
        model(x).float().sum().backward()
    assert loops(model) == {"pytorch"}
    assert model.state_dict()["_extra_state"] == {"slstm_loop": "pytorch", "mlstm_loop": "pytorch"}
    assert ("XLSTMBackbone runs the pytorch sLSTM loop (slstm_loop='auto' and the input is torch.bfloat16 on cpu, "
            "which the compiled loop does not take)") in caplog.text
    with pytest.raises(UsageError, match=r"^slstm_loop='compiled' runs on float32 or float64 CPU tensors"):
        small(slstm_loop="compiled").bfloat16()(x)
