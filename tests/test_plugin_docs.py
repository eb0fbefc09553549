"""docs/plugins.md, followed literally: each package it builds (a backbone, a task, a model with its own kind of
result) installs as a distribution, registers, passes its tests (through primacy.testing) and trains by name; the
model's runs test and aggregate through its kind of result."""

import csv
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from primacy.testing import tiny_args, tiny_settings

DOC = (ROOT / "docs" / "plugins.md").read_text()
# the guide's sections, one per plugin: the backbone's, the task's, the model's
BACKBONE, _rest = DOC.split("\n# Writing a task plugin\n")
TASK, MODEL = _rest.split("\n# Writing a model plugin\n")


def doc_files(section: str) -> dict[str, str]:
    """The files a section asks for: a line 'File `path`:' followed by a fenced block."""
    return dict(re.findall(r"^File `([^`]+)`:\n\n```\w*\n(.*?)```", section, flags=re.MULTILINE | re.DOTALL))


def doc_fit_command(section: str) -> list[str]:
    block = next(b for b in re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL) if "primacy fit" in b)
    return shlex.split(block[block.index("primacy fit"):].replace("\\\n", " "))


def doc_commands(section: str) -> list[list[str]]:
    """The arguments (after `primacy`) of every `primacy` command in a section's bash blocks, in order; a loop
    `for v in a b; do ...; done` unrolled, $v replaced by each value."""
    text = "\n".join(re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)).replace("\\\n", " ")
    text = re.sub(r"^for (\w+) in ([^;]+); do\n(.*?)^done$",
                  lambda loop: "".join(loop[3].replace(f"${loop[1]}", v) for v in loop[2].split()), text,
                  flags=re.DOTALL | re.MULTILINE)
    lines = [line.strip() for line in text.splitlines()]
    return [shlex.split(line, comments=True)[1:] for line in lines if line.startswith("primacy ")]


def _builds_here() -> list[str]:
    """``--no-build-isolation`` when this environment's setuptools builds the guide's packages itself (70.1 and later
    build wheels without the ``wheel`` package): about 3 s less per install than a fresh build environment."""
    try:
        import setuptools
    except ImportError:
        return []
    version = tuple(int(part) for part in re.findall(r"\d+", setuptools.__version__)[:2])
    return ["--no-build-isolation"] if version >= (70, 1) else []


_BUILD_HERE = _builds_here()


def install(sections: dict[str, str], tmp_path: Path) -> tuple[dict[str, Path], Callable[..., str]]:
    """Each section's package (``sections``: name -> section) written to ``tmp_path/name`` and installed, in one pip
    command, into a private directory (not this environment) with the real packaging machinery, so that their entry
    points come from genuine distribution metadata; and a runner of Python with them installed, from the checkout,
    which returns the output."""
    packages = {name: tmp_path / name for name in sections}
    for name, section in sections.items():
        for path, text in doc_files(section).items():
            (packages[name] / path).parent.mkdir(parents=True, exist_ok=True)
            (packages[name] / path).write_text(text)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *_BUILD_HERE, "--target",
                    str(site), *map(str, packages.values())], check=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}

    def run(*args: str, cwd: Path = ROOT) -> str:
        done = subprocess.run([sys.executable, *args], check=False, capture_output=True, text=True, env=env, cwd=cwd)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    return packages, run


def test_the_guide_builds_a_working_backbone_plugin_and_task_plugin(tmp_path):
    """Both packages installed side by side, in one new Python (5 s of imports): each package's tests pass (for the
    task, check_task, check_model and tiny_fit), `primacy models` lists the backbone and the task with their
    distributions, the backbone guide's `primacy fit` trains by name and the task guide's parses."""
    assert set(doc_files(BACKBONE)) == {"pyproject.toml", "primacy_gru/__init__.py", "tests/test_gru.py"}
    assert set(doc_files(TASK)) == {"pyproject.toml", "primacy_parity/__init__.py", "tests/test_parity.py"}
    assert '[project.entry-points."primacy.tasks"]' in doc_files(TASK)["pyproject.toml"]
    packages, run = install({"primacy-gru": BACKBONE, "primacy-parity": TASK}, tmp_path)
    fit, task_fit = doc_fit_command(BACKBONE), doc_fit_command(TASK)
    assert fit[:2] == task_fit[:2] == ["primacy", "fit"]
    run_dir = tmp_path / "run"
    fit += ["--trainer.default_root_dir", str(run_dir), "--trainer.max_steps", "2", "--trainer.val_check_interval",
            "2", "--trainer.limit_val_batches", "2", "--trainer.limit_test_batches", "2", "--trainer.logger", "false",
            "--trainer.enable_progress_bar", "false", "--data.init_args.num_test_sets", "1",
            "--data.init_args.num_val_sets", "1"]
    # each package's tests (in a directory of their own), `primacy models`, the backbone's fit, the task's config
    script = ("import json, sys, pytest; from primacy.cli import main; tests, base, fit, task_fit = sys.argv[1:]; "
              "codes = [pytest.main(['-q', '-p', 'no:cacheprovider', '--basetemp', f'{base}{i}', path]) "
              "for i, path in enumerate(json.loads(tests))]; "
              "sys.exit(max(codes)) if any(codes) else (main(['models']), main(json.loads(fit)), "
              "main([*json.loads(task_fit), '--print_config']))")
    out = run("-c", script, json.dumps([str(packages[name] / "tests") for name in packages]),
              str(tmp_path / "pytest"), json.dumps(fit[1:]), json.dumps(task_fit[1:]))
    passed = re.findall(r"^(\d+) passed", out, flags=re.MULTILINE)  # the backbone's tests, then the task's two
    assert len(passed) == 2 and passed[1] == "2", out
    assert re.search(r"GRUBackbone\s+primacy-gru\s+Stacked GRU with hidden size d_model\.", out), out
    tasks = out.split("tasks:\n", 1)[1]
    assert re.search(r"^  ParityTask\s+primacy-parity\s+Study L items, then L position cues", tasks,
                     flags=re.MULTILINE), out
    assert "class_path: primacy_gru.GRUBackbone" in (run_dir / "config.yaml").read_text()
    assert (run_dir / "results" / "summary.json").is_file()
    assert "class_path: primacy_parity.ParityTask" in out and "class_path: primacy.models.lists.SequenceModel" in out


@pytest.mark.slow  # 24 s: three pip installs; the backbone and task guides stay in the default run, and a model's own
# kind of result is registered, written, read and aggregated in tests/rundir/test_result_kinds.py
def test_the_guide_builds_a_model_plugin_with_its_own_kind_of_result(tmp_path):
    """The model's own tests (check_model, tiny_fit) pass with it installed, `primacy models` lists it, and the guide's
    commands, at tiny settings, train and test two seeds, test one again and aggregate them through the plugin's kind
    of result, in one new Python (5 s of imports); the aggregate's numbers are those of the runs' own files."""
    files = doc_files(MODEL)
    assert set(files) == {"pyproject.toml", "primacy_calibration/__init__.py", "primacy_calibration/results.py",
                          "tests/test_calibration.py"}
    for group in ("primacy.models", "primacy.results"):
        assert f'[project.entry-points."{group}"]' in files["pyproject.toml"]
    packages, run = install({"primacy-calibration": MODEL}, tmp_path)
    package = packages["primacy-calibration"]
    commands = doc_commands(MODEL)
    assert [c[0] for c in commands] == ["models", "fit", "fit", "test", "aggregate"], commands
    for fit in commands[1:3]:  # the guide's runs at tiny settings: later flags win
        seed = int(fit[fit.index("--seed_everything") + 1])
        fit += tiny_args(None, None, None, seed=seed, data_settings=tiny_settings("VerificationTask"),
                         args=["--results.formats", "[png]"])
    # the package's tests in a directory of their own (not the numbered ones that concurrent pytest sessions share);
    # a figure's runs trained in this process before `primacy reproduce` finds them done and aggregates them (a
    # launched run would be a new Python: 7 s of imports; launching is test_reproduce's)
    script = """import json, sys, pytest
from pathlib import Path
from primacy.cli.lightning import parse_run
from primacy.cli.main import main
from primacy.workflows.paper.figure_files import read_figure
from primacy.workflows.paper.reproduce import plan
code = pytest.main(['-q', '-p', 'no:cacheprovider', '--basetemp', sys.argv[2], sys.argv[1]])
if code:
    sys.exit(code)
for command in json.loads(sys.argv[3]):
    if command[0] == 'reproduce':
        out = Path(command[command.index('--out') + 1])
        for run in plan(read_figure(Path(command[1])), 'cpu', 1, out, [], parse_run)[0]:
            main(list(run.fit_args()))
    main(command)
"""
    work = tmp_path / "work"  # the guide's relative run directories go here
    work.mkdir()
    # and a figure of one's own with a panel of the plugin's model, aggregated by `primacy reproduce`
    data = {"class_path": "VerificationTask", "init_args": tiny_settings("VerificationTask")}
    model = {"class_path": "CalibratedModel", "init_args": {"warmup_steps": 2, "backbone": {
        "class_path": "S4DBackbone", "init_args": {"d_model": 8}}}}
    trainer = {"max_steps": 4, "accelerator": "cpu", "devices": 1, "logger": False, "enable_progress_bar": False,
               "enable_model_summary": False, "val_check_interval": 4, "check_val_every_n_epoch": None,
               "num_sanity_val_steps": 0}
    (work / "calibration.yaml").write_text(json.dumps({"model": model, "data": data, "trainer": trainer}))
    (work / "figure.yaml").write_text(json.dumps({"panels": [{"label": "A", "title": "S4D", "config": "calibration"}]}))
    commands.append(["reproduce", "figure.yaml", "--seeds", "1", "--out", "runs/figure"])
    out = run("-c", script, str(package / "tests"), str(tmp_path / "pytest"), json.dumps(commands), cwd=work)

    assert re.search(r"^2 passed", out, flags=re.MULTILINE), out
    models = out.split("models:\n", 1)[1].split("tasks:\n", 1)[0]
    assert re.search(r"^  CalibratedModel\s+primacy-calibration\s+SequenceModel scored by calibration", models,
                     flags=re.MULTILINE), out
    assert f"replacing the results in {Path('runs/calibration/seed0/results')}" in out, "primacy test rewrote them"
    each = []  # each run's numbers, from its own calibration.npz
    for seed in (0, 1):
        results = work / "runs" / "calibration" / f"seed{seed}" / "results"
        summary = json.loads((results / "summary.json").read_text())
        assert summary["result_kind"] == "CalibrationResults" and summary["task"] == "verification"
        assert {path.name for path in results.iterdir()} == {"summary.json", "calibration.npz", "calibration.png"}
        with np.load(results / "calibration.npz") as sums:
            counts, hits, confidence = sums["counts"], sums["hits"], sums["confidence"]
        assert counts.shape == (tiny_settings("VerificationTask")["n_items"],) and counts.sum() == summary["n_answers"]
        each.append({"accuracy": hits.sum() / counts.sum(), "confidence": confidence.sum() / counts.sum(),
                     "accuracy_curve": hits / counts, "confidence_curve": confidence / counts})
        assert summary["accuracy"] == pytest.approx(each[-1]["accuracy"], abs=1e-12)

    mean = work / "runs" / "calibration" / "mean"
    aggregate = json.loads((mean / "summary.json").read_text())
    assert aggregate["result_kind"] == "CalibrationResults" and aggregate["n_runs"] == 2
    assert aggregate["settings"]["task"] == "verification"
    for key in ("accuracy", "confidence"):
        values = [numbers[key] for numbers in each]
        assert aggregate[key]["values"] == pytest.approx(values, abs=1e-12)
        assert aggregate[key]["mean"] == pytest.approx(np.mean(values), abs=1e-12)
        assert aggregate[key]["se"] == pytest.approx(np.std(values, ddof=1) / np.sqrt(2), abs=1e-12)
        curves = np.stack([numbers[f"{key}_curve"] for numbers in each])  # R L
        assert aggregate[f"{key}_curve"]["mean"] == pytest.approx(curves.mean(axis=0).tolist(), abs=1e-12)
    assert aggregate["overconfidence"]["mean"] == pytest.approx(
        aggregate["confidence"]["mean"] - aggregate["accuracy"]["mean"], abs=1e-12)
    assert (mean / "calibration.png").is_file()

    panel = work / "runs" / "figure" / "calibration"
    assert json.loads((panel / "seed0" / "results" / "summary.json").read_text())["result_kind"] == "CalibrationResults"
    assert json.loads((panel / "mean" / "summary.json").read_text())["result_kind"] == "CalibrationResults"
    [row] = csv.DictReader((work / "runs" / "figure" / "figure.csv").open())
    assert row["result_kind"] == "CalibrationResults" and row["seeds"] == "1" and float(row["accuracy"]) > 0
