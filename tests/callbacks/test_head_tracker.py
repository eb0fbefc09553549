"""HeadScoreTracker scores every attention head on fixed [BOS] r r prompts during training: its history holds what
the model at each step gives, training goes bitwise as without it, and a resumed run keeps the same history."""

import json
import signal
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import QUIET, ROOT, TINY_RUNS

from primacy.analysis.behaviour.cmr.fits import fit_cmr, is_flat
from primacy.analysis.behaviour.cmr.grid import CMRGrid
from primacy.analysis.heads.analysis import analyze_heads
from primacy.callbacks.trackers import HeadScoreTracker
from primacy.cli import main
from primacy.rundir.runs import load_run
from primacy.tasks.prompts import BOS, repeated_prompt

STEPS = 8
EVERY = ["--trainer.callbacks.every_n_steps", "3"]  # records at 0, 3, 6 and the last step, 8
RUNS = {  # the induction config lists the tracker (its figure off in TINY_RUNS, on here); verification adds it
    "induction": [*TINY_RUNS["induction"], "--trainer.callbacks.formats", "[png]"],
    "verification": [
        "--config", str(ROOT / "configs" / "quickstart-transformer.yaml"), *QUIET,
        "--data.init_args.n_items", "4", "--data.init_args.vocab_size", "32", "--data.init_args.batch_size", "4",
        "--data.init_args.num_held_out", "12", "--data.init_args.num_test_sets", "2",
        "--data.init_args.num_val_sets", "2", "--model.init_args.warmup_steps", "2",
        "--model.init_args.backbone.init_args.d_model", "8", "--model.init_args.backbone.init_args.d_ff", "16",
        "--model.init_args.backbone.init_args.n_layers", "1", "--model.init_args.backbone.init_args.n_heads", "2",
        "--model.init_args.backbone.init_args.dropout", "0.1",  # dropout draws from the global generator
        "--trainer.val_check_interval", "4", "--results.formats", "[png]",
        "--trainer.callbacks+=HeadScoreTracker", "--trainer.callbacks.formats", "[png]",
    ],
}


def fit(task: str, run, *extra: str) -> None:
    main(["fit", *RUNS[task], "--trainer.default_root_dir", str(run), "--trainer.max_steps", str(STEPS),
          "--test_after_fit", "false", *extra])


def checkpoint(run) -> dict:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def history(run) -> dict[str, np.ndarray]:
    with np.load(run / "results" / "head_history.npz") as f:
        return dict(f)


@pytest.fixture(scope="module", params=list(RUNS))
def tracked(request, tmp_path_factory):
    """A run of each task with the tracker every 3 steps."""
    run = tmp_path_factory.mktemp("tracked") / request.param
    fit(request.param, run, *EVERY)
    return request.param, run


def direct_scores(run, n: int, prompts: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The final model's induction score, lag-CRP peak and CMR distance of every head, (layers, heads) each,
    written out index by index (the slow, obvious way)."""
    model, _ = load_run(run / "config.yaml", run / "checkpoints" / "last.ckpt")
    tokens = repeated_prompt(n, model.hparams.vocab_size, BOS, prompts, torch.Generator().manual_seed(seed))
    with torch.no_grad(), model.backbone.capture_attention() as layers:
        model.backbone(model.embedding(tokens))
    lags = np.arange(-5, 6)
    # the paper's window: at lag k, the tokens whose first occurrence s (1-based, BOS at 0) lies in (|k|, n - |k|],
    # queried from their second occurrence s + n at key s + k
    firsts = {lag: np.arange(abs(lag) + 1, n - abs(lag) + 1) for lag in lags}
    shape = (len(layers), layers[0].weights.shape[1])
    induction, peak, distance = np.zeros(shape), np.zeros(shape, dtype=int), np.full(shape, np.nan)
    for layer, attention in enumerate(layers):
        weights, scores = attention.weights.double().numpy(), attention.scores.double().numpy()  # B heads T T
        for head in range(shape[1]):
            induction[layer, head] = np.mean([weights[:, head, q, q - n + 1].mean() for q in range(n + 1, 2 * n + 1)])
            curve = np.array([np.mean([scores[:, head, s + n, s + lag] for s in firsts[lag]]) for lag in lags])
            peak[layer, head] = lags[curve.argmax()]
            if not is_flat(curve):
                distance[layer, head] = fit_cmr(curve, lags, CMRGrid.paper()).distance
    return induction, peak, distance


def test_the_last_recorded_scores_are_those_of_the_final_model(tracked):
    task, run = tracked
    h = history(run)
    n = {"induction": 11, "verification": 25}[task]  # given in TINY_RUNS; the default without a prompt_items
    assert h["steps"].tolist() == [0, 3, 6, STEPS]
    assert h["induction"].shape == h["lag_crp_peak"].shape == h["cmr_distance"].shape == (4, 1, 2)
    assert (int(h["n_items"]), int(h["n_prompts"]), int(h["prompt_seed"])) == (n, 32, 0)
    induction, peak, distance = direct_scores(run, n, 32, 0)
    np.testing.assert_allclose(h["induction"][-1], induction, rtol=1e-6)
    np.testing.assert_array_equal(h["lag_crp_peak"][-1], peak)
    np.testing.assert_allclose(h["cmr_distance"][-1], distance, rtol=1e-6)
    assert not np.array_equal(h["induction"][0], h["induction"][-1]), "the model was trained between the rows"
    reached = [int(s) for s, scores in zip(h["steps"], h["induction"]) if scores.max() >= 0.5]
    assert int(h["first_induction_step"]) == (reached[0] if reached else -1)
    assert (run / "results" / "head_history.png").is_file()


def test_the_tracker_scores_heads_as_primacy_analyze_icl_does(tracked):
    """HeadScoreTracker.score and analyze_heads (``primacy analyze icl``) share one scoring (score_heads): on the same
    model and prompts they give the same induction scores, lag-CRP peaks and CMR distances, whatever the batches."""
    task, run = tracked
    n = {"induction": 11, "verification": 25}[task]
    model, _ = load_run(run / "config.yaml", run / "checkpoints" / "last.ckpt")
    tracker = HeadScoreTracker(n_items=n, prompts=32, seed=3)
    tracker.setup(SimpleNamespace(datamodule=None), model, "fit")
    induction, peak, distance = tracker.score(model)
    analysis = analyze_heads(model, tracker.tokens, n, CMRGrid.paper(), batch_size=5)  # 7 batches, the tracker's 1
    table = {(h.layer, h.head): h for h in analysis.heads}
    for column, tracked_values in {"induction": induction, "lag_crp_peak": peak, "cmr_distance": distance}.items():
        analysed = np.array([[getattr(table[layer, head], column) for head in range(induction.shape[1])]
                             for layer in range(induction.shape[0])])
        np.testing.assert_allclose(tracked_values, analysed, rtol=1e-12, atol=0, err_msg=column)
    assert not np.isnan(distance).all()


def test_training_with_the_tracker_is_bitwise_training_without_it(tracked, tmp_path):
    task, run = tracked
    untracked = tmp_path / "untracked"
    fit(task, untracked, "--trainer.callbacks=[]")
    assert not (untracked / "results" / "head_history.npz").exists()
    a, b = checkpoint(run), checkpoint(untracked)
    assert a["global_step"] == b["global_step"] == STEPS
    for key, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][key]), key
    for state_a, state_b in zip(a["optimizer_states"][0]["state"].values(), b["optimizer_states"][0]["state"].values()):
        for key in state_a:
            assert torch.equal(state_a[key], state_b[key]), f"optimiser {key}"


def test_a_resumed_run_has_the_history_of_an_uninterrupted_one(tracked, tmp_path):
    task, run = tracked
    resumed = tmp_path / "resumed"
    stop = {"class_path": "signals.SignalAt", "init_args": {"step": 4, "signum": int(signal.SIGINT)}}
    with pytest.raises(SystemExit):
        fit(task, resumed, *EVERY, f"--trainer.callbacks+={json.dumps(stop)}")
    # the history so far, without a record where the run stopped: the resumed run must not have one there
    assert history(resumed)["steps"].tolist() == [0, 3]
    fit(task, resumed, *EVERY)
    expected, got = history(run), history(resumed)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)


def fails_in_one_line(args: list[str], expected: str, run, capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["fit", *args, "--trainer.default_root_dir", str(run), "--trainer.max_steps", "2",
              "--test_after_fit", "false"])
    err = capsys.readouterr().err.strip()
    assert stopped.value.code == 2
    assert len(err.splitlines()) == 1 and expected in err and "Traceback" not in err, err
    assert not (run / "checkpoints" / "last.ckpt").exists(), "nothing was trained"


def test_a_backbone_without_an_exact_influence_is_a_one_line_error(capsys, tmp_path):
    fails_in_one_line([*TINY_RUNS["verification"], "--model.init_args.backbone", "LSTMBackbone",
                       "--trainer.callbacks+=HeadScoreTracker"],
                      "HeadScoreTracker: backbone LSTMBackbone has no exact token-to-token influence",
                      tmp_path / "run", capsys)


@pytest.mark.parametrize("args,expected", [
    (["--trainer.callbacks.every_n_steps", "0"], "every_n_steps=0 is invalid: it must be at least 1"),
    (["--trainer.callbacks.n_items", "0"], "n_items=0 is invalid"),
    (["--trainer.callbacks.prompts", "0"], "prompts=0 is invalid: it must be at least 1"),
    (["--trainer.callbacks.dpi", "0"], "dpi=0 is invalid: it must be at least 1"),
    (["--trainer.callbacks.formats", "[png, pgn]"], "formats=['pgn'] are unknown: choose among"),
    (["--trainer.callbacks.n_items", "10"], "vocab_size=32: it must lie in [11, 31] (the lag-CRP on lags ±5 with "
                                            "query_window='paper' needs n_items >= 11"),
    (["--trainer.callbacks.n_items", "5", "--trainer.callbacks.query_window", "common"],
     "vocab_size=32: it must lie in [6, 31] (the lag-CRP on lags ±5 with query_window='common' needs n_items >= 6"),
    (["--trainer.callbacks.query_window", "queries"], "query_window='queries' is unknown: choose one of 'paper', "
                                                      "'common'"),
    (["--trainer.callbacks.n_items", "32"], "n_items=32 is invalid for HeadScoreTracker with vocab_size=32"),
    (["--trainer.callbacks.n_items", "null"], "n_items=5 (the task's prompt_items) is invalid"),
    (["--model.init_args.backbone.init_args.positional", "learned",
      "--model.init_args.backbone.init_args.max_length", "16", "--trainer.callbacks.n_items", "11"],
     "n_items=11 is too large for max_length=16 of the learned positions"),
], ids=["every-zero", "n-zero", "prompts-zero", "dpi-zero", "format-unknown", "n-too-short", "n-too-short-common",
        "window-unknown", "n-too-large", "task-prompt-too-short", "n-beyond-learned-positions"])
def test_bad_arguments_are_one_line_errors(args, expected, capsys, tmp_path):
    fails_in_one_line([*TINY_RUNS["induction"], *args], expected, tmp_path / "run", capsys)


def test_a_run_resumed_with_other_prompts_starts_a_new_history(tmp_path):
    run = tmp_path / "run"
    stop = {"class_path": "signals.SignalAt", "init_args": {"step": 4, "signum": int(signal.SIGINT)}}
    with pytest.raises(SystemExit):
        fit("induction", run, *EVERY, f"--trainer.callbacks+={json.dumps(stop)}")
    with pytest.warns(UserWarning, match="the history starts afresh"):
        fit("induction", run, *EVERY, "--trainer.callbacks.seed", "1")
    h = history(run)
    assert h["steps"].tolist() == [4, 6, STEPS] and int(h["prompt_seed"]) == 1, "no row scored on other prompts"
