"""The head analyses on backbones without attention: their units, read through their exact influence
(``InfluenceHeads``), are scored, fitted, ablated and tracked as heads by the same code as the Transformer's."""

import json
import re

import numpy as np
import pytest
import torch
from conftest import ROOT

from primacy.analysis.behaviour.cmr.grid import CMRGrid
from primacy.analysis.heads.ablation import ablation_study, icl_scores, repeated_tokens
from primacy.analysis.heads.analysis import analyze_heads
from primacy.analysis.heads.model import SHARE_FLOOR, InfluenceHeads, RunHeads, head_model, influence_shares
from primacy.backbones.influence import toeplitz
from primacy.backbones.s4d import S4DBackbone
from primacy.backbones.transformer import TransformerBackbone
from primacy.cli import main
from primacy.errors import UsageError
from primacy.models.language import LanguageModel
from primacy.tasks.prompts import repeated_prompt
from primacy.workflows.humans.cmr_grid import save

N, V = 11, 30


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """A coarse CMR grid with few chains: enough to fit, quick to build."""
    grid = CMRGrid.build(np.array([0.3, 0.7, 1.0]), np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.5]), n_chains=20)
    path = tmp_path_factory.mktemp("grid") / "grid.npz"
    save(grid, path)
    return CMRGrid.load(path)


def s4d_model() -> LanguageModel:
    torch.manual_seed(0)
    return LanguageModel(S4DBackbone(d_model=8, d_state=4), vocab_size=V).eval()


def prompts(batch: int = 3) -> torch.Tensor:
    return repeated_prompt(N, V, 0, batch, torch.Generator().manual_seed(0))  # B 2N+1


def test_shares_are_each_querys_absolute_influence_and_the_scores_their_logarithm():
    weights = torch.randn(2, 4, 6, 6, dtype=torch.float64).tril()  # B C T T, signed
    weights[0, :2, 3] = 0.0  # a query with no influence at all in the first merged unit
    scores, share = influence_shares(weights, group=2)  # B 2 T T
    magnitude = weights.abs().view(2, 2, 2, 6, 6).sum(2)
    total = magnitude.sum(-1, keepdim=True)
    expected = torch.where(total > 0, magnitude / total, 0.0)
    torch.testing.assert_close(share, expected.float())
    assert (share.triu(1) == 0).all() and share.dtype == torch.float32
    rows = share.sum(-1)
    assert torch.allclose(rows[total[..., 0] > 0], torch.ones(()), atol=1e-6) and rows[0, 0, 3] == 0
    below = torch.ones(6, 6, dtype=torch.bool).tril()
    torch.testing.assert_close(scores[..., below], expected.clamp(min=SHARE_FLOOR).log().float()[..., below])
    assert torch.isneginf(scores[..., ~below]).all()
    softmax = scores.softmax(-1)  # the score whose softmax over sources is the share (rows with influence)
    torch.testing.assert_close(softmax[total[..., 0] > 0], share[total[..., 0] > 0], atol=1e-6, rtol=1e-5)


def test_s4d_units_are_its_channels_and_their_influence_is_its_kernel_whatever_the_content():
    model = s4d_model()
    heads = head_model(model)
    assert isinstance(heads, InfluenceHeads)
    assert (heads.n_layers, heads.n_heads, heads.unit) == (1, 8, "channel")
    tokens = prompts()
    scores, weights = heads.attention(tokens, [0])  # 1 B 8 T T
    assert scores.shape == weights.shape == (1, 3, 8, 2 * N + 1, 2 * N + 1)
    assert torch.equal(weights[0, 0], weights[0, 2]), "a time-invariant layer's influence ignores the tokens"
    with torch.no_grad():
        kernel = toeplitz(model.backbone.kernel(2 * N + 1), model.backbone.skip).abs().double()  # 8 T T
    torch.testing.assert_close(weights[0, 0], (kernel / kernel.sum(-1, keepdim=True)).float())


def test_every_head_analysis_runs_on_s4d_channels_through_the_one_scoring(grid):
    model = s4d_model()
    analysis = analyze_heads(model, prompts(4), N, grid)
    assert [(h.layer, h.head) for h in analysis.heads] == [(0, c) for c in range(8)]
    assert all(np.isnan(h.copying) for h in analysis.heads)  # no OV circuit
    assert analysis.lag_crps.shape == (1, 8, 11) and np.isfinite(analysis.lag_crps).all()
    ranked = [(h.layer, h.head) for h in analysis.by_induction()]
    tokens = repeated_tokens(N, 2, V, 0, 4, torch.Generator().manual_seed(1))
    result = ablation_study(model, tokens, ranked, fraction=0.25, n_random=2, resamples=100)
    assert result["k"] == 2 and result["top_heads"] == [list(h) for h in ranked[:2]]


def test_ablating_a_merged_head_ablates_its_channels(grid):
    model = s4d_model()
    heads = head_model(model, group=2)  # channels 2h and 2h + 1 are head h
    assert (heads.n_layers, heads.n_heads) == (1, 4)
    tokens = repeated_tokens(N, 2, V, 0, 3, torch.Generator().manual_seed(1))
    with heads.ablate_heads([(0, 1)]):
        ablated = icl_scores(heads, tokens, N, 2 * N)
    with torch.no_grad():
        model.backbone.out.weight[:, [2, 3]] = 0.0  # GELU(0) = 0: the channels the output layer no longer reads
    assert torch.equal(ablated, icl_scores(heads, tokens, N, 2 * N))


@pytest.mark.parametrize("make,group,message", [
    (s4d_model, 3, "backbone S4DBackbone has [8] units per influence layer: group=3 needs the same number in every "
                   "layer, a multiple of group"),
    (s4d_model, 0, "group=0 is invalid: it must be at least 1"),
    (lambda: LanguageModel(TransformerBackbone(d_model=8, n_layers=1, n_heads=2), vocab_size=V), 2,
     "group=2 is invalid for a TransformerBackbone: its heads are its units (group 1)"),
])
def test_a_group_that_does_not_divide_the_units_is_one_line(make, group, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        head_model(make(), group=group)


def test_the_transformer_keeps_its_attention_heads():
    model = LanguageModel(TransformerBackbone(d_model=8, n_layers=1, n_heads=2), vocab_size=V)
    assert isinstance(head_model(model), RunHeads)


def test_analyze_icl_ablation_and_the_tracker_run_on_an_s4d_induction_run(tmp_path, capsys):
    """The induction quickstart with an S4D backbone, a few steps: HeadScoreTracker scores its channels during fit,
    then both commands read them; the summary says what a head is."""
    run = tmp_path / "run"
    main(["fit", "--config", str(ROOT / "configs" / "induction-quickstart.yaml"), "--trainer.logger", "false",
          "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
          "--trainer.default_root_dir", str(run), "--trainer.max_steps", "2", "--trainer.val_check_interval", "2",
          "--trainer.num_sanity_val_steps", "0", "--data.init_args.batch_size", "4",
          "--data.init_args.num_val_prompts", "4", "--data.init_args.num_test_prompts", "4",
          "--model.init_args.backbone", json.dumps({"class_path": "S4DBackbone",
                                                    "init_args": {"d_model": 8, "d_state": 4}}),
          "--trainer.callbacks.init_args.prompts", "4", "--trainer.callbacks.init_args.formats", "[]"])
    history = np.load(run / "results" / "head_history.npz")
    assert history["induction"].shape == (2, 1, 8)  # steps 0 and 2, one layer of 8 channels
    ckpt = str(run / "checkpoints" / "last.ckpt")
    main(["analyze", "icl", "--config", str(run / "config.yaml"), "--ckpt_path", ckpt, "--out", str(tmp_path / "icl"),
          "--prompts", "4", "--group", "2", "--formats"])
    summary = json.loads((tmp_path / "icl" / "summary.json").read_text())
    assert (summary["n_heads"], summary["unit"], summary["units_per_head"]) == (4, "channel", 2)
    main(["analyze", "ablation", "--config", str(run / "config.yaml"), "--ckpt_path", ckpt,
          "--heads", str(tmp_path / "icl" / "heads.csv"), "--out", str(tmp_path / "ablation"), "--sequences", "4",
          "--random", "2", "--group", "2", "--formats"])
    result = json.loads((tmp_path / "ablation" / "ablation.json").read_text())
    assert result["k"] == 1 and result["units_per_head"] == 2
    assert sorted(p.name for p in (tmp_path / "ablation").iterdir()) == ["ablation.json"]  # --formats with none
    capsys.readouterr()
