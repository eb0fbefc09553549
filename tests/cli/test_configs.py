"""Every YAML in configs/, and every run a figure composes from parts (the recall-like-people grid, and the figure
files kept among the parts), parses and builds its trainer, model and task, whose first training batch gives a finite
loss; one config of each task x backbone pair (the smallest: a quickstart or CPU-scale one, a composed run where no
file has the pair) trains a batch, validates, tests and writes its results, as `primacy fit` does, and one config of
each task its figures too (they depend on the task's kind of result, not on the backbone; drawing them is about a
second a config)."""

import functools
import json
import math

import pytest
import torch
import yaml
from conftest import ROOT
from support.configs import TASK_SIZES, BuildOnly, Built

from primacy.cli import main
from primacy.cli.lightning import PrimacyCLI
from primacy.testing.runs import NO_FIGURES
from primacy.workflows.paper import phenomena
from primacy.workflows.paper.figure_files import read_figure

# atlas files (rows of backbones, tests/workflows/atlas/test_atlas.py); their configs below
ATLAS_FILES = ROOT / "configs" / "atlas"
PARTS = ROOT / "configs" / "parts"  # pieces of runs, composed by several --config (tests/cli/test_config_parts.py)
FILES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "configs").rglob("*.yaml")
               if p.parent != ATLAS_FILES and PARTS not in p.parents)
COMPOSED = {f"parts:{name}": tuple(f"configs/{part}" for part in parts)  # each a run's --config files, in order
            for name, parts in phenomena.cells().items()}
# figure files kept among the parts (configs/parts/recall-like-people/s4d-memory-span.yaml): each panel's run
FIGURE_FILES = sorted(p for p in PARTS.rglob("*.yaml") if "panels" in (yaml.safe_load(p.read_text()) or {}))
COMPOSED |= {f"figure:{spec.name}/{panel.label}": tuple((spec.config_root / part).resolve().relative_to(ROOT).as_posix()
                                                          for part in panel.config_parts("cpu"))
             for spec in map(read_figure, FIGURE_FILES) for panel in spec.panels}
CONFIGS = FILES + sorted(COMPOSED)


def merged(base: dict, later: dict) -> dict:
    """Two configs' content as several --config read them, for the keys read here: dictionaries merged, the later
    one's values winning."""
    out = dict(base)
    for key, value in later.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@functools.cache
def content(config: str) -> dict:
    """A config file's content, or a composed run's parts merged."""
    found: dict = {}
    for path in COMPOSED.get(config, (config,)):
        found = merged(found, yaml.safe_load((ROOT / path).read_text()))
    return found


@functools.cache
def pair(config: str) -> tuple[str, str]:
    """(task, backbone) class names of a config."""
    return (content(config)["data"]["class_path"].rsplit(".", 1)[-1],
            content(config)["model"]["init_args"]["backbone"]["class_path"].rsplit(".", 1)[-1])


# Paper-scale configs last, so each pair's representative is its smallest config; a composed run only where no file
# has its pair.
REPRESENTATIVES = {}
for _config in sorted(CONFIGS, key=lambda c: (c.startswith("configs/paper/"), c in COMPOSED, c)):
    REPRESENTATIVES.setdefault(pair(_config), _config)
DRAWS = {}  # task -> the representative that also draws the figures, validation's and test's
for _config in sorted(REPRESENTATIVES.values()):
    DRAWS.setdefault(pair(_config)[0], _config)


@functools.cache
def callbacks_without_figures(config: str) -> list[str]:
    """The config's callbacks (its trackers) given again with ``formats: []``: their histories without figures."""
    callbacks = content(config)["trainer"].get("callbacks")
    if not callbacks:
        return []
    quiet = [{**callback, "init_args": {**callback.get("init_args", {}), "formats": []}} for callback in callbacks]
    return ["--trainer.callbacks", json.dumps(quiet)]


def args(config: str, run, draw: bool = True) -> list[str]:
    figures = ["--results.formats", "[png]"] if draw else [*NO_FIGURES, *callbacks_without_figures(config)]
    files = [arg for path in COMPOSED.get(config, (config,)) for arg in ("--config", str(ROOT / path))]
    return ["fit", *files, "--trainer.logger", "false", "--trainer.enable_progress_bar",
            "false", "--trainer.enable_model_summary", "false", "--trainer.default_root_dir", str(run),
            "--trainer.accelerator", "cpu", "--trainer.max_steps", "1", "--trainer.val_check_interval", "1",
            "--trainer.limit_val_batches", "2",  # an int > 1 (as "1" would mean 100 %)
            "--trainer.limit_test_batches", "2", "--trainer.num_sanity_val_steps", "0",
            "--data.init_args.batch_size", "4", *TASK_SIZES[pair(config)[0]], *figures]


def test_every_pair_has_a_representative():
    assert {pair(config) for config in CONFIGS} == set(REPRESENTATIVES)
    assert not any(config.startswith("configs/paper/") for config in REPRESENTATIVES.values())


@pytest.mark.parametrize("config", sorted(set(CONFIGS) - set(REPRESENTATIVES.values())))
def test_config_builds_and_computes_a_finite_loss(config, tmp_path):
    """Every config but the representatives, which the next test runs through training, validation and test."""
    # Without loader workers (the paper configs ask for 2): an endless stream's workers, left after one batch, take
    # 10 s to shut down whenever the garbage collector gets to them, in whichever test runs then.
    with pytest.raises(Built) as built:
        BuildOnly(args=[*args(config, tmp_path / "run"), "--data.init_args.num_workers", "0"])
    cli = built.value
    task, backbone = pair(config)
    assert type(cli.datamodule).__name__ == task and type(cli.model.backbone).__name__ == backbone
    cli.datamodule.setup("fit")
    batch = next(iter(cli.datamodule.train_dataloader()))
    with torch.no_grad():
        loss, correct = cli.model.training_answers(batch)
    assert math.isfinite(loss.item()) and correct.numel() > 0


@pytest.mark.parametrize("config", sorted(REPRESENTATIVES.values()))
def test_config_runs_one_batch(config, tmp_path, monkeypatch):
    fitted, after_fit = [], PrimacyCLI.after_fit  # the command's CLI and its training loss, kept as training ends

    def record(cli: PrimacyCLI) -> None:
        fitted.append((cli, cli.trainer.logged_metrics["train/loss"].item()))
        after_fit(cli)
    monkeypatch.setattr(PrimacyCLI, "after_fit", record)
    draws = DRAWS[pair(config)[0]] == config
    main(args(config, tmp_path / "run", draws))
    [(cli, loss)] = fitted
    assert (type(cli.datamodule).__name__, type(cli.model.backbone).__name__) == pair(config)
    assert math.isfinite(loss)
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()
    assert (tmp_path / "run" / "results" / "summary.json").is_file()
