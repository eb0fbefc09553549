"""benchmarks/gpu.py: it skips cleanly without CUDA, knows every paper config's CPU twin, and times a training step of
every config at the CPU scale (the slow set)."""

import csv
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from primacy.workflows.paper.pages import FIGURES

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu.py"
_spec = importlib.util.spec_from_file_location("gpu_benchmark", SCRIPT)
gpu = sys.modules["gpu_benchmark"] = importlib.util.module_from_spec(_spec)  # a script, not a package module
_spec.loader.exec_module(gpu)


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_without_cuda_it_says_so_and_exits_0(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu.main(["--device", "cuda"]) == 0
    assert capsys.readouterr().out == gpu.NO_CUDA + "\n"


def test_every_paper_config_has_its_cpu_twin():
    paper = {path.stem for path in (ROOT / "configs" / "paper").glob("*.yaml")}
    assert set(gpu.TWINS) == paper
    for twin in gpu.TWINS.values():
        assert (ROOT / "configs" / f"{twin}.yaml").is_file(), twin
    def cpu_twin(name: str) -> str:  # configs/cpu/NAME, or a quickstart of configs/ serving as a CPU panel
        return f"cpu/{name}" if (ROOT / "configs" / "cpu" / f"{name}.yaml").is_file() else name

    panels = {panel.configs[1]: cpu_twin(panel.configs[0]) for spec in FIGURES.values() for panel in spec.panels
              if panel.configs[1]}  # the task quickstarts have no paper scale
    assert {name: gpu.TWINS[name] for name in panels} == panels  # the pairs `primacy reproduce` uses


def test_a_name_at_either_scale_finds_the_config_of_the_chosen_scale():
    assert gpu.config_path("fig3f-hippo-legs-L16", "paper") == ROOT / "configs/paper/fig3f-hippo-legs-L64.yaml"
    assert gpu.config_path("mamba-L128", "cpu") == ROOT / "configs/quickstart-mamba.yaml"


def test_an_unknown_config_is_refused_in_one_line_with_close_matches(capsys):
    assert gpu.main(["--device", "cpu", "--configs", "fig3b-hippo-legs-L12"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "did you mean fig3b-hippo-legs-L128" in err


def test_one_tiny_config_gives_its_row(tmp_path, capsys):
    out = tmp_path / "bench.csv"
    code = gpu.main(["--device", "cpu", "--scale", "cpu", "--configs", "fig3b-hippo-legs-L128", "--repeats", "1",
                     "--warmup", "0", "--precision", "32", "--batch_size", "4",
                     "--model.init_args.backbone.init_args.d_model", "8", "--out", str(out)])
    assert code == 0
    [row] = read_rows(out)
    assert ((row["config"], row["precision"], row["compile"], row["note"])
            == ("cpu/fig3b-hippo-legs-L32", "32", "off", ""))
    assert float(row["steps_per_s"]) > 0 and float(row["peak_mib"]) > 0
    assert (row["max_steps"], row["batch_size"]) == ("10000", "4")
    assert float(row["hours"]) == pytest.approx(10_000 / float(row["steps_per_s"]) / 3600, rel=1e-6)
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[:3] == ["config", "precision", "compile"]
    assert table[2].split()[:3] == ["cpu/fig3b-hippo-legs-L32", "32", "off"]


def test_a_compile_failure_is_a_row_not_a_crash(tmp_path, monkeypatch):
    def broken_compile(fn):
        def compiled(*args, **kwargs):  # torch.compile fails at the first call, not when it wraps
            raise RuntimeError("no C++ compiler found\nmore details")
        return compiled

    monkeypatch.setattr(torch, "compile", broken_compile)
    out = tmp_path / "bench.csv"
    code = gpu.main(["--device", "cpu", "--scale", "cpu", "--configs", "fig3h-lstm-L32", "--repeats", "1", "--warmup",
                     "0", "--precision", "32", "--compile", "both", "--batch_size", "2", "--out", str(out)])
    assert code == 0
    eager, compiled = read_rows(out)
    assert eager["compile"] == "off" and eager["note"] == "" and float(eager["steps_per_s"]) > 0
    assert compiled["compile"] == "on" and compiled["steps_per_s"] == ""
    assert compiled["note"] == "compile failed: RuntimeError: no C++ compiler found"


@pytest.mark.slow
def test_every_config_steps_at_cpu_scale_in_both_precisions(tmp_path):
    out = tmp_path / "bench.csv"
    command = [sys.executable, str(SCRIPT), "--device", "cpu", "--scale", "cpu", "--repeats", "2", "--warmup", "1",
               "--out", str(out)]
    result = subprocess.run(command, check=False, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    rows = read_rows(out)
    assert [(row["config"], row["precision"]) for row in rows] == [
        (twin, precision) for twin in gpu.TWINS.values() for precision in ("32", "bf16-mixed")]
    for row in rows:
        assert row["note"] == "" and float(row["steps_per_s"]) > 0 and float(row["peak_mib"]) > 0, row
    table = result.stdout.splitlines()[2:-1]  # after the description and header, before "wrote ..."
    assert [line.split()[:2] for line in table] == [[row["config"], row["precision"]] for row in rows]
