"""Bad input, across every command: exit code 2, one line on stderr naming the parameter or file, no traceback, no
training and nothing already written changed. Each case is what a user could type."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import QUIET, ROOT, TINY_RUNS, fake_slurm
from support.cli import snapshot

from primacy import registry
from primacy.cli import main
from primacy.cli.lightning import parse_run
from primacy.registry import BUILTINS_ONLY

QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")

# (id, arguments after the subcommand, the whole error message after "primacy: error: " or, where a part depends on
# the machine, the Python or a library version, a tuple of the parts it must contain). Paths use {run} (a finished
# verification run whose files must survive every case), {lstm} (a finished LSTM run), {induction} (a trained
# induction run), {file} (a plain file), {damaged} (a run with a damaged summary.json) and {tmp}.
FIT = [
    ("n-items-too-large-for-vocab", ["--data.init_args.n_items", "300"],
     "vocab_size=512 is too small for n_items=300: a trial needs n_items study items and n_items distinct "
     "distractors, so vocab_size must be at least 600"),
    ("n-items-zero", ["--data.init_args.n_items", "0"], "n_items=0 is invalid: it must be at least 1"),
    ("n-items-negative", ["--data.init_args.n_items", "-5"], "n_items=-5 is invalid: it must be at least 1"),
    ("n-items-huge", ["--data.init_args.n_items", "200000", "--data.init_args.vocab_size", "1000000"],
     ("n_items=200000 needs ",
      " GiB for the validation and test accuracy matrices, more than the ",
      " GiB of memory of this machine: lower them")),
    ("vocab-huge", ["--data.init_args.vocab_size", "1000000000000"],
     ("vocab_size=1000000000000, d_model=64 need ", " GiB for the embedding, more than the ")),
    ("batch-zero", ["--data.init_args.batch_size", "0"], "batch_size=0 is invalid: it must be at least 1"),
    ("batch-negative", ["--data.init_args.batch_size", "-4"], "batch_size=-4 is invalid: it must be at least 1"),
    ("test-sets-zero", ["--data.init_args.num_test_sets", "0"], "num_test_sets=0 is invalid: it must be at least 1"),
    ("held-out-too-few", ["--data.init_args.num_held_out", "5"],
     "num_held_out=5 is too small: it must hold num_test_sets + num_val_sets = 272 sets"),
    ("p-distractor-above-one", ["--data.init_args.p_distractor", "1.5"],
     "p_distractor=1.5 is invalid: it must lie in [0, 1]"),
    ("p-distractor-nan", ["--data.init_args.p_distractor", "nan"], "--data.init_args.p_distractor nan: expected float"),
    ("num-workers-negative", ["--data.init_args.num_workers", "-1"],
     "num_workers=-1 is invalid: it must be at least 0"),
    ("condition-unknown", ["--data.init_args.condition", "halves"],
     "--data.init_args.condition halves: expected one of 'half', 'uniform'"),
    ("backbone-misspelt", ["--model.init_args.backbone", "S4Dbackbone"],
     ("backbone 'S4Dbackbone' is not registered: did you mean S4DBackbone or S4Backbone",
      "registered backbones: DeltaNetBackbone, ", "LSTMBackbone, ")),
    ("d-model-zero", ["--model.init_args.backbone.init_args.d_model", "0"],
     "d_model=0 is invalid: it must be at least 1"),
    ("d-model-huge", ["--model.init_args.backbone.init_args.d_model", "10000000000"],
     ("d_model=10000000000, d_state=64 need ", " GiB for the layer's weights, more than the ")),
    ("d-state-odd", ["--model.init_args.backbone.init_args.d_state", "7"],
     "d_state=7 is invalid: it must be even and at least 2 (conjugate pairs)"),
    ("dt-min-negative", ["--model.init_args.backbone.init_args.dt_min", "-0.01"],
     "dt_min=-0.01, dt_max=0.1 is not a valid Δt range: it needs 0 < dt_min <= dt_max"),
    ("dt-min-above-max", ["--model.init_args.backbone.init_args.dt_min", "0.5"],
     "dt_min=0.5, dt_max=0.1 is not a valid Δt range: it needs 0 < dt_min <= dt_max"),
    ("lr-zero", ["--model.init_args.lr", "0"], "lr=0.0 is invalid: it must be positive"),
    ("lr-nan", ["--model.init_args.lr", "nan"], "--model.init_args.lr nan: expected float"),
    ("betas-above-one", ["--model.init_args.betas", "[1.5, 0.9]"],
     "betas=(1.5, 0.9) is invalid: both must lie in [0, 1)"),
    ("warmup-negative", ["--model.init_args.warmup_steps", "-1"], "warmup_steps=-1 is invalid: it must be at least 0"),
    ("max-steps-unbounded", ["--trainer.max_steps", "-1"],
     "trainer.max_steps=-1 is invalid: the training stream is endless, so a run needs a budget of at least 1 step"),
    ("max-steps-zero", ["--trainer.max_steps", "0"],
     "trainer.max_steps=0 is invalid: the training stream is endless, so a run needs a budget of at least 1 step"),
    ("max-steps-not-a-number", ["--trainer.max_steps", "many"], "--trainer.max_steps many: expected int"),
    ("checkpoint-steps-zero", ["--checkpoint.every_n_train_steps", "0"],
     "every_n_train_steps=0 is invalid: it must be at least 1 (or null)"),
    ("checkpoint-minutes-negative", ["--checkpoint.every_n_minutes", "-5"],
     "every_n_minutes=-5.0 is invalid: it must be positive (or null)"),
    ("unknown-key", ["--trainer.max_stepz", "3"],
     "unknown option --trainer.max_stepz: did you mean --trainer.max_steps?"),
    ("nested-null-not-allowed", ["--model.init_args.backbone.init_args.d_model", "null"],
     "--model.init_args.backbone.init_args.d_model null: expected int (null is not one of its values)"),
    ("unknown-model-key", ["--model.init_args.lrr", "0.1"],
     "unknown option --model.init_args.lrr: did you mean --model.init_args.lr?"),
    ("ckpt-missing", ["--ckpt_path", "{tmp}/missing.ckpt"],
     "ckpt_path={tmp}/missing.ckpt does not exist: give the path of a checkpoint file"),
    ("ckpt-empty", ["--ckpt_path", "{tmp}/empty.ckpt"],
     "ckpt_path={tmp}/empty.ckpt is not a readable Lightning checkpoint: the file is empty"),
    ("ckpt-truncated", ["--ckpt_path", "{tmp}/truncated.ckpt"],
     "ckpt_path={tmp}/truncated.ckpt is not a readable Lightning checkpoint: the file is truncated or corrupted"),
    ("ckpt-not-torch", ["--ckpt_path", QUICKSTART],
     f"ckpt_path={QUICKSTART} is not a readable Lightning checkpoint: it is not a torch file"),
    ("ckpt-other-model", ["--ckpt_path", "{lstm}/checkpoints/last.ckpt"],
     "ckpt_path={lstm}/checkpoints/last.ckpt does not match the config: model.init_args.backbone.class_path: "
     "the config says primacy.backbones.s4d.S4DBackbone, the checkpoint primacy.backbones.lstm.LSTMBackbone; "
     "use the run's own config.yaml, or another checkpoint"),
    ("root-below-a-file", ["--trainer.default_root_dir", "{file}/run"],
     "trainer.default_root_dir={file}/run lies below the file {file}, an existing file, not a directory"),
    ("root-is-a-file", ["--trainer.default_root_dir", "{file}"],
     "trainer.default_root_dir={file} is a file: give a directory (an existing file is never replaced)"),
]
CONFIG_FILES = [
    ("config-missing", ["--config", "{tmp}/nowhere.yaml"], "--config {tmp}/nowhere.yaml does not exist"),
    ("config-malformed", ["--config", "{tmp}/malformed.yaml"], ("--config {tmp}/malformed.yaml is not valid YAML: ",)),
    ("config-empty", ["--config", "{tmp}/empty.yaml"],
     "--config {tmp}/empty.yaml is empty: a config is a YAML mapping, e.g. 'trainer: {{max_steps: 100}}'"),
    ("config-model-misspelt", ["--config", "{tmp}/model-misspelt.yaml"],
     ("model.class_path primacy.models.free_recall.FreeRecalModel in --config {tmp}/model-misspelt.yaml is not found "
      "(module 'primacy.models.free_recall' has no attribute 'FreeRecalModel'): did you mean FreeRecallModel? "
      "registered models: ", "SequenceModel")),
    ("config-task-misspelt", ["--config", "{tmp}/task-misspelt.yaml"],
     ("data.class_path primacy.tasks.free_recal.FreeRecallTask in --config {tmp}/task-misspelt.yaml is not found "
      "(No module named 'primacy.tasks.free_recal'): did you mean FreeRecallTask? registered tasks: ",
      "VerificationTask")),
    ("config-backbone-misspelt", ["--config", "{tmp}/backbone-misspelt.yaml"],
     ("model.init_args.backbone.class_path primacy.backbones.s4d.S4DBackbon in --config {tmp}/backbone-misspelt.yaml "
      "is not found (module 'primacy.backbones.s4d' has no attribute 'S4DBackbon'): did you mean S4DBackbone? "
      "registered backbones: ", "LSTMBackbone")),
    ("config-null-not-allowed", ["--config", "{tmp}/null-width.yaml"],
     "model.init_args.backbone.init_args.d_model: null in --config {tmp}/null-width.yaml: expected int (null is not "
     "one of its values)"),
]
MISSPELT = {"model-misspelt": ("free_recall.FreeRecallModel", "free_recall.FreeRecalModel"),
            "task-misspelt": ("primacy.tasks.free_recall.FreeRecallTask", "primacy.tasks.free_recal.FreeRecallTask"),
            "backbone-misspelt": ("class_path: S4DBackbone", "class_path: primacy.backbones.s4d.S4DBackbon"),
            "null-width": ("d_model: 128", "d_model: null")}  # file: (text of quickstart-free-recall.yaml, changed)
TEST = [
    ("test-other-model", ["--config", "{run}/config.yaml", "--ckpt_path", "{lstm}/checkpoints/last.ckpt"],
     "ckpt_path={lstm}/checkpoints/last.ckpt does not match the config: model.init_args.backbone.class_path: the "
     "config says primacy.backbones.s4d.S4DBackbone, the checkpoint primacy.backbones.lstm.LSTMBackbone; use the "
     "run's own config.yaml, or another checkpoint"),
    ("test-truncated-ckpt", ["--config", "{run}/config.yaml", "--ckpt_path", "{tmp}/truncated.ckpt"],
     "ckpt_path={tmp}/truncated.ckpt is not a readable Lightning checkpoint: the file is truncated or corrupted"),
    ("test-other-size", ["--config", "{run}/config.yaml", "--ckpt_path", "{run}/checkpoints/last.ckpt",
                         "--model.init_args.backbone.init_args.d_model", "16"],
     "ckpt_path={run}/checkpoints/last.ckpt does not match the config: "
     "model.init_args.backbone.init_args.d_model: the config says 16, the checkpoint 8; use the run's own "
     "config.yaml, or another checkpoint"),
]
COMMANDS = [
    ("fit-a-finished-run", ["fit", "--config", "{run}/config.yaml", *QUIET],
     "trainer.default_root_dir={run} already holds a finished run (step 2 of max_steps=2): choose another "
     "directory, or test it with primacy test --config {run}/config.yaml --ckpt_path "
     "{run}/checkpoints/last.ckpt --trainer.default_root_dir {run}"),
    ("aggregate-missing-run", ["aggregate", "{tmp}/no-run", "--out", "{tmp}/agg"],
     "run directory {tmp}/no-run does not exist: give directories that `primacy fit` made"),
    ("aggregate-out-is-a-file", ["aggregate", "{run}", "--out", "{file}"],
     "out={file} is a file: give a directory (an existing file is never replaced)"),
    ("aggregate-damaged-summary", ["aggregate", "{damaged}", "--out", "{tmp}/agg"],
     ("{damaged}/results/summary.json is damaged (invalid JSON: ",
      "re-test the run with `primacy test --config {damaged}/config.yaml --ckpt_path "
      "{damaged}/checkpoints/last.ckpt --trainer.default_root_dir {damaged}`")),
    ("aggregate-no-runs", ["aggregate", "--out", "{tmp}/agg"],
     "primacy aggregate: the following arguments are required: RUN_DIR (see primacy aggregate --help)"),
    ("kernels-dt-nan", ["kernels", "--dt", "nan", "--out", "{tmp}/k.png"],
     "dt=[nan] is invalid: every Δt must be a positive finite number"),
    ("kernels-dt-negative", ["kernels", "--dt", "-1", "--out", "{tmp}/k.png"],
     "dt=[-1.0] is invalid: every Δt must be a positive finite number"),
    ("kernels-degree-out-of-range", ["kernels", "--degrees", "100", "--out", "{tmp}/k.png"],
     "degrees=[100] are out of range: each must lie in [0, state_size=64)"),
    ("kernels-length-zero", ["kernels", "--length", "0", "--out", "{tmp}/k.png"],
     "length=0 is invalid: it must be at least 1"),
    ("kernels-state-size-huge", ["kernels", "--state-size", "10000000", "--out", "{tmp}/k.png"],
     ("state_size=10000000, length=256 need ", " GiB for the HiPPO matrices and responses")),
    ("kernels-measure-unknown", ["kernels", "--measure", "legt", "--out", "{tmp}/k.png"],
     ("primacy kernels: argument --measure: invalid choice: 'legt' (choose from ", "legs", "lagt", "fout")),
    ("kernels-out-below-a-file", ["kernels", "--out", "{file}/k.png"],
     "out={file}/k.png lies below the file {file}, an existing file, not a directory"),
    ("kernels-out-format-unknown", ["kernels", "--out", "{tmp}/k.xyz"],
     ("formats=['xyz'] are unknown: choose among ", "pdf", "png", "svg")),
    ("models-extra-argument", ["models", "--all"],
     "primacy models: unrecognized arguments: --all (see primacy models --help)"),
    ("analyze-unknown", ["analyze", "heads"],
     "analyze heads is unknown: choose one of icl, ablation, probes, published"),
    ("analyze-icl-missing-config", ["analyze", "icl", "--config", "{tmp}/none.yaml", "--ckpt_path",
                                    "{run}/checkpoints/last.ckpt", "--out", "{tmp}/icl"],
     "config={tmp}/none.yaml does not exist: give a run's config.yaml"),
    ("analyze-icl-no-exact-form", ["analyze", "icl", "--config", "{lstm}/config.yaml", "--ckpt_path",
                                   "{lstm}/checkpoints/last.ckpt", "--out", "{tmp}/icl"],
     "config={lstm}/config.yaml has backbone LSTMBackbone: analyze icl needs attention or an exact token-to-token "
     "influence (Transformer, S4, S4D, Mamba, xLSTM with mLSTM blocks)"),
    ("analyze-icl-out-is-a-file", ["analyze", "icl", "--config", "{induction}/config.yaml", "--ckpt_path",
                                   "{induction}/checkpoints/last.ckpt", "--out", "{file}"],
     "out={file} is a file: give a directory (an existing file is never replaced)"),
    ("analyze-icl-prompts-zero", ["analyze", "icl", "--config", "{induction}/config.yaml", "--ckpt_path",
                                  "{induction}/checkpoints/last.ckpt", "--out", "{tmp}/icl", "--prompts", "0"],
     "prompts=0 is invalid: it must be at least 1"),
    ("analyze-ablation-heads-missing", ["analyze", "ablation", "--config", "{induction}/config.yaml", "--ckpt_path",
                                        "{induction}/checkpoints/last.ckpt", "--out", "{tmp}/abl", "--heads",
                                        "{tmp}/heads.csv"],
     "heads={tmp}/heads.csv does not exist: run `primacy analyze icl` first and give its heads.csv"),
    ("analyze-icl-required-missing", ["analyze", "icl", "--config", "x"],
     "primacy analyze icl: the following arguments are required: --out (see primacy analyze icl --help)"),
    ("analyze-icl-no-checkpoint", ["analyze", "icl", "--config", "{induction}/config.yaml", "--out", "{tmp}/icl"],
     "analyze icl needs a model: --config with --ckpt_path (a run trained here) or --hf_model (a pretrained model)"),
    ("analyze-icl-dtype-of-a-run", ["analyze", "icl", "--config", "{induction}/config.yaml", "--ckpt_path",
                                    "{induction}/checkpoints/last.ckpt", "--out", "{tmp}/icl", "--dtype", "float16"],
     "dtype=float16 only applies to --hf_model: a run's checkpoint loads as it was trained"),
    ("analyze-icl-n-items-five", ["analyze", "icl", "--config", "{induction}/config.yaml", "--ckpt_path",
                                  "{induction}/checkpoints/last.ckpt", "--out", "{tmp}/icl", "--n_items", "5"],
     "n_items=5 is invalid: the lag-CRP over lags ±5 with query_window='paper' needs n_items >= 11"),
]


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad-input")
    run, lstm = tmp / "run", tmp / "lstm"
    main(["fit", *TINY_RUNS["verification"], "--trainer.max_steps", "2", "--trainer.default_root_dir", str(run)])
    main(["fit", *TINY_RUNS["verification"], "--trainer.max_steps", "1", "--test_after_fit", "false",
          "--model.init_args.backbone", "LSTMBackbone", "--model.init_args.backbone.init_args.d_model", "8",
          "--trainer.default_root_dir", str(lstm)])
    induction = tmp / "induction"
    main(["fit", *TINY_RUNS["induction"], "--trainer.max_steps", "1", "--test_after_fit", "false",
          "--trainer.default_root_dir", str(induction)])
    damaged = tmp / "damaged"
    shutil.copytree(run, damaged)
    (damaged / "results" / "summary.json").write_text('{"overall_accuracy": 0.5, ')
    (tmp / "file").write_text("a plain file")
    (tmp / "empty.ckpt").write_bytes(b"")
    ckpt = (run / "checkpoints" / "last.ckpt").read_bytes()
    (tmp / "truncated.ckpt").write_bytes(ckpt[: len(ckpt) // 2])
    (tmp / "malformed.yaml").write_text("trainer:\n  max_steps: [1, 2\n")
    (tmp / "empty.yaml").write_text("")
    free_recall = (ROOT / "configs" / "quickstart-free-recall.yaml").read_text()
    for name, (right, wrong) in MISSPELT.items():
        assert right in free_recall, name
        (tmp / f"{name}.yaml").write_text(free_recall.replace(right, wrong))
    return {"tmp": tmp, "run": run, "lstm": lstm, "induction": induction, "file": tmp / "file", "damaged": damaged}


def fails_in_one_line(args: list[str], expected: str | tuple[str, ...], places: dict, capsys) -> None:
    args = [a.format(**places) for a in args]
    before = {name: snapshot(places[name]) for name in ("run", "lstm", "induction")}
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("primacy: error: "), err
    if isinstance(expected, str):
        assert lines[0] == f"primacy: error: {expected.format(**places)}"
    else:
        assert all(part.format(**places) in lines[0] for part in expected), lines[0]
    for name, files in before.items():
        assert snapshot(places[name]) == files, f"the {name} run was changed"


@pytest.mark.parametrize("args,expected", [c[1:] for c in FIT], ids=[c[0] for c in FIT])
def test_fit(args, expected, places, capsys, tmp_path):
    root = ["--trainer.default_root_dir", str(tmp_path / "new")]
    fails_in_one_line(["fit", "--config", QUICKSTART, *QUIET, *root, *args], expected, places, capsys)
    assert not (tmp_path / "new" / "checkpoints").exists(), "nothing was trained"


FREE_RECALL = [
    ("n-items-too-large-for-vocab", ["--data.init_args.n_items", "600"],
     "vocab_size=514 is too small for n_items=600: the model's tokens are the task's K = 512 items, the cue and "
     "stop, and a list of distinct items needs K >= 600"),
    ("unknown-loss", ["--model.init_args.loss", "hungarian"],
     "--model.init_args.loss hungarian: expected one of 'set_mass', 'uniform'"),
    ("unknown-teacher-forcing", ["--model.init_args.teacher_forcing", "ranked"],
     "--model.init_args.teacher_forcing ranked: expected one of 'sampled', 'greedy'"),
    ("unknown-decoding", ["--model.init_args.decoding", "beam"],
     "--model.init_args.decoding beam: expected one of 'greedy', 'sampled'"),
    ("temperature-zero", ["--model.init_args.temperature", "0"], "temperature=0.0 is invalid: it must be > 0"),
]


@pytest.mark.parametrize("args,expected", [c[1:] for c in FREE_RECALL], ids=[c[0] for c in FREE_RECALL])
def test_fit_free_recall(args, expected, places, capsys, tmp_path):
    config = str(ROOT / "configs" / "quickstart-free-recall.yaml")
    root = ["--trainer.default_root_dir", str(tmp_path / "new")]
    fails_in_one_line(["fit", "--config", config, *QUIET, *root, *args], expected, places, capsys)
    assert not (tmp_path / "new" / "checkpoints").exists(), "nothing was trained"


HUGE = "100000000000"
TOO_LONG = (" GiB for a batch of ", "-token sequences (their token ids alone), more than the ",
            " GiB of memory of this machine: lower them")
# (id, config, arguments, parts of the message): sequences too long for memory, refused when the task is built, before
# any training or testing; a test's delays as well as training's.
SEQUENCE_LENGTHS = [
    ("reconstruction-delay", "quickstart-reconstruction", ["--data.init_args.delay", f"[0, {HUGE}]"],
     (f"n_items=12, delay=(0, {HUGE}), batch_size=64 need ", "100000000024-token", *TOO_LONG)),
    ("reconstruction-test-delays", "quickstart-reconstruction", ["--data.init_args.test_delays", f"[{HUGE}]"],
     (f"n_items=12, delay=(0, 16), test_delays=[{HUGE}], batch_size=64 need ", "100000000024-token", *TOO_LONG)),
    ("mqar-length", "quickstart-mqar", ["--data.init_args.length", HUGE],
     (f"length={HUGE}, batch_size=64 need ", *TOO_LONG)),
    ("selective-copying-length", "quickstart-selective-copying", ["--data.init_args.length", HUGE],
     (f"length={HUGE}, batch_size=64 need ", *TOO_LONG)),
    ("induction-length", "induction-quickstart", ["--data.init_args.length", HUGE],
     (f"length={HUGE}, prompt_items=", *TOO_LONG)),
]


@pytest.mark.parametrize("config,args,expected", [c[1:] for c in SEQUENCE_LENGTHS],
                         ids=[c[0] for c in SEQUENCE_LENGTHS])
def test_sequences_too_long_for_memory(config, args, expected, places, capsys, tmp_path):
    root = ["--trainer.default_root_dir", str(tmp_path / "new")]
    fails_in_one_line(["fit", "--config", str(ROOT / "configs" / f"{config}.yaml"), *QUIET, *root, *args], expected,
                      places, capsys)
    assert not (tmp_path / "new").exists(), "nothing was written"


def test_a_nested_null_on_the_command_line_is_null(tmp_path):
    """jsonargparse read a null two classes deep as the text 'None' (and refused it); it is null, as in a config."""
    config = parse_run(["fit", "--config", str(ROOT / "configs" / "quickstart-free-recall-lstm.yaml"),
                        "--model.init_args.backbone.init_args.max_timescale", "null",
                        "--model.init_args.backbone.init_args.n_layers", "2",
                        "--trainer.default_root_dir", str(tmp_path / "new")])
    backbone = config.model.init_args.backbone.init_args
    assert backbone.max_timescale is None and backbone.n_layers == 2 and backbone.d_model == 128


@pytest.mark.parametrize("args,expected", [c[1:] for c in CONFIG_FILES], ids=[c[0] for c in CONFIG_FILES])
@pytest.mark.parametrize("subcommand", ["fit", "test"])
def test_config_files(subcommand, args, expected, places, capsys):
    fails_in_one_line([subcommand, *args], expected, places, capsys)


@pytest.mark.parametrize("args,expected", [c[1:] for c in TEST], ids=[c[0] for c in TEST])
def test_test(args, expected, places, capsys):
    fails_in_one_line(["test", *QUIET, *args], expected, places, capsys)


@pytest.mark.parametrize("args,expected", [c[1:] for c in COMMANDS], ids=[c[0] for c in COMMANDS])
def test_other_commands(args, expected, places, capsys):
    fails_in_one_line(args, expected, places, capsys)
    assert not (places["tmp"] / "icl").exists() and not (places["tmp"] / "agg").exists(), "no output was started"


# Overrides that no run of a figure or an atlas can take: refused as `primacy fit` refuses them at its start, before
# any run is launched here or submitted to SLURM.
LAUNCHES = [
    ("reproduce-n-items-zero", ["reproduce", "humans", "--seeds", "1", "--panels", "free-recall-lstm-L16",
                                "--data.init_args.n_items", "0"], "n_items=0 is invalid: it must be at least 1"),
    ("reproduce-vocab-too-small", ["reproduce", "induction", "--seeds", "1", "--data.init_args.vocab_size", "2"],
     "vocab_size=2 is invalid: it must be at least 3 (BOS and two tokens)"),
    ("atlas-p-distractor-above-one", ["atlas", "verification", "--rows", "LSTM", "--seeds", "1",
                                      "--data.init_args.p_distractor", "1.5"],
     "p_distractor=1.5 is invalid: it must lie in [0, 1]"),
]


@pytest.mark.parametrize("args,expected", [c[1:] for c in LAUNCHES], ids=[c[0] for c in LAUNCHES])
@pytest.mark.parametrize("launcher", ["local", "slurm"])
def test_launchers_refuse_an_override_no_run_takes(launcher, args, expected, places, capsys, tmp_path, monkeypatch):
    _, script = fake_slurm(tmp_path, monkeypatch, 4242)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.md").write_text("an earlier figure's notes")
    fails_in_one_line([*args, "--out", str(out), "--launcher", launcher], expected, places, capsys)
    assert snapshot(out) == {out / "notes.md": b"an earlier figure's notes"}, "nothing was launched or written"
    assert not script.exists(), "nothing was submitted"


def test_forked_processes_on_several_threads_are_refused(places, capsys):
    """Processes forked from one that has run torch on several threads hang in the first OpenMP region they enter
    (seen: `primacy test` with ddp_fork on 2 threads waited forever in MKL's FFT), so that launch is refused."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        command = ["test", *QUIET, "--config", "{run}/config.yaml", "--ckpt_path", "{run}/checkpoints/last.ckpt",
                   "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp_fork"]
        fails_in_one_line(command, "trainer.strategy=ddp_fork forks processes from one that runs torch on 2 threads, "
                          "and a forked process hangs in the OpenMP threads it inherits: use trainer.strategy=ddp, or "
                          "set OMP_NUM_THREADS=1", places, capsys)
    finally:
        torch.set_num_threads(threads)


def test_a_config_of_a_plugin_that_is_not_installed_says_what_to_install(tmp_path):
    """A new Python that ignores the plugins' entry points (PRIMACY_BUILTINS_ONLY=1), as after `pip uninstall
    primacy-xlstm`: in this process the plugin's classes are imported already, so only a new one can tell."""
    command = [sys.executable, "-m", "primacy", "fit", "--config", str(ROOT / "configs" / "quickstart-xlstm.yaml"),
               *QUIET, "--trainer.default_root_dir", str(tmp_path / "new"), "--trainer.max_steps", "1"]
    done = subprocess.run(command, env={**os.environ, BUILTINS_ONLY: "1"}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "primacy: error: --model.init_args.backbone XLSTMBackbone: backbone 'XLSTMBackbone' is provided by the plugin "
        "primacy-xlstm (pip install -e plugins/primacy-xlstm from a primacy checkout), which is not installed"]
    assert not (tmp_path / "new" / "checkpoints").exists()


@pytest.mark.parametrize("option", [["--model.init_args.backbone", "XLSTMBackbone"],
                                    ['--model.init_args.backbone={{"class_path": "XLSTMBackbone"}}'],  # {{: format
                                    ["--model.init_args.backbone.class_path", "XLSTMBackbone"]])
def test_a_plugin_that_is_not_installed_is_named_on_the_command_line_too(option, places, capsys, monkeypatch):
    """As the config above, said before Lightning's imports (as if primacy-xlstm were uninstalled: its entry points
    are hidden from the registry)."""
    shown = registry._entry_points

    def entry_points(kind: str = "backbone") -> dict:
        return {name: ep for name, ep in shown(kind).items() if name != "XLSTMBackbone"}

    monkeypatch.setattr(registry, "_entry_points", entry_points)
    fails_in_one_line(["fit", "--config", QUICKSTART, *QUIET, *option, "--trainer.default_root_dir", "{tmp}/new"],
                      "--model.init_args.backbone XLSTMBackbone: backbone 'XLSTMBackbone' is provided by the plugin "
                      "primacy-xlstm (pip install -e plugins/primacy-xlstm from a primacy checkout), which is not "
                      "installed", places, capsys)


def test_a_read_only_run_directory_is_refused_before_work(places, capsys, tmp_path, monkeypatch):
    """As root every directory is writable, so the check's answer for an ordinary user is simulated."""
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if str(path) == str(locked) else real_access(path, mode))
    fails_in_one_line(["fit", "--config", QUICKSTART, *QUIET, "--trainer.default_root_dir", str(locked / "run")],
                      f"trainer.default_root_dir={locked}/run cannot be written: {locked} is read-only for this user",
                      places, capsys)


def test_a_finished_run_still_tests_after_all_of_this(places):
    """The shared runs were left intact: their checkpoint still loads and describes the model of their config."""
    checkpoint = torch.load(places["run"] / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 2
    assert json.loads((places["run"] / "results" / "summary.json").read_text())["n_items"] == 4
