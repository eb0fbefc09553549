"""`primacy analyze icl`: every head's scores equal the scoring functions on the captured attention, and the
command writes its tables and figures from a trained run (a few steps: CI never trains to emergence)."""

import csv
import json

import numpy as np
import pytest
import torch
from conftest import ROOT

from primacy.analysis.behaviour.cmr.grid import CMRGrid
from primacy.analysis.heads.ablation import icl_scores
from primacy.analysis.heads.analysis import HeadResult, analyze_heads, capture, fit_head
from primacy.analysis.heads.emergence import across_seeds, closest_heads, emergence_row, emergence_step, top_heads
from primacy.analysis.heads.scores import attention_lag_crp, induction_score
from primacy.backbones.lstm import LSTMBackbone
from primacy.backbones.transformer import TransformerBackbone
from primacy.cli import main
from primacy.cli.analyze import ranked_heads
from primacy.errors import UsageError
from primacy.models.language import LanguageModel
from primacy.rundir.runs import load_run
from primacy.tasks.prompts import repeated_prompt
from primacy.workflows.humans.cmr_grid import save

N = 11


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """A coarse CMR grid with few chains: enough to fit, quick to build."""
    grid = CMRGrid.build(np.array([0.3, 0.7, 1.0]), np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.5]), n_chains=20)
    path = tmp_path_factory.mktemp("grid") / "grid.npz"
    save(grid, path)
    return path


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("icl") / "run"
    main(["fit", "--config", str(ROOT / "configs" / "induction-quickstart.yaml"), "--trainer.logger", "false",
          "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
          "--trainer.default_root_dir", str(root), "--trainer.max_steps", "3", "--trainer.val_check_interval", "3",
          "--trainer.num_sanity_val_steps", "0", "--data.init_args.batch_size", "8",
          "--data.init_args.num_val_prompts", "8", "--data.init_args.num_test_prompts", "8"])
    return root


def small_model() -> LanguageModel:
    torch.manual_seed(0)
    backbone = TransformerBackbone(d_model=16, n_layers=2, n_heads=2, mlp=False, layer_norm=False)
    return LanguageModel(backbone, vocab_size=20).eval()


def test_an_induction_run_writes_its_test_metrics_and_settings(trained_run):
    summary = json.loads((trained_run / "results" / "summary.json").read_text())
    assert {"repeat_accuracy", "repeat_loss", "other_accuracy", "other_loss"} <= set(summary)
    assert summary["backbone"] == "TransformerBackbone" and summary["vocab_size"] == 256
    assert summary["data_args"]["prompt_items"] == 25


def test_every_head_gets_the_scores_of_its_captured_attention(grid):
    model = small_model()
    prompts = repeated_prompt(N, 20, 0, 5, torch.Generator().manual_seed(0))
    analysis = analyze_heads(model, prompts, N, CMRGrid.load(grid))
    scores, weights = capture(model, prompts)  # layers B heads T T
    assert [(h.layer, h.head) for h in analysis.heads] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for h in analysis.heads:
        expected = induction_score(weights[h.layer, :, h.head], N).mean()
        assert h.induction == pytest.approx(float(expected))
        lags, crp = attention_lag_crp(scores[h.layer, :, h.head], N)
        np.testing.assert_allclose(analysis.lag_crps[h.layer, h.head], crp.mean(0).numpy(), rtol=1e-6)
        assert h.lag_crp_peak == int(lags[crp.mean(0).argmax()])
        assert -1 <= h.copying <= 1 and h.cmr_distance >= 0 and h.gaussian_distance >= 0
    assert analysis.attention.shape == (2, 2, 2 * N + 1, 2 * N + 1)


def test_backbones_without_attention_or_an_exact_influence_are_refused(grid):
    model = LanguageModel(LSTMBackbone(d_model=8), vocab_size=20)
    prompts = repeated_prompt(N, 20, 0, 2, torch.Generator().manual_seed(0))
    with pytest.raises(UsageError, match="backbone LSTMBackbone has no exact token-to-token influence"):
        analyze_heads(model, prompts, N, CMRGrid.load(grid))


def test_analyze_icl_writes_tables_and_figures_and_keeps_earlier_results(trained_run, grid, tmp_path, capsys):
    out = tmp_path / "icl"
    args = ["analyze", "icl", "--config", str(trained_run / "config.yaml"),
            "--ckpt_path", str(trained_run / "checkpoints" / "last.ckpt"), "--out", str(out), "--grid", str(grid),
            "--prompts", "4", "--n_items", "11", "--formats", "png"]
    main(args)
    with (out / "heads.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 4 and {"induction", "copying", "cmr_distance", "inv_temperature",
                                   "gaussian_distance", "previous_token", "duplicate_token"} <= set(rows[0])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_layers"] == 2 and summary["n_heads"] == 4 and len(summary["cmr_like_share_by_layer"]) == 2
    assert summary["top_induction_heads"][0]["induction"] == max(float(r["induction"]) for r in rows)
    for name in ("attention_pattern", "lag_crp_fits", "cmr_distance_vs_induction", "cmr_like_share", "cmr_families"):
        assert (out / f"{name}.png").stat().st_size > 0
    assert "top induction head" in capsys.readouterr().out

    before = (out / "heads.csv").read_bytes()
    with pytest.raises(SystemExit):
        main(args)
    assert "already holds heads.csv" in capsys.readouterr().err
    assert (out / "heads.csv").read_bytes() == before


def test_a_verification_transformer_is_analysed_without_a_copying_score(grid, tmp_path):
    """The verification model reads out one logit, not tokens: its heads get every score but copying."""
    run = tmp_path / "verification"
    main(["fit", "--config", str(ROOT / "configs" / "quickstart-transformer.yaml"), "--trainer.logger", "false",
          "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
          "--trainer.default_root_dir", str(run), "--trainer.max_steps", "1", "--test_after_fit", "false",
          "--trainer.limit_val_batches", "0", "--data.init_args.batch_size", "4"])
    main(["analyze", "icl", "--config", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints" / "last.ckpt"),
          "--out", str(run / "icl"), "--grid", str(grid), "--prompts", "2", "--n_items", "11", "--formats", "png"])
    with (run / "icl" / "heads.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8 and all(r["copying"] == "nan" for r in rows) and all(r["induction"] for r in rows)


def test_analyze_ablation_ranks_heads_from_the_icl_table_and_writes_paired_results(trained_run, grid, tmp_path):
    run_args = ["--config", str(trained_run / "config.yaml"),
                "--ckpt_path", str(trained_run / "checkpoints" / "last.ckpt")]
    main(["analyze", "icl", *run_args, "--out", str(tmp_path / "icl"), "--grid", str(grid), "--prompts", "2",
          "--formats", "png"])
    heads = tmp_path / "icl" / "heads.csv"
    with heads.open() as f:
        rows = list(csv.DictReader(f))
    by_distance = sorted(rows, key=lambda r: float(r["cmr_distance"]))
    assert ranked_heads(heads, "cmr_distance")[0] == (int(by_distance[0]["layer"]), int(by_distance[0]["head"]))
    main(["analyze", "ablation", *run_args, "--heads", str(heads), "--out", str(tmp_path / "ablation"),
          "--random", "2", "--sequences", "6", "--n_items", "5", "--repeats", "3", "--formats", "png"])
    result = json.loads((tmp_path / "ablation" / "ablation.json").read_text())
    assert result["k"] == 1 and result["top_heads"] == [list(ranked_heads(heads, "cmr_distance")[0])]
    assert result["early"] == 5 and result["late"] == 15 and len(result["scores"]["intact"]) == 6
    assert {"top_minus_intact", "random_minus_intact", "top_minus_random", "top_minus_random_single"} == set(
        result["comparisons"])
    assert result["random_draws"]["n"] == 2 and len(result["random_draws"]["per_draw"]) == 2
    assert (tmp_path / "ablation" / "ablation.png").stat().st_size > 0


def test_ranked_heads_puts_flat_heads_last_and_rejects_other_tables(tmp_path):
    table = tmp_path / "heads.csv"
    table.write_text("layer,head,induction,cmr_distance\n0,0,0.1,\n0,1,0.9,0.4\n1,0,0.5,0.2\n")
    assert ranked_heads(table, "cmr_distance") == [(1, 0), (0, 1), (0, 0)]
    assert ranked_heads(table, "induction") == [(0, 1), (1, 0), (0, 0)]
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(UsageError, match="is not an `analyze icl` heads.csv"):
        ranked_heads(tmp_path / "other.csv", "induction")


@pytest.mark.parametrize("flag,value,message", [
    ("--ckpt_path", "missing.ckpt", "ckpt_path=missing.ckpt does not exist"),
    ("--grid", "missing.npz", "missing.npz"),
])
def test_missing_files_are_named(trained_run, grid, tmp_path, capsys, flag, value, message):
    args = {"--config": str(trained_run / "config.yaml"), "--ckpt_path": str(trained_run / "checkpoints" / "last.ckpt"),
            "--grid": str(grid), flag: value}
    with pytest.raises(SystemExit) as refused:
        main(["analyze", "icl", *[x for kv in args.items() for x in kv], "--out", str(tmp_path / "x")])
    assert refused.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("extra,message", [
    (["--formats", "png", "jpgg"], "formats=['jpgg'] are unknown"),
    (["--prompts", "0"], "prompts=0 is invalid"),
    (["--n_items", "0"], "n_items=0 is invalid"),
])
def test_bad_options_are_one_line_errors_and_write_nothing(trained_run, grid, tmp_path, capsys, extra, message):
    out = tmp_path / "icl"
    with pytest.raises(SystemExit) as refused:
        main(["analyze", "icl", "--config", str(trained_run / "config.yaml"), "--grid", str(grid),
              "--ckpt_path", str(trained_run / "checkpoints" / "last.ckpt"), "--out", str(out), *extra])
    assert refused.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_a_broken_checkpoint_is_a_one_line_error(trained_run, grid, tmp_path, capsys):
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes((trained_run / "checkpoints" / "last.ckpt").read_bytes()[:100])
    with pytest.raises(SystemExit) as refused:
        main(["analyze", "icl", "--config", str(trained_run / "config.yaml"), "--ckpt_path", str(broken),
              "--grid", str(grid), "--out", str(tmp_path / "x")])
    assert refused.value.code == 2
    assert "is not a readable Lightning checkpoint" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_induction_quickstart_forms_a_cmr_like_induction_head(tmp_path, seed):
    """The induction quickstart, whole (a few minutes on 2 cores), then `analyze icl` with the shipped CMR grid:
    a second-layer head attends to the token after the earlier occurrence, its lag-CRP peaks at +1, and CMR
    fits it (distance < 0.5)."""
    run = tmp_path / "run"
    main(["fit", "--config", str(ROOT / "configs" / "induction-quickstart.yaml"), "--trainer.logger", "false",
          "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(run),
          "--seed_everything", str(seed), "--data.init_args.seed", str(seed)])
    main(["analyze", "icl", "--config", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints" / "last.ckpt"),
          "--out", str(run / "icl"), "--formats", "png"])
    with (run / "icl" / "heads.csv").open() as f:
        heads = [r for r in csv.DictReader(f) if r["layer"] == "1"]
    assert any(float(h["induction"]) >= 0.5 and h["lag_crp_peak"] == "1" and float(h["cmr_distance"]) < 0.5
               for h in heads), heads


def head_rows(induction, distance):
    return [{"layer": i // 2, "head": i % 2, "induction": s, "cmr_distance": d, "beta_enc": 0.1 * (i + 1),
             "beta_rec": 0.2, "gamma_ft": 0.3, "inv_temperature": 1.0 + i}
            for i, (s, d) in enumerate(zip(induction, distance))]


def test_an_emergence_row_averages_the_best_induction_heads_and_counts_cmr_like_heads_over_all():
    heads = head_rows(["0.9", "0.1", "0.7", "0.5"], ["0.2", "", "1.5", "0.4"])  # heads.csv cells: text, empty if flat
    row = emergence_row(500, heads, top=2, icl_score=-1.5)
    assert row["step"] == 500 and row["icl_score"] == -1.5 and row["top"] == 2
    assert row["best_head"] == "L0H0" and row["best_induction"] == pytest.approx(0.9)
    assert row["top_induction"] == pytest.approx((0.9 + 0.7) / 2)  # heads 0 and 2
    assert row["top_cmr_distance"] == pytest.approx((0.2 + 1.5) / 2)
    assert row["beta_enc"] == pytest.approx((0.1 + 0.3) / 2) and row["inv_temperature"] == pytest.approx((1 + 3) / 2)
    assert row["cmr_like_share"] == pytest.approx(2 / 4)  # distances 0.2 and 0.4; the flat head is not CMR-like
    assert row["top_heads"] == "L0H0 L1H0"


def test_the_top_heads_can_be_the_final_checkpoints_followed_back():
    """The authors fix the heads at the final checkpoint: an early row averages those heads, though others were the
    best induction heads then; the best head of the row is still that checkpoint's."""
    early = head_rows(["0.9", "0.1", "0.7", "0.5"], ["0.2", "", "1.5", "0.4"])
    final = head_rows(["0.1", "0.8", "0.2", "0.95"], ["0.9", "0.3", "0.9", "0.1"])
    chosen = top_heads(final, 2)
    assert chosen == [(1, 1), (0, 1)]  # induction 0.95 and 0.8
    row = emergence_row(100, early, top=2, chosen=chosen)
    assert row["top_heads"] == "L1H1 L0H1" and row["best_head"] == "L0H0"
    assert row["top_induction"] == pytest.approx((0.5 + 0.1) / 2)
    assert row["top_cmr_distance"] == pytest.approx(0.4)  # head L0H1's lag-CRP was flat: left out of the mean


def test_the_most_cmr_like_heads_and_each_layers_share_of_cmr_like_heads():
    """Fig. 7f-g: the heads of lowest CMR distance at the final checkpoint, followed back (flat heads last); Fig. 7b:
    the share of CMR-like heads within each layer."""
    early = head_rows(["0.9", "0.1", "0.7", "0.5"], ["0.2", "", "1.5", "0.4"])
    final = head_rows(["0.1", "0.8", "0.2", "0.95"], ["0.9", "", "0.3", "0.1"])
    closest = closest_heads(final, 2)
    assert closest == [(1, 1), (1, 0)]  # distances 0.1 and 0.3
    assert closest_heads(final, 4)[-1] == (0, 1), "a flat head (no fit) is the least CMR-like"
    row = emergence_row(100, early, top=2, closest=closest)
    assert row["cmr_top_heads"] == "L1H1 L1H0" and row["top_heads"] == "L0H0 L1H0"  # induction ranks this step's
    assert row["cmr_top_cmr_distance"] == pytest.approx((0.4 + 1.5) / 2)
    assert row["cmr_top_induction"] == pytest.approx((0.5 + 0.7) / 2)
    assert row["cmr_top_beta_enc"] == pytest.approx((0.4 + 0.3) / 2)
    assert row["cmr_like_share_L0"] == pytest.approx(1 / 2) and row["cmr_like_share_L1"] == pytest.approx(1 / 2)
    itself = emergence_row(100, final, top=2)
    assert itself["cmr_top_heads"] == "L1H1 L1H0" and itself["cmr_like_share_L1"] == 1.0
    assert itself["cmr_like_share_L0"] == 0.0  # 0.9 and a flat head
    mean = across_seeds([[row], [itself]])
    assert mean[0]["cmr_like_share_L1"] == pytest.approx(0.75) and "cmr_like_share_L1_se" in mean[0]


def test_emergence_step_and_the_mean_over_seeds_at_the_steps_every_seed_has():
    seed0 = [emergence_row(s, head_rows([i, 0.0], ["0.2", "0.9"]), top=1, icl_score=-i)
             for s, i in ((100, 0.1), (200, 0.6), (250, 0.7), (300, 0.8))]  # 250: an interrupted run's extra save
    seed1 = [emergence_row(s, head_rows([i, 0.0], ["0.4", "0.9"]), top=1, icl_score=-i)
             for s, i in ((100, 0.2), (200, 0.3), (300, 0.9))]
    assert emergence_step(seed0) == 200 and emergence_step(seed1) == 300
    assert emergence_step(seed1, threshold=0.95) is None
    mean = across_seeds([seed0, seed1])
    assert [row["step"] for row in mean] == [100, 200, 300]
    assert mean[1]["top_induction"] == pytest.approx(0.45)
    assert mean[1]["top_induction_se"] == pytest.approx(np.std([0.6, 0.3], ddof=1) / np.sqrt(2))
    assert mean[2]["icl_score"] == pytest.approx(-0.85) and mean[0]["top_cmr_distance"] == pytest.approx(0.3)
    assert mean[0]["seeds"] == 2 and mean[0]["top"] == 1


@pytest.fixture(scope="module")
def run_with_checkpoints(tmp_path_factory):
    """An induction run that kept a numbered checkpoint every 2 steps (steps 2 and 4) besides last.ckpt."""
    root = tmp_path_factory.mktemp("emergence") / "run"
    main(["fit", "--config", str(ROOT / "configs" / "cpu" / "induction-attn-2L.yaml"), "--trainer.logger", "false",
          "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
          "--trainer.default_root_dir", str(root), "--trainer.max_steps", "4", "--trainer.val_check_interval", "4",
          "--trainer.num_sanity_val_steps", "0", "--checkpoint.every_n_train_steps", "2",
          "--data.init_args.batch_size", "8", "--data.init_args.num_val_prompts", "8",
          "--data.init_args.num_test_prompts", "8"])
    return root


@pytest.mark.slow  # 11 s: one analysis per checkpoint; one checkpoint's (every table, every figure) stays in the
# default run
def test_several_checkpoints_give_one_analysis_each_and_the_emergence_table(run_with_checkpoints, grid, tmp_path,
                                                                             capsys):
    run, out = run_with_checkpoints, tmp_path / "icl"
    ckpts = sorted((run / "checkpoints").glob("*.ckpt"))
    assert len(ckpts) == 3  # steps 2 and 4, and last.ckpt (step 4 again)
    args = ["analyze", "icl", "--config", str(run / "config.yaml"), "--ckpt_path", *map(str, ckpts), "--out", str(out),
            "--grid", str(grid), "--prompts", "4", "--n_items", "11", "--top", "2", "--formats", "png"]
    main(args)
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["step2", "step4"]
    with (out / "emergence.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [int(row["step"]) for row in table] == [2, 4]
    with (out / "step4" / "heads.csv").open() as f:
        final = top_heads(list(csv.DictReader(f)), 2)  # the heads followed back through training (the default)
    for row in table:
        step_dir = out / f"step{row['step']}"
        with (step_dir / "heads.csv").open() as f:
            expected = emergence_row(int(row["step"]), list(csv.DictReader(f)), top=2, chosen=final)
        assert row["top_heads"] == expected["top_heads"] == " ".join(f"L{layer}H{head}" for layer, head in final)
        summary = json.loads((step_dir / "summary.json").read_text())
        assert summary["step"] == int(row["step"]) and summary["n_prompts"] == 4 and summary["top"] == 2
        # the ICL score is the model's own loss difference on the analysed prompts
        model, _ = load_run(run / "config.yaml", summary["checkpoint"])
        prompts = repeated_prompt(11, 256, 0, 4, torch.Generator().manual_seed(0))
        assert summary["icl_score"] == pytest.approx(float(icl_scores(model, prompts, 11, 22).mean()), rel=1e-5)
        assert float(row["icl_score"]) == pytest.approx(summary["icl_score"])
        for key in ("top_induction", "top_cmr_distance", "beta_enc", "cmr_like_share"):
            assert float(row[key]) == pytest.approx(expected[key]), key
    assert (out / "emergence.png").stat().st_size > 0 and (out / "step2" / "lag_crp_fits.png").is_file()
    assert "2 checkpoints ->" in capsys.readouterr().out

    before = (out / "emergence.csv").read_bytes()
    with pytest.raises(SystemExit):
        main(args)
    assert "already holds emergence.csv" in capsys.readouterr().err
    assert (out / "emergence.csv").read_bytes() == before
    (out / "emergence.csv").unlink()
    with pytest.raises(SystemExit):  # the per-checkpoint results are kept too
        main(args)
    assert f"out={out / 'step2'} already holds heads.csv" in capsys.readouterr().err
    main([*args, "--overwrite"])
    assert (out / "emergence.csv").read_bytes() == before


@pytest.mark.parametrize("noise", [0.0, 1e-17])
def test_a_head_whose_lag_crp_is_flat_up_to_rounding_has_no_fit_and_is_not_cmr_like(grid, noise):
    curve = np.full(11, 0.3) + noise * np.random.default_rng(0).standard_normal(11)
    columns, cmr, gauss = fit_head(curve, np.arange(-5, 6), CMRGrid.load(grid))
    assert cmr is None and gauss is None and all(np.isnan(v) for v in columns.values())
    head = HeadResult(layer=0, head=0, induction=0.0, duplicate_token=0.0, previous_token=0.0, copying=float("nan"),
                      lag_crp_peak=0, **columns)
    assert not head.cmr_like and head.row()["cmr_like"] is False
