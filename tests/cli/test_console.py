"""A command line a person can use: short help that shows the config's own options, one line for a mistyped option,
a bad value or a broken config file, and run output without third-party noise or ANSI codes."""

import io
import re
import sys
import warnings

import pytest
from conftest import QUIET, ROOT, TINY_RUNS
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar

from primacy.cli import main
from primacy.cli.console import KNOWN_WARNINGS
from primacy.cli.lightning import TERMINAL_REFRESH_BATCHES, PrimacyCLI

QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")
COMMANDS = ("fit", "validate", "test", "predict", "aggregate", "analyze", "atlas", "claims", "cmr_fit", "cmr_grid",
            "humans", "kernels", "models", "reproduce")


@pytest.fixture(autouse=True)
def columns(monkeypatch):
    """Help is wrapped to the terminal's width (60 to 120 columns): read here at 100, whatever runs the tests."""
    monkeypatch.setenv("COLUMNS", "100")


def run(args, capsys):
    """(exit code, stdout, stderr) of ``primacy args``."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.mark.parametrize("args", [["--help"], ["-h"]])
def test_help_lists_every_command_on_one_screen(args, capsys):
    code, out, _ = run(args, capsys)
    assert code == 0
    listed = [match.group(1) for line in out.splitlines() if (match := re.match(r"  (\w+) ", line))]
    assert listed == list(COMMANDS)
    assert "primacy fit --help" in out and len(out.splitlines()) <= 30


def test_bare_command_is_a_usage_error_with_the_same_list(capsys):
    code, out, err = run([], capsys)
    assert code == 2 and out == ""
    assert all(f"  {name} " in err for name in COMMANDS)


def test_fit_help_shows_the_task_model_and_backbone_options_of_the_config(capsys):
    code, out, _ = run(["fit", "--config", QUICKSTART, "--help"], capsys)
    assert code == 0
    lines = out.splitlines()
    first = "\n".join(lines[:60])
    assert "Task VerificationTask (primacy.tasks.verification)" in first
    assert re.search(r"--data\.init_args\.n_items INT +study list length L .*\(default 32\)", first)
    assert re.search(r"--model\.init_args\.lr FLOAT +peak learning rate\. \(default 0\.001\)", first)
    assert "--model.init_args.backbone.init_args.d_state INT" in first
    assert "primacy fit --help-all" in out, "Lightning's full help stays reachable"
    assert len(lines) < 120, "Lightning's own help is over 500 lines"


def test_fit_help_without_a_config_says_how_to_choose_one(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # the example config is looked up in ./configs
    code, out, _ = run(["fit", "--help"], capsys)
    assert code == 0
    assert "e.g. primacy fit --config configs/quickstart.yaml --help" in " ".join(out.split())
    for name in ("SequenceModel", "VerificationTask", "S4DBackbone"):
        assert name in out


def test_help_all_is_lightnings_full_help(capsys):
    code, out, _ = run(["fit", "--config", QUICKSTART, "--help-all"], capsys)
    assert code == 0 and "--trainer.max_epochs" in out


@pytest.mark.parametrize("config", [[], ["--config", QUICKSTART]])
@pytest.mark.parametrize("option,name,expected", [
    ("--model.help", "SequenceModel", "primacy.models.lists.SequenceModel"),
    ("--data.help", "VerificationTask", "primacy.tasks.verification.VerificationTask"),
    ("--model.init_args.backbone.help", "S4DBackbone", "primacy.backbones.s4d.S4DBackbone"),
])
def test_a_class_help_takes_its_short_name(config, option, name, expected, capsys):
    code, out, _ = run(["fit", *config, option, name], capsys)
    assert code == 0 and expected in out


@pytest.mark.parametrize("args,line", [
    (["--trainer.max_stepz", "3"], "unknown option --trainer.max_stepz: did you mean --trainer.max_steps?"),
    (["--data.init_args.n_itmes", "8"],
     "unknown option --data.init_args.n_itmes: did you mean --data.init_args.n_items?"),
    (["--model.init_args.lrr", "0.1"], "unknown option --model.init_args.lrr: did you mean --model.init_args.lr?"),
    (["--model.init_args.backbone.init_args.d_stat", "8"],
     "unknown option --model.init_args.backbone.init_args.d_stat: did you mean "
     "--model.init_args.backbone.init_args.d_state?"),
    (["--n_items", "8"], "unknown option --n_items: did you mean --data.init_args.n_items?"),
    (["--trainer.max_steps", "abc"], "--trainer.max_steps abc: expected int"),
    (["--data.init_args.condition", "halves"], "--data.init_args.condition halves: expected one of 'half', 'uniform'"),
    (["--trainer.enable_progress_bar", "maybe"], "--trainer.enable_progress_bar maybe: expected bool or null"),
    (["--data", "VerificationTsk"], "--data VerificationTsk is not a known task: did you mean VerificationTask?"),
])
def test_a_mistyped_option_or_bad_value_is_one_line(args, line, capsys):
    code, out, err = run(["fit", "--config", QUICKSTART, *args], capsys)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith(f"primacy: error: {line}")


def test_an_unknown_key_in_a_config_file_is_one_line(tmp_path, capsys):
    config = tmp_path / "typo.yaml"
    config.write_text("data:\n  init_args:\n    n_itmes: 8\n")
    code, _, err = run(["fit", "--config", QUICKSTART, "--config", str(config)], capsys)
    assert code == 2
    assert err == ("primacy: error: unknown key data.init_args.n_itmes in the config: "
                   "did you mean data.init_args.n_items?\n")


@pytest.mark.parametrize("text,problem", [("model: [\n", "is not valid YAML: "), ("", "is empty"),
                                          ("- 1\n- 2\n", "is not a mapping of settings")])
def test_a_broken_config_file_is_one_line_naming_it(text, problem, tmp_path, capsys):
    config = tmp_path / "x.yaml"
    config.write_text(text)
    code, _, err = run(["fit", "--config", str(config)], capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"primacy: error: --config {config} {problem}")


def test_a_short_run_prints_no_ansi_codes_and_no_silenced_warnings(tmp_path, capfd):
    tiny = TINY_RUNS["verification"]
    i = tiny.index(QUIET[0])
    assert tiny[i:i + len(QUIET)] == QUIET
    args = ["fit", *tiny[:i], *tiny[i + len(QUIET):],  # offline wandb logger and progress bar, as by default
            "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.max_steps", "2",
            "--trainer.val_check_interval", "2"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(args)
    out, err = capfd.readouterr()
    assert "\x1b[" not in out + err and "\r" not in out + err
    assert "step 2/2" in err, "plain progress lines when the output is not a terminal"
    assert "litlogger" not in out + err
    silenced = [str(w.message) for w in caught if any(re.match(m, str(w.message)) for m, _, _ in KNOWN_WARNINGS)]
    assert silenced == []


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_in_a_terminal_the_progress_bar_is_redrawn_every_few_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stderr", _Terminal())
    tiny = TINY_RUNS["verification"]
    i = tiny.index(QUIET[0])
    cli = PrimacyCLI(args=["fit", *tiny[:i], "--trainer.logger", "false", *tiny[i + len(QUIET):],
                           "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.max_steps", "2",
                           "--test_after_fit", "false"])
    bars = [c for c in cli.trainer.callbacks if isinstance(c, ProgressBar)]
    assert len(bars) == 1 and isinstance(bars[0], TQDMProgressBar), "Lightning's bar, not plain lines"
    assert bars[0].refresh_rate == TERMINAL_REFRESH_BATCHES > 1, "not redrawn at every batch"


def test_a_plugins_info_log_is_shown_once_and_only_by_the_first_process(monkeypatch, capfd):
    """A plugin says which kernel it chose through its package's logger (primacy_mamba, primacy_xlstm): without a
    handler of primacy's its INFO records reached no one, so the choice a run made was never on its console."""
    import logging

    from lightning.pytorch.utilities import rank_zero_only

    from primacy import registry
    from primacy.cli import console

    monkeypatch.setattr(registry, "plugin_packages", lambda: ["some_plugin"])
    logger = logging.getLogger("some_plugin")
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(logger, "level", logging.NOTSET)
    monkeypatch.setattr(logger, "propagate", False)  # here only: pytest's own handlers would show it too
    console.setup()
    console.setup()  # again: still one handler
    logger.info("SomeBackbone uses the fast path")
    monkeypatch.setattr(rank_zero_only, "rank", 1, raising=False)
    logger.info("from the second process")
    err = capfd.readouterr().err
    assert err.count("SomeBackbone uses the fast path") == 1 and "second process" not in err


def test_every_installed_plugin_package_is_named():
    from primacy import registry

    assert {"primacy_mamba", "primacy_xlstm"} <= set(registry.plugin_packages())
