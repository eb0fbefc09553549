"""XLSTMBackbone: the backbone contract, stepping, the mLSTM blocks' exact influence, context_length from the task, the
sLSTM backend, training through primacy."""

import copy
import json
import logging
import signal
import sys
from functools import partial
from pathlib import Path

import pytest
import torch
from primacy import registry
from primacy.analysis.behaviour.cmr.grid import CMRGrid
from primacy.analysis.heads.ablation import ablation_study, repeated_tokens
from primacy.analysis.heads.analysis import analyze_heads
from primacy.analysis.heads.model import head_model
from primacy.errors import UsageError
from primacy.models.free_recall import FreeRecallModel
from primacy.models.language import LanguageModel
from primacy.rundir.runs import load_run
from primacy.tasks.free_recall import FreeRecallTask
from primacy.tasks.prompts import repeated_prompt
from primacy.testing import (
    WithoutStep,
    check_backbone,
    check_influence,
    check_model,
    fixed_batch_losses,
    tiny_fit,
    tiny_settings,
)
from xlstm.blocks.mlstm.backends import parallel_stabilized_simple, recurrent_step_stabilized_simple
from xlstm.blocks.mlstm.cell import mLSTMCell

import primacy_xlstm.backbone
from primacy_xlstm import XLSTMBackbone

QUICKSTART = Path(__file__).resolve().parents[3] / "configs" / "quickstart-xlstm.yaml"
# the quickstart's task at n_items 8, a validation every 3 steps: a tiny run of its config (primacy.testing.tiny_fit)
TINY = {"config": QUICKSTART, "steps": 6, "backbone_settings": {"d_model": 16},
        "data_settings": {"n_items": 8, "vocab_size": 64, "batch_size": 8, "num_held_out": 16, "num_test_sets": 2,
                          "num_val_sets": 2}}
VALIDATE_EVERY_3 = ["--trainer.val_check_interval", "3"]


@pytest.mark.parametrize("kwargs", [{}, {"blocks": ["slstm"], "slstm_heads": 2},
                                    {"blocks": ["mlstm", "mlstm"], "conv_kernel": 2, "context_length": 12},
                                    {"blocks": ["slstm", "mlstm", "slstm"], "mlstm_heads": 8, "proj_factor": 1.0}])
def test_contract(kwargs):
    """With an mLSTM block, check_backbone also checks the exact influence in float64 (check_influence)."""
    check_backbone(XLSTMBackbone, **kwargs)


def stepped(model: XLSTMBackbone, x: torch.Tensor) -> torch.Tensor:
    """(B, T, D) -> (B, T, D) through ``step`` from the initial state."""
    state, steps = model.initial_state(x.shape[0]), []
    for x_t in x.unbind(1):
        y_t, state = model.step(x_t, state)
        steps.append(y_t)
    return torch.stack(steps, 1)


def without_eps(model: XLSTMBackbone) -> XLSTMBackbone:
    """The model with the mLSTM normaliser's eps at 0 in both its parallel and its recurrent form."""
    for module in model.modules():
        if isinstance(module, mLSTMCell):
            module.backend_fn = partial(parallel_stabilized_simple, eps=0.0)
            module.backend_fn_step = partial(recurrent_step_stabilized_simple, eps=0.0)
    return model


@pytest.mark.parametrize("blocks", [["mlstm", "slstm"], ["slstm"], ["mlstm", "mlstm"]])
def test_stepping_is_the_forward_pass_in_float64(blocks):
    """Each block's recurrence stepped from the initial state gives the parallel mLSTM and the sLSTM loop's outputs.

    The mLSTM divides by max(|q·n|, 1) + eps·e^m in unstabilised terms, where m is the stabiliser: the parallel form's
    is the row maximum of the log gate matrix, the recurrent form's starts at m = 0. With xlstm's eps = 1e-6 the two
    agree to about eps; with eps = 0 to float64 rounding."""
    torch.manual_seed(0)
    model = XLSTMBackbone(d_model=16, blocks=blocks).double().eval()
    x = torch.randn(3, 11, 16, dtype=torch.float64)
    torch.testing.assert_close(stepped(model, x), model(x), rtol=0, atol=1e-6)
    exact = without_eps(model)
    torch.testing.assert_close(stepped(exact, x), exact(x), rtol=0, atol=1e-12)


def shaken(model: XLSTMBackbone, scale: float = 0.5) -> XLSTMBackbone:
    """The model with every parameter moved at random: at initialisation the gates' weights are zero (gates that do
    not depend on content); shaken, every term of the mLSTM's weights depends on its input."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn_like(p))
    return model


def mlstm_reference(cell: mLSTMCell, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The parallel mLSTM's normalised weights (B, H, T, T) written out from the cell's inputs q, k, v (B, T, H·d):
    C[t, s] = (q_t·k_s/√d) exp(F[t, s] + ĩ_s - m_t), F[t, s] = Σ_{s<k≤t} log σ(f̃_k) summed term by term, m_t the row
    maximum, divided by max(|Σ_s C[t, s]|, exp(-m_t)) + 1e-6."""
    batch, length, _ = q.shape
    heads = cell.config.num_heads
    gates_in = torch.cat([q, k, v], dim=-1)  # B T 3·H·d
    i_pre, f_pre = cell.igate(gates_in).transpose(1, 2), cell.fgate(gates_in).transpose(1, 2)  # B H T each
    qh, kh = (a.view(batch, length, heads, -1).transpose(1, 2) for a in (q, k))  # B H T d
    steps = torch.arange(length)
    between = (steps[None, :, None] < steps[None, None, :]) & (steps[None, None, :] <= steps[:, None, None])  # t s k
    f_sum = torch.einsum("tsk,bhk->bhts", between.to(q.dtype), torch.nn.functional.logsigmoid(f_pre))  # B H T T
    above = ~torch.ones(length, length, dtype=torch.bool).tril()  # T T: s > t
    log_d = (f_sum + i_pre[:, :, None, :]).masked_fill(above, -torch.inf)  # B H T T
    m = log_d.max(dim=-1, keepdim=True).values  # B H T 1
    c = qh @ kh.transpose(-1, -2) / qh.shape[-1] ** 0.5 * torch.exp(log_d - m)  # B H T T
    return c / (torch.maximum(c.sum(-1, keepdim=True).abs(), torch.exp(-m)) + 1e-6)


def test_the_mlstm_influence_is_xlstms_parallel_form_and_rebuilds_each_cells_output_in_float64():
    """Per mLSTM block (sLSTM blocks skipped), Σ_s weights · v is the cell's parallel output h̃ before its outnorm
    (measured: 0, within 1e-10 asked), the weights are the gated-attention formula written out term by term, and
    the output is what the cell's own forward normalises."""
    torch.manual_seed(0)
    model = shaken(XLSTMBackbone(d_model=16, blocks=["mlstm", "slstm", "mlstm"], mlstm_heads=4, slstm_heads=2))
    model = model.double()
    x = torch.randn(3, 20, 16, dtype=torch.float64)
    inputs, outputs = {}, {}
    cells = {i: block.xlstm.mlstm_cell for i, block in enumerate(model.stack.blocks) if i != 1}
    hooks = [cell.register_forward_pre_hook(lambda _, args, kwargs, i=i: inputs.__setitem__(i, kwargs),
                                            with_kwargs=True) for i, cell in cells.items()]
    hooks += [cell.register_forward_hook(lambda _, args, out, i=i: outputs.__setitem__(i, out))
              for i, cell in cells.items()]
    layers = check_influence(model, x, atol=1e-10)
    for hook in hooks:
        hook.remove()
    assert [layer.unit for layer in layers] == ["head (block 0, mLSTM)", "head (block 2, mLSTM)"]
    for layer, (i, cell) in zip(layers, cells.items()):
        assert layer.weights.shape == (3, 4, 20, 20) and layer.values.shape == layer.output.shape == (3, 4, 20, 16)
        assert (layer.weights.triu(1) == 0).all() and (layer.weights.diagonal(dim1=-2, dim2=-1) != 0).all()
        assert (layer.mixed() - layer.output).abs().max() <= 1e-10
        torch.testing.assert_close(layer.weights, mlstm_reference(cell, **inputs[i]), rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(layer.values, inputs[i]["v"].view(3, 20, 4, 16).transpose(1, 2), rtol=0, atol=0)
        normalised = cell.outnorm(layer.output).transpose(1, 2).reshape(3, 20, -1)  # B T H·d, as the cell does
        torch.testing.assert_close(normalised, outputs[i], rtol=0, atol=0)


def test_the_mlstm_influence_depends_on_content_and_leaves_the_model_as_it_was():
    torch.manual_seed(0)
    model = XLSTMBackbone(d_model=16, blocks=["mlstm"], context_length=12)  # as built: training mode
    x = torch.randn(2, 12, 16)
    [a], [b] = model.influence(x), model.influence(torch.randn(2, 12, 16))
    assert not torch.allclose(a.weights, b.weights) and not a.weights.requires_grad
    assert model.training
    [cell] = [m for m in model.modules() if isinstance(m, mLSTMCell)]
    assert cell.backend_fn is parallel_stabilized_simple
    with pytest.raises(UsageError, match="longer than context_length=12"):
        model.influence(torch.randn(1, 13, 16))


def test_a_stack_without_mlstm_blocks_has_no_influence():
    """sLSTM's recurrence has no exact matrix and is not approximated: the method is absent, so check_backbone and
    analyses that need an exact form see none; asked for anyway, it says why in one line."""
    model = XLSTMBackbone(d_model=8, blocks=["slstm", "slstm"], slstm_heads=2)
    assert not hasattr(model, "influence") and callable(XLSTMBackbone(d_model=8, blocks=["slstm", "mlstm"]).influence)
    with pytest.raises(AttributeError) as err:
        model.influence(torch.randn(1, 4, 8))
    assert str(err.value) == ("XLSTMBackbone with blocks=['slstm', 'slstm'] has no influence: only mLSTM blocks have "
                              "an exact form, and sLSTM blocks are not approximated")


def test_a_step_leaves_the_state_it_was_given_alone():
    """xlstm writes each block's new state into the dict it is given: the backbone hands it a copy, so a decoder may
    step twice from one state."""
    torch.manual_seed(0)
    model = XLSTMBackbone(d_model=16).eval()
    x = torch.randn(2, 16)
    _, state = model.step(x, model.initial_state(2))
    before = dict(state)
    first, _ = model.step(x, state)
    assert state == before
    again, _ = model.step(x, state)
    assert torch.equal(first, again)


def test_free_recall_decodes_the_same_lists_stepped_as_with_a_pass_per_item():
    torch.manual_seed(0)
    n, k = 6, 20
    stepped = FreeRecallModel(XLSTMBackbone(d_model=16), vocab_size=k + 2, n_items=n).double().eval()
    passes = copy.deepcopy(stepped)
    passes.backbone = WithoutStep(passes.backbone)
    study = torch.rand(5, k).argsort(1)[:, :n]  # B L
    index = torch.arange(5)
    assert torch.equal(stepped.recall(study, index), passes.recall(study, index))


def test_an_input_longer_than_context_length_is_refused_in_one_line():
    model = XLSTMBackbone(d_model=8, context_length=10)
    model(torch.randn(1, 10, 8))
    with pytest.raises(UsageError) as err:
        model(torch.randn(1, 11, 8))
    assert str(err.value) == ("an input of length 11 is longer than context_length=10 of XLSTMBackbone: raise "
                              "context_length to at least 11 (or null for no limit)")


def test_without_context_length_the_mask_grows_and_stays_out_of_the_state_dict():
    torch.manual_seed(0)
    model = XLSTMBackbone(d_model=8, blocks=["mlstm"]).double()
    x = torch.randn(2, 30, 8, dtype=torch.float64)
    short = model(x[:, :5])
    torch.testing.assert_close(model(x)[:, :5], short, rtol=0, atol=1e-12)  # causal at any length
    assert not any("causal_mask" in key for key in model.state_dict())
    fixed = XLSTMBackbone(d_model=8, blocks=["mlstm"], context_length=30).double()
    fixed.load_state_dict(model.state_dict())
    torch.testing.assert_close(fixed(x), model(x), rtol=0, atol=0)


def test_the_backend_is_pytorchs_on_cpu_and_logged(caplog):
    with caplog.at_level(logging.INFO, logger="primacy_xlstm"):
        model = XLSTMBackbone(d_model=8)
    assert model.backend == "vanilla"
    [record] = [r for r in caplog.records if r.name == "primacy_xlstm" and "sLSTM" in r.getMessage()]
    if not torch.cuda.is_available():
        assert record.getMessage().startswith(
            "XLSTMBackbone builds the vanilla sLSTM cell (backend='auto' and CUDA is not available) on the "
            f"{model.slstm_loop} loop (slstm_loop='auto' and the ")  # the loop's reason: test_slstm_compiled


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_cuda_without_a_gpu_is_refused_in_one_line():
    with pytest.raises(UsageError) as err:
        XLSTMBackbone(backend="cuda")
    assert str(err.value) == "backend='cuda' needs a CUDA device and none is available: use backend='auto' or 'vanilla'"


def test_auto_falls_back_to_the_pytorch_cell_when_the_kernel_does_not_build(monkeypatch, caplog):
    """With CUDA present but the kernel failing to compile, ``auto`` warns and builds the PyTorch cell; ``cuda`` says
    why in one line."""
    real = primacy_xlstm.backbone.xLSTMBlockStack

    def no_compiler(config):
        if config.slstm_block is not None and config.slstm_block.slstm.backend == "cuda":
            raise RuntimeError("Error building extension 'slstm_HS16BS8NH4NS4': nvcc not found\nlong log ...")
        return real(config)

    monkeypatch.setattr(primacy_xlstm.backbone, "xLSTMBlockStack", no_compiler)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with caplog.at_level(logging.WARNING, logger="primacy_xlstm"):
        model = XLSTMBackbone(d_model=16)
    assert model.backend == "vanilla"
    assert "the sLSTM CUDA kernel did not build (Error building extension" in caplog.text
    with pytest.raises(UsageError) as err:
        XLSTMBackbone(d_model=16, backend="cuda")
    assert str(err.value) == ("backend='cuda': xlstm could not build the sLSTM cell: Error building extension "
                              "'slstm_HS16BS8NH4NS4': nvcc not found")


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"d_model": 0}, "d_model=0 is invalid: it must be at least 1"),
        ({"blocks": ["mlstm", "lstm"]}, "blocks='lstm' is unknown: choose one of 'mlstm', 'slstm'"),
        ({"blocks": []}, "blocks=[] is invalid: give at least one block, 'mlstm' or 'slstm'"),
        ({"d_model": 30, "slstm_heads": 4}, "slstm_heads=4 does not divide d_model=30"),
        ({"d_model": 64, "mlstm_heads": 5}, "mlstm_heads=5 does not divide the mLSTM's inner width 128 "
                                            "(proj_factor=2.0 x d_model=64, rounded up to a multiple of 64)"),
        ({"mlstm_heads": 0}, "mlstm_heads=0 is invalid: it must be at least 1"),
        ({"context_length": 0}, "context_length=0 is invalid: it must be at least 1 (or null for no limit)"),
        ({"conv_kernel": 1}, "conv_kernel=1 is invalid: xlstm's causal convolution needs at least 2"),
        ({"proj_factor": 0.0}, "proj_factor=0.0, ff_proj_factor=1.3 are invalid: both must be positive"),
        ({"backend": "triton"}, "backend='triton' is unknown: choose one of 'auto', 'vanilla', 'cuda'"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(kwargs, message):
    with pytest.raises(UsageError) as err:
        XLSTMBackbone(**kwargs)
    assert str(err.value) == message


def test_the_entry_point_resolves():
    assert registry.get("XLSTMBackbone") is XLSTMBackbone
    row = next(r for r in registry.describe() if r["name"] == "XLSTMBackbone")
    assert row["distribution"] == "primacy-xlstm" and row["entry_point"] == "primacy_xlstm.backbone:XLSTMBackbone"


def test_a_free_recall_model_over_xlstm_keeps_the_model_contract():
    """Free recall steps the backbone through its outputs (xlstm's recurrent step) in validation and test."""
    task = FreeRecallTask(**tiny_settings(FreeRecallTask))
    check_model(FreeRecallModel, task, backbone=XLSTMBackbone(d_model=16))


def test_sequence_model_fits_a_fixed_batch():
    torch.manual_seed(0)
    losses = fixed_batch_losses(XLSTMBackbone(d_model=16))
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.skipif(not QUICKSTART.is_file(), reason="needs a primacy checkout's configs/")
def test_the_quickstart_trains_resumes_bitwise_and_reloads(tmp_path):
    """The quickstart, tiny: a run stopped by Ctrl-C at step 3 and resumed by the same command ends with the weights
    and optimiser state of an uninterrupted run, bit for bit; the run's config sets context_length from the task
    (2L = 16) and the checkpoint reloads with it; mlstm_kernels is never imported."""
    straight = tiny_fit(tmp_path / "straight", None, None, None, **TINY, args=VALIDATE_EVERY_3)
    stop = {"class_path": "primacy.testing.SignalAt", "init_args": {"step": 3, "signum": int(signal.SIGINT)}}
    with pytest.raises(SystemExit) as interrupted:
        tiny_fit(tmp_path / "stopped", None, None, None, **TINY,
                 args=[*VALIDATE_EVERY_3, f"--trainer.callbacks+={json.dumps(stop)}"])
    assert interrupted.value.code == 130
    stopped = tiny_fit(tmp_path / "stopped", None, None, None, **TINY, args=VALIDATE_EVERY_3)
    summary = json.loads((straight / "results" / "summary.json").read_text())
    assert summary["backbone"] == "XLSTMBackbone" and summary["n_items"] == 8
    a, b = (torch.load(run / "checkpoints" / "last.ckpt", weights_only=True) for run in (straight, stopped))
    assert a["global_step"] == b["global_step"] == 6
    assert a["state_dict"].keys() == b["state_dict"].keys()
    record = "backbone._extra_state"  # the sLSTM loop the run trained on: the same, as the run resumed on it
    assert a["state_dict"].pop(record) == b["state_dict"].pop(record)
    assert all(torch.equal(value, b["state_dict"][key]) for key, value in a["state_dict"].items())
    for state_a, state_b in zip(a["optimizer_states"][0]["state"].values(), b["optimizer_states"][0]["state"].values()):
        assert all(torch.equal(state_a[key], state_b[key]) for key in state_a)
    model, _ = load_run(straight / "config.yaml", straight / "checkpoints" / "last.ckpt")
    assert model.backbone.context_length == 16
    assert "mlstm_kernels" not in sys.modules


def test_ablating_an_mlstm_head_is_zeroing_its_share_of_the_output_norm():
    """An ablated head's normalised output is zero: the same as its outnorm scale 1 + weight set to 0; stepping (free
    recall's path) ablates it too, and an sLSTM block has no head to ablate."""
    torch.manual_seed(0)
    model = without_eps(XLSTMBackbone(d_model=16, blocks=["mlstm", "slstm", "mlstm"], mlstm_heads=2, slstm_heads=2,
                                      backend="vanilla").double().eval())  # stepping is then forward exactly
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    units = [(0, 1), (1, 0)]  # head 1 of block 0, head 0 of block 2 (the second mLSTM block)
    with torch.no_grad(), model.ablate(units):
        ablated, steps = model(x), stepped(model, x)
    with torch.no_grad():
        for layer, head in units:
            cell = model._mlstm_cells()[layer][1]
            width = cell.outnorm.ndim // 2
            cell.outnorm.weight[head * width : (head + 1) * width] = -1.0  # scale 1 + weight = 0
        assert torch.allclose(ablated, model(x), rtol=0, atol=1e-12)
    torch.testing.assert_close(steps, ablated, rtol=0, atol=1e-12)
    only_slstm = XLSTMBackbone(d_model=16, blocks=["slstm"], slstm_heads=2, backend="vanilla")
    with pytest.raises(UsageError, match=r"has no mLSTM head to ablate"), only_slstm.ablate([(0, 0)]):
        pass


def test_the_head_analyses_read_mlstm_heads():
    """analyze icl's and analyze ablation's code on an mLSTM language model: each block's heads are its heads."""
    torch.manual_seed(0)
    model = LanguageModel(XLSTMBackbone(d_model=16, blocks=["mlstm", "mlstm"], mlstm_heads=2), vocab_size=30).eval()
    heads = head_model(model)
    assert (heads.n_layers, heads.n_heads) == (2, 2)
    prompts = repeated_prompt(11, 30, 0, 2, torch.Generator().manual_seed(0))
    analysis = analyze_heads(heads, prompts, 11, CMRGrid.paper())
    assert len(analysis.heads) == 4 and torch.isfinite(torch.as_tensor(analysis.lag_crps)).all()
    tokens = repeated_tokens(11, 2, 30, 0, 3, torch.Generator().manual_seed(1))
    result = ablation_study(heads, tokens, [(h.layer, h.head) for h in analysis.by_induction()], fraction=0.5,
                            n_random=2, resamples=100)
    assert result["k"] == 2


def test_its_state_has_a_fixed_size_whatever_the_length():
    """The atlas's state-size column: ``Backbone.state_size`` measured by stepping, the same after 3 tokens as after
    10, with the training flag put back."""
    model = XLSTMBackbone(d_model=8)
    assert model.state_size(3) == model.state_size(10) > 0
    assert model.training
