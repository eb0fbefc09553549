"""The package's entry points and the Dockerfile are usable as documented."""

import fnmatch
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT


def test_python_dash_m_primacy_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "primacy", "--help"], capture_output=True, text=True, check=True)
    assert "fit" in out.stdout and "test" in out.stdout


def test_help_and_the_launchers_start_without_lightning():
    """`primacy --help` answers at once (0.2 s, not the 8 s of importing Lightning), and so does every launcher's
    bookkeeping that main() imports in each run's process; reading people's free-recall data and writing files
    need no Lightning either (CMR fits run as many short processes)."""
    script = ("import sys; from primacy.cli.main import main\n"
              "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'torch')))\n"
              "import primacy.files, primacy.workflows.humans.people\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] == 'lightning'))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-2:] == ["[]", "[]"]


def test_the_code_passes_ruff():
    """pyflakes, pycodestyle (lines of 120) and sorted imports over the project, its plugins (their own settings:
    primacy is a dependency there), benchmarks and tests."""
    ruff = shutil.which("ruff")
    assert ruff is not None, "ruff comes with the test extra: pip install -e '.[test]'"
    out = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", str(ROOT)], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_cmr_data_file_is_package_data():
    """A non-editable install carries the CMR grids and the published grid's licence: pyproject's package-data
    patterns cover every file of the data folder."""
    entry = next(line for line in (ROOT / "pyproject.toml").read_text().splitlines()
                 if line.startswith('"primacy.analysis.behaviour.cmr" = '))  # [tool.setuptools.package-data]
    patterns = re.findall(r'"(data/[^"]+)"', entry)
    folder = ROOT / "primacy" / "analysis" / "behaviour" / "cmr"
    present = sorted(path.relative_to(folder).as_posix() for path in (folder / "data").iterdir())
    assert {"data/cmr_crp_avg_20_11.npy", "data/LICENSE-icl-cmr", "data/cmr_grid_paper.npz"} <= set(present)
    assert [name for name in present if not any(fnmatch.fnmatch(name, p) for p in patterns)] == []


def test_the_native_header_is_package_data():
    """A non-editable install carries the header the plugins' compiled kernels include (primacy.native.INCLUDE):
    pyproject's package-data patterns for primacy.native cover every file of the folder but its Python module."""
    entry = next(line for line in (ROOT / "pyproject.toml").read_text().splitlines()
                 if line.startswith('"primacy.native" = '))  # [tool.setuptools.package-data]
    patterns = re.findall(r'"([^"]+)"', entry.split("=", 1)[1])
    present = sorted(path.name for path in (ROOT / "primacy" / "native").iterdir()
                     if path.suffix != ".py" and path.name != "__pycache__")
    assert "fast_math.h" in present
    assert [name for name in present if not any(fnmatch.fnmatch(name, p) for p in patterns)] == []


def test_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint")
    assert hadolint is not None, "hadolint comes with the test extra: pip install -e '.[test]'"
    subprocess.run([hadolint, str(ROOT / "Dockerfile")], check=True)


@pytest.mark.slow
def test_quickstart_reproduces_the_primacy_pattern(tmp_path):
    """The README's main job, whole (about 5 minutes on 2 cores): the paper's S4 pattern."""
    import json

    from primacy.cli import main

    run = tmp_path / "quickstart"
    main(["fit", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--trainer.default_root_dir", str(run),
          "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"])
    summary = json.loads((run / "results" / "summary.json").read_text())
    assert 0.6 <= summary["overall_accuracy"] <= 0.95
    assert summary["early_minus_late"] >= 0.08
    assert summary["recency_index"] < 0
