"""docs/plugins.md, followed literally: its package installs, registers, passes its tests and trains by name."""

import os
import re
import shlex
import subprocess
import sys

from conftest import ROOT

DOC = (ROOT / "docs" / "plugins.md").read_text()


def doc_files() -> dict[str, str]:
    """The files the guide asks for: a line 'File `path`:' followed by a fenced block."""
    return dict(re.findall(r"^File `([^`]+)`:\n\n```\w*\n(.*?)```", DOC, flags=re.M | re.S))


def doc_fit_command() -> list[str]:
    block = next(b for b in re.findall(r"```bash\n(.*?)```", DOC, flags=re.S) if "primacy fit" in b)
    return shlex.split(block.replace("\\\n", " "))


def test_the_guide_builds_a_working_plugin(tmp_path):
    package = tmp_path / "primacy-gru"
    files = doc_files()
    assert set(files) == {"pyproject.toml", "primacy_gru/__init__.py", "tests/test_gru.py"}
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)

    # Installed into a private directory (not this environment) with the real packaging machinery, so the entry
    # point comes from genuine distribution metadata.
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(package)],
                   check=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=ROOT)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert "passed" in run("-m", "pytest", "-q", "-p", "no:cacheprovider", str(package / "tests"))
    fit = doc_fit_command()
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
