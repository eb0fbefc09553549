"""docs/plugins.md, followed literally: each package it builds (a backbone, a task) installs as a distribution,
registers, passes its tests (through primacy.testing) and trains by name."""

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import ROOT

DOC = (ROOT / "docs" / "plugins.md").read_text()
# the guide's sections, one per plugin: the backbone's, the task's (the model's is to come)
BACKBONE, TASK = DOC.split("\n# Writing a task plugin\n")[0], DOC.split("\n# Writing a task plugin\n")[1]


def doc_files(section: str) -> dict[str, str]:
    """The files a section asks for: a line 'File `path`:' followed by a fenced block."""
    return dict(re.findall(r"^File `([^`]+)`:\n\n```\w*\n(.*?)```", section, flags=re.M | re.S))


def doc_fit_command(section: str) -> list[str]:
    block = next(b for b in re.findall(r"```bash\n(.*?)```", section, flags=re.S) if "primacy fit" in b)
    return shlex.split(block[block.index("primacy fit"):].replace("\\\n", " "))


def install(section: str, name: str, tmp_path: Path) -> tuple[Path, Callable[..., str]]:
    """The section's package written to ``tmp_path/name`` and installed into a private directory (not this
    environment) with the real packaging machinery, so that its entry point comes from genuine distribution
    metadata; and a runner of Python with it installed, from the checkout, which returns the output."""
    package = tmp_path / name
    for path, text in doc_files(section).items():
        (package / path).parent.mkdir(parents=True, exist_ok=True)
        (package / path).write_text(text)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(package)],
                   check=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=ROOT)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    return package, run


def test_the_guide_builds_a_working_plugin(tmp_path):
    assert set(doc_files(BACKBONE)) == {"pyproject.toml", "primacy_gru/__init__.py", "tests/test_gru.py"}
    package, run = install(BACKBONE, "primacy-gru", tmp_path)
    assert "passed" in run("-m", "pytest", "-q", "-p", "no:cacheprovider", str(package / "tests"))
    fit = doc_fit_command(BACKBONE)
    assert fit[:2] == ["primacy", "fit"]
    run_dir = tmp_path / "run"
    # `primacy models`, then the guide's `primacy fit`: in one new Python, which saves a second 5 s of imports
    listing = run("-c", "import sys; from primacy.cli import main; main(['models']); main(sys.argv[1:])",
                  *fit[1:], "--trainer.default_root_dir", str(run_dir), "--trainer.max_steps", "2",
                  "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "2",
                  "--trainer.limit_test_batches", "2", "--trainer.logger", "false", "--trainer.enable_progress_bar",
                  "false", "--data.init_args.num_test_sets", "1", "--data.init_args.num_val_sets", "1")
    assert re.search(r"GRUBackbone\s+primacy-gru\s+Stacked GRU with hidden size d_model\.", listing), listing
    assert "class_path: primacy_gru.GRUBackbone" in (run_dir / "config.yaml").read_text()
    assert (run_dir / "results" / "summary.json").is_file()


def test_the_guide_builds_a_working_task_plugin(tmp_path):
    """The task's own tests (check_task, check_model, tiny_fit) pass with it installed, `primacy models` lists it under
    tasks with its distribution, and the guide's fit command parses with it, in one new Python (5 s of imports)."""
    assert set(doc_files(TASK)) == {"pyproject.toml", "primacy_parity/__init__.py", "tests/test_parity.py"}
    assert '[project.entry-points."primacy.tasks"]' in doc_files(TASK)["pyproject.toml"]
    package, run = install(TASK, "primacy-parity", tmp_path)
    fit = doc_fit_command(TASK)
    assert fit[:2] == ["primacy", "fit"]
    script = ("import sys, pytest; from primacy.cli import main; main(['models']); "
              "code = pytest.main(['-q', '-p', 'no:cacheprovider', sys.argv[1]]); "
              "sys.exit(code) if code else main([*sys.argv[2:], '--print_config'])")
    out = run("-c", script, str(package / "tests"), *fit[1:])
    tasks = out.split("tasks:\n", 1)[1]
    assert re.search(r"^  ParityTask\s+primacy-parity\s+Study L items, then L position cues", tasks, flags=re.M), out
    assert re.search(r"^2 passed", out, flags=re.M), out
    assert "class_path: primacy_parity.ParityTask" in out and "class_path: primacy.models.lists.SequenceModel" in out
