"""`primacy analyze probes`: the vectorised probe statistics equal a plain loop over trials, add up over batches, and
the command writes its tables and figure from a trained verification Transformer (a few steps only)."""

import csv
import json
import math

import numpy as np
import pytest
import torch
from conftest import QUIET, ROOT

from primacy.analysis.heads.probes import MEASURES, measure_probes, probe_sums, strongest_head
from primacy.backbones.s4d import S4DBackbone
from primacy.backbones.transformer import TransformerBackbone
from primacy.cli import main
from primacy.models.lists import SequenceModel
from primacy.tasks.verification import VerificationTask

L, B, HEADS, LAYERS = 4, 6, 3, 2


def random_attention(generator: torch.Generator) -> list[torch.Tensor]:
    """Causal attention per layer (B, H, 2L, 2L) in float64: rows sum to one over keys 0..query, zero above."""
    t = 2 * L
    future = torch.ones(t, t, dtype=torch.bool).triu(1)
    layers = []
    for _ in range(LAYERS):
        scores = 3 * torch.randn(B, HEADS, t, t, generator=generator, dtype=torch.float64)
        layers.append(scores.masked_fill(future, float("-inf")).softmax(-1))
    # one query that puts no weight at all on the study keys: its entropy is undefined and must not be counted
    layers[0][1, 2, L + 3] = 0.0
    layers[0][1, 2, L + 3, L:] = 1.0 / L
    return layers


def random_study_pos(generator: torch.Generator) -> torch.Tensor:
    """(B, L): study positions in a random order, about half replaced by -1 (distractors)."""
    order = torch.rand(B, L, generator=generator).argsort(1)
    return torch.where(torch.rand(B, L, generator=generator) < 0.5, -1, order)


def loop_reference(weights: list[torch.Tensor], study_pos: torch.Tensor) -> tuple[dict, dict]:
    """The definitions, one trial, head and query position at a time."""
    sums = {m: np.zeros((LAYERS, HEADS, 2, L)) for m in MEASURES}
    counts = {m: np.zeros((LAYERS, HEADS, 2, L), dtype=np.int64) for m in MEASURES}
    sums["study"], counts["study"] = np.zeros((LAYERS, HEADS, 2, L)), np.zeros((LAYERS, HEADS, 2), dtype=np.int64)
    for layer, w in enumerate(weights):
        for b in range(B):
            for h in range(HEADS):
                for j in range(L):
                    row = [float(x) for x in w[b, h, L + j, :L]]
                    probe = 0 if study_pos[b, j] >= 0 else 1
                    mass = sum(row)
                    values = {"max_weight": max(row), "study_mass": mass}
                    if mass > 0:
                        values["entropy"] = -sum(x / mass * math.log(x / mass) for x in row if x > 0)
                        sums["study"][layer, h, probe] += [x / mass for x in row]  # by study position
                        counts["study"][layer, h, probe] += 1
                    if probe == 0:
                        values["match_weight"] = row[int(study_pos[b, j])]
                    for m, value in values.items():
                        sums[m][layer, h, probe, j] += value
                        counts[m][layer, h, probe, j] += 1
    return sums, counts


def test_probe_statistics_equal_a_loop_over_trials_heads_and_positions():
    generator = torch.Generator().manual_seed(0)
    weights, study_pos = random_attention(generator), random_study_pos(generator)
    stats = probe_sums(weights, study_pos)
    sums, counts = loop_reference(weights, study_pos)
    for m in MEASURES:
        np.testing.assert_allclose(stats.sums[m], sums[m], rtol=1e-12, atol=1e-12, err_msg=m)
        np.testing.assert_array_equal(stats.counts[m], counts[m], err_msg=m)
    np.testing.assert_allclose(stats.study, sums["study"], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(stats.study_counts, counts["study"])
    np.testing.assert_allclose(np.nansum(stats.study_profile(), -1), 1.0, rtol=1e-12)  # a distribution over items
    assert stats.counts["entropy"].sum() == stats.trials.sum() - 1  # the query with no weight on study keys
    assert (stats.counts["match_weight"][:, :, 1] == 0).all() and np.isnan(stats.means()["match_weight"][:, :, 1]).all()


def test_two_half_batches_add_up_to_the_whole_batch():
    generator = torch.Generator().manual_seed(1)
    weights, study_pos = random_attention(generator), random_study_pos(generator)
    whole = probe_sums(weights, study_pos)
    halves = probe_sums([w[:2] for w in weights], study_pos[:2]) + probe_sums([w[2:] for w in weights], study_pos[2:])
    for m in MEASURES:
        np.testing.assert_allclose(halves.sums[m], whole.sums[m], rtol=1e-12, atol=0, err_msg=m)
        np.testing.assert_array_equal(halves.counts[m], whole.counts[m], err_msg=m)
    np.testing.assert_allclose(halves.study, whole.study, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(halves.study_counts, whole.study_counts)


def test_the_model_is_measured_alike_in_any_batch_size():
    torch.manual_seed(0)
    model = SequenceModel(TransformerBackbone(d_model=8, n_layers=2, n_heads=2, d_ff=16), vocab_size=32, n_items=L)
    task = VerificationTask(n_items=L, vocab_size=32, num_held_out=12, num_test_sets=5, num_val_sets=2)
    one = measure_probes(model, task.test_design(), 3, batch_size=5)
    other = measure_probes(model, task.test_design(), 3, batch_size=24)
    for m in MEASURES:
        np.testing.assert_allclose(one.sums[m], other.sums[m], rtol=1e-6, err_msg=m)
        np.testing.assert_array_equal(one.counts[m], other.counts[m], err_msg=m)
    assert (one.trials == 3 * L).all()  # condition half: each query position is old in L trials per set, new in L


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("probes") / "run"
    main(["fit", "--config", str(ROOT / "configs" / "quickstart-transformer.yaml"), *QUIET,
          "--trainer.default_root_dir", str(run), "--trainer.max_steps", "3", "--test_after_fit", "false",
          "--trainer.limit_val_batches", "0", "--data.init_args.n_items", str(L), "--data.init_args.vocab_size", "32",
          "--data.init_args.batch_size", "4", "--data.init_args.num_held_out", "12",
          "--data.init_args.num_test_sets", "5", "--data.init_args.num_val_sets", "2",
          "--model.init_args.warmup_steps", "2", "--model.init_args.backbone.init_args.d_model", "8",
          "--model.init_args.backbone.init_args.n_layers", "2", "--model.init_args.backbone.init_args.n_heads", "2",
          "--model.init_args.backbone.init_args.d_ff", "16"])
    return run


def probe_args(run, out) -> list[str]:
    return ["analyze", "probes", "--config", str(run / "config.yaml"),
            "--ckpt_path", str(run / "checkpoints" / "last.ckpt"), "--out", str(out)]


def test_analyze_probes_writes_tables_arrays_summary_and_figure(trained_run, tmp_path, capsys):
    out = tmp_path / "probes"
    main([*probe_args(trained_run, out), "--sets", "3", "--batch_size", "5", "--formats", "png"])
    with (out / "probes.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["layer", "head", "probe", "query_position", *MEASURES, "n"]
    assert len(rows) == 2 * 2 * 2 * L and {r["probe"] for r in rows} == {"old", "new"}
    assert all(int(r["n"]) == 3 * L for r in rows)
    assert all(r["match_weight"] == "nan" for r in rows if r["probe"] == "new")
    for r in rows:
        assert 0 < float(r["max_weight"]) <= float(r["study_mass"]) <= 1 + 1e-6
        assert 0 <= float(r["entropy"]) <= math.log(L) + 1e-9
    arrays = np.load(out / "probes.npz")
    assert all(arrays[m].shape == (2, 2, 2, L) for m in MEASURES) and list(arrays["probes"]) == ["old", "new"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_sets"] == 3 and summary["n_layers"] == 2 and summary["n_heads"] == 2
    assert len(summary["heads"]) == 4
    head = summary["heads"][0]
    assert head["new"]["match_weight"] is None and head["old_minus_new"]["match_weight"] is None
    expected = float(arrays["max_weight"][0, 0, 0].mean() - arrays["max_weight"][0, 0, 1].mean())
    assert head["old_minus_new"]["max_weight"] == pytest.approx(expected)
    assert arrays["study_weight"].shape == (2, 2, 2, L) and (arrays["n_study_weight"] > 0).all()
    np.testing.assert_allclose(arrays["study_weight"].sum(-1), 1.0, rtol=1e-6)
    profile = arrays["study_weight"][1].mean(0)  # layer 1: the heads' mean profile, old and new probes
    q = max(1, L // 4)
    expected = profile[:, :q].sum(-1) - profile[:, -q:].sum(-1)
    assert [row["old"] for row in summary["study_weight_early_minus_late"]][1] == pytest.approx(expected[0])
    assert summary["study_weight_early_minus_late"][1]["new"] == pytest.approx(expected[1])
    assert (out / "probes.png").stat().st_size > 0
    assert "largest old-new gap" in capsys.readouterr().out


def test_several_runs_are_summed_head_by_head_with_each_runs_strongest_head_and_their_mean(trained_run, tmp_path):
    """`reproduce transformer`'s analysis of a panel's seeds (``analyze_probes`` over several runs): the same run twice
    counts every trial twice, leaves the means as they are, and lists its strongest head once per run."""
    from primacy.workflows.induction.probes import ProbeRun, analyze_probes

    run = ProbeRun(trained_run / "config.yaml", trained_run / "checkpoints" / "last.ckpt", "seed0")
    one = analyze_probes([run], tmp_path / "one", sets=3, batch_size=8, formats=())
    two = analyze_probes([run, ProbeRun(run.config, run.checkpoint, "seed1")], tmp_path / "two", sets=3,
                         batch_size=8, formats=())
    assert two["seeds"] == 2 and two["old_probes"] == 2 * one["old_probes"]
    assert [row["run"] for row in two["strongest_heads"]] == ["seed0", "seed1"]
    assert two["strongest_heads"][0]["old"] == two["strongest_heads"][1]["old"] == one["strongest_heads"][0]["old"]
    mean = two["strongest_head_mean"]["old_max_weight"]
    assert mean["n"] == 2 and mean["se"] == 0
    assert mean["mean"] == pytest.approx(one["strongest_heads"][0]["old"]["max_weight"])
    with np.load(tmp_path / "one" / "probes.npz") as a, np.load(tmp_path / "two" / "probes.npz") as b:
        np.testing.assert_allclose(a["max_weight"], b["max_weight"], rtol=1e-12)
        np.testing.assert_array_equal(2 * a["n_max_weight"], b["n_max_weight"])


def test_s4d_channels_look_alike_at_old_and_new_probes():
    """A time-invariant layer's influence ignores the tokens, so its channels put the same weight on the study items
    whether the probe was studied or not: every measure but match_weight is equal for old and new probes."""
    torch.manual_seed(0)
    model = SequenceModel(S4DBackbone(d_model=8, d_state=4), vocab_size=32, n_items=L).eval()
    task = VerificationTask(n_items=L, vocab_size=32, num_held_out=12, num_test_sets=5, num_val_sets=2)
    means = measure_probes(model, task.test_design(), 3, batch_size=24).means()
    for m in ("max_weight", "entropy", "study_mass"):
        assert means[m].shape == (1, 8, 2, L)  # one layer of 8 channels
        np.testing.assert_allclose(means[m][:, :, 0], means[m][:, :, 1], rtol=1e-6, err_msg=m)


def test_an_s4d_channels_weight_by_study_position_is_its_kernel_at_the_query_lags():
    """Where an S4D channel's queries put their weight on the study items is its convolution kernel K read at lags
    L + j - i, and nothing else: the study profile is the mean over query positions j of |K[L+j-i]| / Σ_i' |K[L+j-i']|,
    whatever the tokens (its primacy or recency in the weights is the kernel's shape)."""
    torch.manual_seed(0)
    model = SequenceModel(S4DBackbone(d_model=8, d_state=4), vocab_size=32, n_items=L).eval()
    task = VerificationTask(n_items=L, vocab_size=32, num_held_out=12, num_test_sets=5, num_val_sets=2)
    profile = measure_probes(model, task.test_design(), 3, batch_size=24).study_profile()  # 1 8 2 L
    kernel = model.backbone.influence(torch.zeros(1, 2 * L, 8))[0].weights[0].abs()  # 8 T T: K[t - s] at (t, s)
    lags = kernel[:, L:, :L]  # 8 L(query) L(study)
    expected = (lags / lags.sum(-1, keepdim=True)).mean(1).double().numpy()  # 8 L
    for probe in (0, 1):
        np.testing.assert_allclose(profile[0, :, probe], expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("case,message", [
    ("lstm", "has backbone LSTMBackbone: analyze probes needs attention or an exact token-to-token influence"),
    ("induction", "has task InductionTask: analyze probes needs a VerificationTask run"),
    ("existing", "already holds probes.csv: choose another directory or pass --overwrite"),
    ("sets", "sets=6 is invalid: the run has num_test_sets=5"),
])
def test_unusable_runs_and_settings_are_one_line_errors(trained_run, tmp_path, capsys, case, message):
    out = tmp_path / "probes"
    args = probe_args(trained_run, out)
    if case in ("lstm", "induction"):
        config = {"lstm": "quickstart-lstm.yaml", "induction": "induction-quickstart.yaml"}[case]
        args[args.index("--config") + 1] = str(ROOT / "configs" / config)
    elif case == "existing":
        out.mkdir()
        (out / "probes.csv").write_text("earlier results\n")
    else:
        args += ["--sets", "6"]
    with pytest.raises(SystemExit):
        main(args)
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    if case == "existing":
        assert (out / "probes.csv").read_text() == "earlier results\n"
    else:
        assert not out.exists()


def test_the_strongest_head_is_the_one_whose_largest_weight_differs_most_between_old_and_new_probes():
    means = {m: np.full((2, 3, 2, 4), 0.5) for m in MEASURES}  # layers heads probes positions
    means["max_weight"][1, 2, 0] = 0.9  # L1H2: 0.9 on old probes, 0.5 on new ones
    means["max_weight"][0, 1, 1] = 0.8  # L0H1: higher on new probes, a smaller gap (0.3)
    means["match_weight"][:, :, 1] = np.nan  # new probes have no match
    row = strongest_head(means)
    assert (row["layer"], row["head"]) == (1, 2)
    assert row["old_minus_new"]["max_weight"] == pytest.approx(0.4) and row["new"]["match_weight"] is None
