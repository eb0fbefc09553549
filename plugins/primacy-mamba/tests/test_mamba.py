"""MambaBackbone: the backbone contract, Δt as DtTracker records it, the kernel choice, and training through primacy."""

import json
import logging
from pathlib import Path

import numpy as np
import primacy.checks
import primacy.native
import pytest
import torch
import torch.nn.functional as F
from mambapy.mamba import MambaConfig, ResidualBlock
from primacy import registry
from primacy.analysis.behaviour.cmr.grid import CMRGrid
from primacy.analysis.heads.ablation import ablation_study, icl_scores, repeated_tokens
from primacy.analysis.heads.analysis import analyze_heads
from primacy.analysis.heads.model import head_model
from primacy.errors import UsageError
from primacy.models.language import LanguageModel
from primacy.models.lists import SequenceModel
from primacy.tasks.prompts import repeated_prompt
from primacy.tasks.verification import VerificationTask
from primacy.testing import check_backbone, check_influence, check_model, fixed_batch_losses, tiny_fit, tiny_settings

import primacy_mamba.backbone
import primacy_mamba.block
import primacy_mamba.chunked
import primacy_mamba.compiled
import primacy_mamba.scan
from primacy_mamba import MambaBackbone
from primacy_mamba.compiled_fma import fma_native

QUICKSTART = Path(__file__).resolve().parents[3] / "configs" / "quickstart-mamba.yaml"


@pytest.mark.parametrize("kwargs", [{}, {"n_layers": 2, "d_state": 4, "expand": 1, "dt_rank": 2},
                                    {"scan": "sequential", "d_conv": 2}, {"scan": "chunked"}, {"scan": "compiled"}])
def test_contract(kwargs):
    check_backbone(MambaBackbone, **kwargs)


@pytest.mark.parametrize("scan", ["recurrent", "chunked", "compiled", "parallel"])
def test_each_scan_matches_the_sequential_reference_with_its_gradients_in_float64(scan, monkeypatch):
    monkeypatch.setattr(primacy_mamba.scan, "CACHE_ELEMENTS", 2 * 13 * 16 * 16)  # slices of 2 sequences: 2 and 1
    monkeypatch.setattr(primacy_mamba.scan, "STEP_ELEMENTS", 1)
    monkeypatch.setattr(primacy_mamba.chunked, "CACHE_ELEMENTS", 2 * 13 * 16 * 16)  # the same
    monkeypatch.setattr(primacy_mamba.chunked, "STEP_ELEMENTS", 1)
    torch.manual_seed(0)
    fast = MambaBackbone(d_model=8, n_layers=2, scan=scan).double()
    slow = MambaBackbone(d_model=8, n_layers=2, scan="sequential").double()
    slow.load_state_dict(fast.state_dict())
    x = torch.randn(3, 13, 8, dtype=torch.float64)  # 13: the parallel scan pads to 16
    weights = torch.randn(3, 13, 8, dtype=torch.float64)
    grads = [torch.autograd.grad((model(x) * weights).sum(), list(model.parameters())) for model in (fast, slow)]
    torch.testing.assert_close(fast(x), slow(x), rtol=0, atol=1e-10)
    for name, g_fast, g_slow in zip(dict(fast.named_parameters()), *grads):
        torch.testing.assert_close(g_fast, g_slow, rtol=0, atol=1e-10, msg=name)


def test_the_recurrent_scans_backward_is_its_forwards_derivative():
    torch.manual_seed(0)
    batch, length, channels, n = 3, 6, 4, 3
    u, b, c = (torch.randn(batch, length, k, dtype=torch.float64) for k in (channels, n, n))
    dt = torch.rand(batch, length, channels, dtype=torch.float64)
    a, d = -torch.rand(channels, n, dtype=torch.float64), torch.randn(channels, dtype=torch.float64)
    inputs = [t.requires_grad_() for t in (u, dt, a, b, c, d)]
    assert torch.autograd.gradcheck(primacy_mamba.scan.selective_scan, inputs)


def scan_inputs(batch: int, length: int, channels: int, n: int, dtype: torch.dtype = torch.float64,
                decay: float = 1.0) -> list[torch.Tensor]:
    """u, Δ (B, T, E), A (E, N), B, C (B, T, N), D (E,) for selective_scan, requiring gradients; ``decay``
    scales |A| (Δ in (0, 1), A in [-decay · N, 0))."""
    u, b, c = (torch.randn(batch, length, k, dtype=dtype) for k in (channels, n, n))
    dt = torch.rand(batch, length, channels, dtype=dtype)
    a = -decay * n * torch.rand(channels, n, dtype=dtype).clamp_min(1e-3)
    d = torch.randn(channels, dtype=dtype)
    return [t.requires_grad_() for t in (u, dt, a, b, c, d)]


def stepped_scan(u, dt, a, b, c, d):
    """The scan one position at a time, h_t = exp(Δ_t A) h_{t-1} + Δ_t u_t B_t, y_t = h_t C_t + D u_t: the
    reference, (B, T, E)."""
    h = u.new_zeros(u.shape[0], u.shape[2], a.shape[1])  # B E N
    ys = []
    for t in range(u.shape[1]):
        h = torch.exp(dt[:, t, :, None] * a) * h + (dt[:, t] * u[:, t])[..., None] * b[:, t, None, :]
        ys.append((h * c[:, t, None, :]).sum(-1) + d * u[:, t])  # B E
    return torch.stack(ys, 1)


def outputs_and_gradients(scan, inputs: list[torch.Tensor], **kwargs) -> tuple[torch.Tensor, ...]:
    """scan(*inputs) and the gradients of a random weighting of it with respect to every input."""
    y = scan(*inputs, **kwargs)
    weights = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).to(y.dtype)
    return (y, *torch.autograd.grad((y * weights).sum(), inputs))


@pytest.mark.parametrize("length,chunk", [(13, 4), (16, 4), (1, None), (1, 3), (7, 1), (9, 20), (64, None), (23, 5),
                                          (200, None)])
def test_the_chunked_scan_equals_the_recurrent_one_with_every_gradient_in_float64(length, chunk, monkeypatch):
    """T a multiple of the chunk or not, a single position, chunks of one, one chunk longer than T, the default
    (one chunk at T = 64, 14 at T = 200), and batch slices of 2 sequences (2 and 1)."""
    size = chunk or primacy_mamba.chunked.default_chunk(length)
    monkeypatch.setattr(primacy_mamba.chunked, "CACHE_ELEMENTS", 2 * -(-length // size) * size * 5 * 3)
    monkeypatch.setattr(primacy_mamba.chunked, "STEP_ELEMENTS", 1)
    torch.manual_seed(0)
    inputs = scan_inputs(3, length, 5, 3)
    chunked = outputs_and_gradients(primacy_mamba.chunked.chunked_selective_scan, inputs, chunk=chunk)
    recurrent = outputs_and_gradients(primacy_mamba.scan.selective_scan, inputs)
    for name, fast, slow in zip(["y", "u", "dt", "a", "b", "c", "d"], chunked, recurrent):
        torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-10, msg=name)


def test_the_chunked_scan_is_exact_and_finite_under_extreme_decays():
    """|A|·Δ up to ~50 N = 800 per position, far beyond where exp(-Σ A Δ) overflows float32 (~88) or float64
    (~709) within a chunk: the chunked scan multiplies decays ≤ 1 only, so it matches the stepped reference
    in float64 to 1e-10, gradients included, and in float32 to 1e-5 of each output's scale (measured: ~2e-7, as
    the recurrent scan)."""
    torch.manual_seed(0)
    inputs = scan_inputs(2, 37, 4, 16, decay=50.0)
    inputs[1].data[:, ::5] *= 1e-4  # some positions that barely decay, so the states are not simply reset
    chunked = outputs_and_gradients(primacy_mamba.chunked.chunked_selective_scan, inputs, chunk=9)
    stepped = outputs_and_gradients(stepped_scan, inputs)
    for name, fast, slow in zip(["y", "u", "dt", "a", "b", "c", "d"], chunked, stepped):
        torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-10, msg=name)
    single = [x.detach().float().requires_grad_() for x in inputs]
    chunked32 = outputs_and_gradients(primacy_mamba.chunked.chunked_selective_scan, single, chunk=9)
    for name, fast, slow in zip(["y", "u", "dt", "a", "b", "c", "d"], chunked32, stepped):
        assert torch.isfinite(fast).all(), name
        torch.testing.assert_close(fast.double(), slow, rtol=1e-5, atol=1e-5 * slow.abs().max().item(), msg=name)


def test_the_chunked_scans_backward_is_its_forwards_derivative():
    torch.manual_seed(0)
    inputs = scan_inputs(2, 7, 3, 2)
    assert torch.autograd.gradcheck(lambda *x: primacy_mamba.chunked.chunked_selective_scan(*x, chunk=3), inputs)


def test_a_chunk_below_one_is_refused_in_one_line():
    with pytest.raises(UsageError, match=r"^chunk=0 is invalid: it must be at least 1") as err:
        primacy_mamba.chunked.chunked_selective_scan(*scan_inputs(1, 4, 2, 2), chunk=0)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("length,decay", [(1, 1.0), (13, 1.0), (64, 1.0), (37, 50.0)])
def test_the_compiled_scan_equals_the_stepped_one_with_every_gradient(length, decay):
    """float64 to 1e-10 (the C library's exp), float32 to 1e-5 of each output's scale (its own exp, ≤ 3e-7 off);
    |A|·Δ up to ~800 per position at decay 50, where float32's exp is clamped at e^-87 and underflows nothing."""
    torch.manual_seed(0)
    inputs = scan_inputs(3, length, 5, 16, decay=decay)
    inputs[1].data[:, ::5] *= 1e-4  # some positions that barely decay, so the states are not simply reset
    compiled = outputs_and_gradients(primacy_mamba.compiled.compiled_selective_scan, inputs)
    stepped = outputs_and_gradients(stepped_scan, inputs)
    for name, fast, slow in zip(["y", "u", "dt", "a", "b", "c", "d"], compiled, stepped):
        torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-10, msg=name)
    single = [x.detach().float().requires_grad_() for x in inputs]
    compiled32 = outputs_and_gradients(primacy_mamba.compiled.compiled_selective_scan, single)
    for name, fast, slow in zip(["y", "u", "dt", "a", "b", "c", "d"], compiled32, stepped):
        assert fast.dtype == torch.float32 and torch.isfinite(fast).all(), name
        torch.testing.assert_close(fast.double(), slow, rtol=1e-5, atol=1e-5 * slow.abs().max().item(), msg=name)


def test_the_compiled_scans_backward_is_its_forwards_derivative():
    torch.manual_seed(0)
    assert torch.autograd.gradcheck(primacy_mamba.compiled.compiled_selective_scan, scan_inputs(2, 7, 3, 5))


@pytest.mark.slow  # 10-30 s of compiling
@pytest.mark.parametrize("scan", ["compiled", "chunked", "compiled_fma"])
def test_the_backbone_under_torch_compile_gives_its_eager_numbers(scan):
    """primacy's CompileBackbone compiles the backbone: the C++ scans run as they are (torch.compile does not trace
    them; compiled_fma's RMSNorm neither), the chunked one is compiled; all give the eager forward and gradient in
    float64."""
    torch.manual_seed(0)
    backbone = MambaBackbone(d_model=8, n_layers=1, d_state=4, scan=scan).double()
    x = torch.randn(2, 12, 8, dtype=torch.float64, requires_grad=True)
    eager = backbone(x)
    (grad,) = torch.autograd.grad(eager.square().sum(), x)
    backbone.compile()
    fast = backbone(x)
    (fast_grad,) = torch.autograd.grad(fast.square().sum(), x)
    torch.testing.assert_close(fast, eager, rtol=0, atol=1e-12)
    torch.testing.assert_close(fast_grad, grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_compiled_scan_gives_the_same_bits_on_any_number_of_threads(dtype):
    """The batch is split across threads; each sequence's numbers, and A's gradient summed in batch order, do not
    depend on the split."""
    torch.manual_seed(0)
    inputs = scan_inputs(5, 11, 6, 4, dtype=dtype)
    threads = torch.get_num_threads()
    try:
        results = []
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            results.append(outputs_and_gradients(primacy_mamba.compiled.compiled_selective_scan, inputs))
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        for name, one, many in zip(["y", "u", "dt", "a", "b", "c", "d"], results[0], other):
            assert torch.equal(one, many), name


@pytest.fixture
def no_library(tmp_path, monkeypatch):
    """An empty kernel cache, and no library built in this process; the real one is found again afterwards."""
    monkeypatch.setenv("PRIMACY_KERNEL_CACHE", str(tmp_path / "kernels"))
    primacy_mamba.compiled.library.cache_clear()
    yield tmp_path / "kernels"
    primacy_mamba.compiled.library.cache_clear()


@pytest.mark.slow
def test_the_compiled_scan_is_built_once_into_the_cache_and_then_loaded(no_library, monkeypatch):
    """The whole scan built from scratch, 14 s (slow: the default tier checks the same with a tiny source,
    tests/native/test_native.py, and every test of a compiled scan loads this build)."""
    library = primacy_mamba.compiled.library()
    [built] = no_library.iterdir()  # the library alone: no partial file is left beside it
    assert built.name.startswith("primacy_scan_") and built.suffix == ".so"
    assert library.primacy_scan_abi() == primacy_mamba.compiled.ABI
    primacy_mamba.compiled.library.cache_clear()
    monkeypatch.setattr(primacy.native.subprocess, "run", lambda *args, **kwargs: pytest.fail("rebuilt"))
    MambaBackbone(scan="compiled")  # a new process: finds the build in the cache


@pytest.mark.parametrize("compiler,message", [
    ("no-such-c++", r"^scan='compiled' needs a C\+\+ compiler and 'no-such-c\+\+' \(CXX\) is not one on PATH: install "
                    r"one \(g\+\+ or clang\+\+\) or use scan='chunked'$"),
    ("false", r"^scan='compiled': false failed to build scan.cpp: exit code 1; use scan='chunked'$"),
])
def test_a_machine_without_a_working_compiler_refuses_the_compiled_scan_in_one_line(no_library, monkeypatch, compiler,
                                                                                   message):
    monkeypatch.setenv("CXX", compiler)
    with pytest.raises(UsageError, match=message) as err:
        MambaBackbone(scan="compiled")
    assert "\n" not in str(err.value)
    assert not no_library.exists() or not list(no_library.iterdir()), "no partial library is left behind"


def test_a_library_that_cannot_be_loaded_is_refused_in_one_line(no_library):
    no_library.mkdir(parents=True)
    primacy_mamba.compiled.library_path().write_text("not a shared object")  # found in the cache: not built again
    with pytest.raises(UsageError, match=r"^scan='compiled': .* cannot be loaded \(.*\): set PRIMACY_KERNEL_CACHE to a "
                                         r"directory that allows it, or use scan='chunked'$") as err:
        MambaBackbone(scan="compiled")
    assert "\n" not in str(err.value)


def test_the_compiled_scan_refuses_other_dtypes_in_one_line():
    inputs = [x.detach().half() for x in scan_inputs(1, 4, 2, 2)]
    with pytest.raises(UsageError, match=r"^scan='compiled' runs on float32 or float64 CPU tensors of one dtype, not "
                                         r"torch.float16 on cpu: use scan='chunked' \(or kernel='fused' on a GPU\)$"):
        primacy_mamba.compiled.compiled_selective_scan(*inputs)
    mixed = [x.detach() for x in scan_inputs(1, 4, 2, 2)]
    mixed[3] = mixed[3].float()  # B in float32 beside float64: the loops would read its bytes as doubles
    with pytest.raises(UsageError, match=r"not torch.float32 on cpu, torch.float64 on cpu: use scan='chunked'"):
        primacy_mamba.compiled.compiled_selective_scan(*mixed)


@pytest.mark.parametrize("kwargs", [{"n_layers": 2}, {"d_conv": 1, "expand": 1}, {"scan": "sequential", "d_state": 3}])
def test_stepping_is_the_scan_over_the_whole_sequence_in_float64(kwargs):
    torch.manual_seed(0)
    model = MambaBackbone(d_model=8, **kwargs).double().eval()
    x = torch.randn(3, 11, 8, dtype=torch.float64)
    state, steps = model.initial_state(3), []
    for x_t in x.unbind(1):
        y_t, state = model.step(x_t, state)
        steps.append(y_t)
    torch.testing.assert_close(torch.stack(steps, 1), model(x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kwargs", [{"n_layers": 2}, {"scan": "sequential", "d_state": 3, "d_conv": 2, "expand": 1}])
def test_the_influence_is_the_selective_scan_unrolled_exactly_in_float64(kwargs):
    """Σ_s α[t, s] u_s + D u_t rebuilds the scan's output before the gate to 1e-10 (measured: ~2e-16); the first
    layer's, gated and projected, is what forward adds to the residual stream; α follows content; dt() is untouched."""
    torch.manual_seed(0)
    model = MambaBackbone(d_model=8, kernel="pure", **kwargs).double()
    x = torch.randn(3, 13, 8, dtype=torch.float64)
    model(x)
    dt = model.dt()
    layers = check_influence(model, x)  # reconstruction within 1e-10, zero above the diagonal
    assert all(torch.equal(dt[name], model.dt()[name]) for name in dt)
    inner = model.config.d_inner
    assert len(layers) == len(model.layers) and layers[0].unit == "inner channel"
    assert layers[0].weights.shape == (3, inner, 13, 13) and layers[0].values.shape == (3, inner, 13)
    first = model.layers[0]
    z = first.mixer._scan_inputs(first.norm(x))[1]  # B T E·D
    mixed = first.mixer.out_proj(layers[0].mixed().transpose(1, 2) * F.silu(z))  # B T D
    torch.testing.assert_close(x + mixed, first(x), rtol=0, atol=1e-12)
    other = model.influence(torch.randn(3, 13, 8, dtype=torch.float64))
    assert not torch.allclose(other[0].weights, layers[0].weights)  # selective: content moves it


def test_the_influence_refuses_a_length_beyond_memory_in_one_line(monkeypatch):
    monkeypatch.setattr(primacy.checks, "memory_bytes", lambda: 2**20)
    with pytest.raises(UsageError, match="batch=3, length=200 need .* GiB for the Mamba influence's decays"):
        MambaBackbone(d_model=8).influence(torch.randn(3, 200, 8))


def test_free_recall_decodes_the_same_lists_stepped_as_with_a_pass_per_item():
    """FreeRecallModel steps a backbone that has step(); the same model without it runs L passes (primacy.testing's
    WithoutStep): the recalls are the same (float64, so no near tie flips)."""
    import copy

    from primacy.models.free_recall import FreeRecallModel
    from primacy.testing import WithoutStep

    torch.manual_seed(0)
    n, k = 6, 20
    stepped = FreeRecallModel(MambaBackbone(d_model=16, n_layers=2), vocab_size=k + 2, n_items=n).double().eval()
    passes = copy.deepcopy(stepped)
    passes.backbone = WithoutStep(passes.backbone)
    study = torch.rand(5, k).argsort(1)[:, :n]  # B L
    index = torch.arange(5)
    assert torch.equal(stepped.recall(study, index), passes.recall(study, index))


def direct_dt(model: MambaBackbone, x: torch.Tensor) -> torch.Tensor:
    """Δt of layer 0 recomputed from its parameters: softplus(dt_proj(x_proj(silu(conv(in_proj(norm(x))))))),
    averaged over batch and time (E·D,)."""
    mixer, rank = model.layers[0].mixer, model.config.dt_rank
    h = model.layers[0].norm(x)  # B T D
    u = h @ mixer.in_proj.weight[: mixer.config.d_inner].T  # B T E·D: the branch that is convolved
    u = F.conv1d(F.pad(u.transpose(1, 2), (mixer.config.d_conv - 1, 0)), mixer.conv1d.weight, mixer.conv1d.bias,
                 groups=mixer.config.d_inner)  # B E·D T, causal
    dt_low = F.silu(u).transpose(1, 2) @ mixer.x_proj.weight[:rank].T  # B T R
    return F.softplus(dt_low @ mixer.dt_proj.weight.T + mixer.dt_proj.bias).mean(dim=(0, 1))  # E·D


def test_dt_is_the_mean_input_dependent_step_of_the_last_pass():
    torch.manual_seed(0)
    model = MambaBackbone(d_model=16, n_layers=2)
    before = model.dt()
    assert list(before) == ["layer0", "layer1"] and before["layer0"].shape == (32,)
    assert torch.allclose(before["layer0"], F.softplus(model.layers[0].mixer.dt_proj.bias.detach()))
    assert ((before["layer0"] >= 1e-3 * 0.99) & (before["layer0"] <= 0.1 * 1.01)).all(), "the dt_min, dt_max range"

    x = torch.randn(4, 10, 16)
    model(x)
    after = model.dt()
    assert torch.allclose(after["layer0"], direct_dt(model, x), atol=1e-6)
    assert not torch.allclose(after["layer0"], before["layer0"]), "Δt depends on the input"
    assert not after["layer0"].requires_grad and (after["layer1"] > 0).all()
    model(2 * x)
    assert torch.allclose(model.dt()["layer0"], direct_dt(model, 2 * x), atol=1e-6), "the last pass only"


AUTO = "compiled_fma" if fma_native() else "compiled_conv"  # auto's scan on this machine's CPU


def test_auto_uses_the_compiled_fma_scan_where_the_cpu_fuses_multiply_adds_and_says_so_once(caplog):
    model = MambaBackbone(d_model=8)
    with caplog.at_level(logging.INFO, logger="primacy_mamba"):
        model(torch.randn(1, 4, 8))
        model(torch.randn(1, 4, 8))
    records = [r for r in caplog.records if r.name == "primacy_mamba"]
    assert len(records) == 1
    message = records[0].getMessage()
    assert f"compiled {AUTO} scan" in message and "on cpu" in message and "C++ compiler built" in message
    assert ("this CPU fuses multiply-adds" if fma_native() else "this CPU has no fused multiply-add") in message


def test_auto_takes_compiled_conv_where_the_cpu_has_no_fused_multiply_add(monkeypatch):
    monkeypatch.setattr(primacy_mamba.backbone, "fma_native", lambda: False)
    model = MambaBackbone(d_model=8)
    assert model.scan == "compiled_conv" and "no fused multiply-add" in model._scan_reason


def test_auto_on_a_gpu_without_the_fused_kernel_runs_the_chunked_scan_and_records_it():
    # the compiled scans are CPU loops: on a GPU (here only named: this machine may have none) auto takes chunked
    model, explicit = MambaBackbone(d_model=8, n_layers=2), MambaBackbone(d_model=8, scan="compiled")
    assert model.scan == AUTO
    model.scan_on(torch.device("cuda"))
    explicit.scan_on(torch.device("cuda"))
    assert model.scan == "chunked" and {layer.mixer.scan for layer in model.layers} == {"chunked"}
    assert model.state_dict()["_extra_state"] == {"scan": "chunked"}
    assert explicit.scan == "compiled", "an explicit scan is left as asked"
    model.scan_on(torch.device("cpu"))
    assert model.scan == "chunked", "a run stays on the scan it runs"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_fused_without_mamba_ssm_or_cuda_is_refused_in_one_line():
    with pytest.raises(UsageError, match=r"^kernel='fused' needs (mamba_ssm|a CUDA device).*use kernel='auto' or "
                                         r"'pure'$") as err:
        MambaBackbone(kernel="fused")
    assert "\n" not in str(err.value)


def reference_selective_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus):
    """mamba_ssm's selective_scan_fn, step by step: u, delta, z (B, E·D, T); B, C (B, N, T) -> (B, E·D, T)."""
    assert delta_softplus
    delta = F.softplus(delta + delta_bias[:, None])  # B E·D T
    h = torch.zeros(u.shape[0], u.shape[1], A.shape[1], dtype=u.dtype)  # B E·D N
    ys = []
    for t in range(u.shape[2]):
        h = torch.exp(delta[:, :, t, None] * A) * h + delta[:, :, t, None] * B[:, None, :, t] * u[:, :, t, None]
        ys.append((h * C[:, None, :, t]).sum(-1) + D * u[:, :, t])  # B E·D
    return torch.stack(ys, dim=-1) * F.silu(z)  # B E·D T


def test_fused_path_passes_the_kernel_what_it_expects(monkeypatch):
    """With a step-by-step stand-in for mamba_ssm's kernel, the fused path gives the pure path's output and Δt:
    the layouts, the Δt bias and the gate are handed over correctly, with the same parameters."""
    torch.manual_seed(0)
    model = MambaBackbone(d_model=8, n_layers=2)
    x = torch.randn(2, 9, 8)
    pure, pure_dt = model(x), model.dt()
    monkeypatch.setattr(primacy_mamba.block, "fused_scan", lambda: reference_selective_scan)
    monkeypatch.setattr(primacy_mamba.backbone, "use_fused", lambda kernel, device: (True, "test"))
    fused = model(x)
    assert torch.allclose(fused, pure, atol=1e-5)
    assert all(torch.allclose(model.dt()[k], pure_dt[k]) for k in pure_dt)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"d_model": 0}, "d_model=0 is invalid: it must be at least 1"),
        ({"n_layers": 0}, "n_layers=0 is invalid: it must be at least 1"),
        ({"d_state": 0}, "d_state=0 is invalid: it must be at least 1"),
        ({"d_conv": 0}, "d_conv=0 is invalid: it must be at least 1"),
        ({"expand": 0}, "expand=0 is invalid: it must be at least 1"),
        ({"dt_rank": 0}, "dt_rank=0 is invalid: it must be at least 1"),
        ({"dt_min": 0.2, "dt_max": 0.1}, "dt_min=0.2, dt_max=0.1 is not a valid Δt range"),
        ({"dt_min": 0.0}, "dt_min=0.0, dt_max=0.1 is not a valid Δt range"),
        ({"kernel": "cuda"}, "kernel='cuda' is unknown: choose one of 'auto', 'pure', 'fused'"),
        ({"scan": "fast"}, "scan='fast' is unknown: choose one of 'auto', 'recurrent', 'chunked', 'compiled', "
                           "'compiled_mixer', 'compiled_conv', 'compiled_fma', 'parallel', 'sequential'"),
    ],
)
def test_bad_arguments_are_rejected(kwargs, message):
    with pytest.raises(UsageError, match=message):
        MambaBackbone(**kwargs)


def test_without_a_compiler_auto_falls_back_to_the_chunked_scan_and_says_why(no_library, monkeypatch, caplog):
    monkeypatch.setenv("CXX", "no-such-compiler")
    model = MambaBackbone(d_model=8)
    assert model.scan == "chunked" and all(layer.mixer.scan == "chunked" for layer in model.layers)
    with caplog.at_level(logging.INFO, logger="primacy_mamba"):
        model(torch.randn(1, 4, 8))
    [record] = [r for r in caplog.records if r.name == "primacy_mamba"]
    assert "pure-PyTorch chunked scan" in record.getMessage() and "cannot be built here" in record.getMessage()


def test_a_checkpoint_resumes_on_the_scan_it_was_trained_on_under_auto(tmp_path, monkeypatch):
    trained = MambaBackbone(d_model=8, scan="chunked")
    state = trained.state_dict()
    assert state["_extra_state"] == {"scan": "chunked"}
    resumed = MambaBackbone(d_model=8)  # auto: compiled_fma here (or compiled_conv)
    resumed.load_state_dict(state)
    assert resumed.scan == "chunked" and all(layer.mixer.scan == "chunked" for layer in resumed.layers)
    x = torch.randn(2, 5, 8)
    assert torch.equal(resumed(x), trained(x))  # the same path, the same bits
    explicit = MambaBackbone(d_model=8, scan="recurrent")
    explicit.load_state_dict(state)  # an explicit setting is honoured
    assert explicit.scan == "recurrent"
    compiled_state = MambaBackbone(d_model=8, scan="compiled_mixer").state_dict()
    # a machine without the build or a compiler (the steps above load the machine's build, not build one anew)
    monkeypatch.setenv("PRIMACY_KERNEL_CACHE", str(tmp_path / "kernels"))
    monkeypatch.setenv("CXX", "no-such-compiler")
    primacy_mamba.compiled.library.cache_clear()
    try:
        elsewhere = MambaBackbone(d_model=8)  # auto on a machine without a compiler: chunked
        with pytest.raises(UsageError, match=r"^this checkpoint was trained with scan='compiled_mixer', which cannot "
                                             r"run here \(scan='compiled' needs a C\+\+ compiler") as err:
            elsewhere.load_state_dict(compiled_state)
    finally:
        primacy_mamba.compiled.library.cache_clear()  # the machine's build is found again afterwards
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("scan", ["compiled_mixer", "compiled_conv"])
def test_a_run_on_an_older_default_resumes_on_it_under_auto(scan):
    """Runs of primacy-mamba 0.3's default (compiled_mixer, the convolution in PyTorch) and 0.4's (compiled_conv) keep
    their path and bits after auto became compiled_fma (fused multiply-adds, rounding otherwise)."""
    torch.manual_seed(0)
    trained = MambaBackbone(d_model=8, scan=scan)
    resumed = MambaBackbone(d_model=8)
    assert resumed.scan == AUTO
    resumed.load_state_dict(trained.state_dict())
    assert resumed.scan == scan and all(layer.mixer.scan == scan for layer in resumed.layers)
    x = torch.randn(2, 5, 8)
    assert torch.equal(resumed(x), trained(x))


def test_a_state_dict_from_before_auto_still_loads_strictly():
    model = MambaBackbone(d_model=8, scan="chunked")
    old = {key: value for key, value in model.state_dict().items() if key != "_extra_state"}
    fresh = MambaBackbone(d_model=8)
    fresh.load_state_dict(old)
    assert fresh.scan == AUTO  # its config names the scan it ran on
    torch.testing.assert_close(fresh.state_dict()["norm_f.weight"], old["norm_f.weight"])


def test_state_dict_uses_mambapys_names():
    """A layer's parameters are named as in mambapy's ResidualBlock (and mamba_ssm's Mamba mixer)."""
    model = MambaBackbone(d_model=8)
    block = ResidualBlock(MambaConfig(d_model=8, n_layers=1))
    assert {k.removeprefix("layers.0.") for k in model.state_dict() if k.startswith("layers.0.")} == set(
        block.state_dict())


def test_the_entry_point_resolves():
    assert registry.get("MambaBackbone") is MambaBackbone
    row = next(r for r in registry.describe() if r["name"] == "MambaBackbone")
    assert row["distribution"] == "primacy-mamba" and row["entry_point"] == "primacy_mamba.backbone:MambaBackbone"


def test_sequence_model_fits_a_fixed_batch():
    torch.manual_seed(0)
    losses = fixed_batch_losses(MambaBackbone(d_model=16))
    assert losses[-1] < 0.5 * losses[0]


def test_a_sequence_model_over_mamba_keeps_the_model_contract():
    task = VerificationTask(**tiny_settings(VerificationTask))
    check_model(SequenceModel, task, backbone=MambaBackbone(d_model=8))


@pytest.mark.skipif(not QUICKSTART.is_file(), reason="needs a primacy checkout's configs/")
def test_quickstart_config_trains_and_records_dt(tmp_path):
    """The config's DtTracker records each channel's mean Δt; its TokenDtTracker the Δt each position takes, which a
    selective scan sets from the token."""
    run = tiny_fit(tmp_path / "run", None, None, None, config=QUICKSTART, steps=6,
                   data_settings={"n_items": 8, "vocab_size": 64, "batch_size": 8, "num_held_out": 16,
                                  "num_test_sets": 2, "num_val_sets": 2},
                   backbone_settings={"d_model": 16},
                   args=["--trainer.val_check_interval", "3",  # the last callback, the config's TokenDtTracker:
                         "--trainer.callbacks.every_n_steps", "3", "--trainer.callbacks.sequences", "4"])
    summary = json.loads((run / "results" / "summary.json").read_text())
    assert summary["backbone"] == "MambaBackbone" and summary["n_items"] == 8
    history = np.load(run / "results" / "dt_history.npz")
    assert list(history["layers"]) == ["layer0"] and list(history["channels"]) == [32]
    assert history["dt"].shape[1] == 32 and (history["dt"] > 0).all() and len(history["steps"]) >= 2
    assert not np.allclose(history["dt"][0], history["dt"][-1]), "Δt follows the inputs and the training"
    by_token = np.load(run / "results" / "token_dt.npz")
    assert by_token["steps"].tolist() == [0, 3, 6] and by_token["dt"].shape == (3, 16, 32)  # 8 study + 8 queries
    assert not np.allclose(by_token["dt"][-1], by_token["dt"][-1, :1]), "a selective Δt differs between positions"
    model = SequenceModel.load_from_checkpoint(run / "checkpoints" / "last.ckpt", map_location="cpu").eval()
    with torch.no_grad():
        expected = model.backbone.dt_per_token(model.embedding(torch.as_tensor(by_token["tokens"])))["layer0"]
    np.testing.assert_allclose(by_token["dt"][-1], expected.mean(0).numpy(), rtol=1e-5)
    assert (run / "results" / "token_dt.png").is_file()


def test_ablating_an_inner_channel_is_zeroing_its_column_of_the_output_projection():
    """The gated scan output of an ablated inner channel is zero, so the output projection does not read it; stepped
    decoding (free recall's path) ablates it too."""
    torch.manual_seed(0)
    model, x = MambaBackbone(d_model=8, n_layers=2, d_state=4).double(), torch.randn(2, 7, 8, dtype=torch.float64)
    units = [(0, 3), (1, 0), (1, 15)]
    with torch.no_grad(), model.ablate(units):
        ablated = model(x)
        state, steps = model.initial_state(2), []
        for x_t in x.unbind(1):
            y_t, state = model.step(x_t, state)
            steps.append(y_t)
    with torch.no_grad():
        for layer, channel in units:
            model.layers[layer].mixer.out_proj.weight[:, channel] = 0.0
        assert torch.allclose(ablated, model(x), rtol=0, atol=1e-14)
    assert torch.allclose(torch.stack(steps, 1), ablated, rtol=0, atol=1e-12)
    with pytest.raises(UsageError, match=r"inner channel \(layer, inner channel\)=\(2, 0\) is invalid: layer must "
                                         r"lie in \[0, 1\] and inner channel in \[0, 15\]"), model.ablate([(2, 0)]):
        pass


def test_the_head_analyses_read_mamba_inner_channels_as_heads():
    """analyze icl's and analyze ablation's code on a Mamba language model: inner channels merged four to a head,
    their influence depends on the tokens (a selective scan), and ablating a head is zeroing its channels' columns
    of the output projection."""
    torch.manual_seed(0)
    model = LanguageModel(MambaBackbone(d_model=8, n_layers=2, d_state=4), vocab_size=30).eval()
    heads = head_model(model, group=4)
    assert (heads.n_layers, heads.n_heads, heads.unit) == (2, 4, "inner channel")
    prompts = repeated_prompt(11, 30, 0, 2, torch.Generator().manual_seed(0))  # 2 23
    _, weights = heads.attention(prompts, [0, 1])  # 2 B 4 T T
    assert not torch.allclose(weights[:, 0], weights[:, 1]), "a selective scan's influence depends on the tokens"
    analysis = analyze_heads(heads, prompts, 11, CMRGrid.paper())
    assert len(analysis.heads) == 8 and np.isfinite(analysis.lag_crps).all()
    tokens = repeated_tokens(11, 2, 30, 0, 3, torch.Generator().manual_seed(1))
    result = ablation_study(heads, tokens, [(h.layer, h.head) for h in analysis.by_induction()], fraction=0.25,
                            n_random=2, resamples=100)
    assert result["k"] == 2
    with heads.ablate_heads([(1, 2)]):
        ablated = icl_scores(heads, tokens, 11, 22)
    with torch.no_grad():
        model.backbone.layers[1].mixer.out_proj.weight[:, 8:12] = 0.0
    torch.testing.assert_close(ablated, icl_scores(heads, tokens, 11, 22), rtol=0, atol=1e-6)


def test_its_state_has_a_fixed_size_whatever_the_length():
    """The atlas's state-size column: ``Backbone.state_size`` measured by stepping, the same after 3 tokens as after
    10, with the training flag put back."""
    model = MambaBackbone(d_model=8)
    assert model.state_size(3) == model.state_size(10) > 0
    assert model.training
