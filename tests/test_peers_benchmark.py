"""benchmarks/peers.py: the peers it times are loaded with primacy's weights and give its output, and it prints a ratio
to each peer, to S4D and to the floor (tiny sizes; it times nothing worth reading here)."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "peers.py"
_spec = importlib.util.spec_from_file_location("peers_benchmark", SCRIPT)
peers = sys.modules["peers_benchmark"] = importlib.util.module_from_spec(_spec)  # a script, not a package module
_spec.loader.exec_module(peers)


@pytest.mark.parametrize("family", ["mamba", "xlstm"])
def test_peers_give_primacys_output(family):
    pytest.importorskip({"mamba": "primacy_mamba", "xlstm": "primacy_xlstm"}[family])
    ours, others, _ = {"mamba": peers._mamba, "xlstm": peers._xlstm}[family](16)
    assert ours and others
    x = torch.randn(2, 8, 16)
    kept = peers._check_same(family, {**ours, **others}, x)
    assert set(kept) == set(ours) | set(others)


def test_it_prints_every_ratio(capsys):
    pytest.importorskip("primacy_mamba")
    peers.main(["--lengths", "8", "--repeats", "1", "--batch", "2", "--width", "16", "--families", "mamba"])
    out = capsys.readouterr().out
    assert "mamba floor:" in out
    rows = {line.split("  ")[0]: line for line in out.splitlines() if line.startswith(("primacy", "mambapy", "S4D"))}
    assert "primacy Mamba recurrent" in rows and "mambapy Mamba (parallel scan)" in rows
    assert len(rows["primacy Mamba recurrent"].split()) == 3 + 4  # name (3 words), ms, / S4D, / floor, / peer
