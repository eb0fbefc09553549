"""CompileBackbone: a run with the backbone compiled trains the same model (to rounding), checkpoints under the same
names, resumes bitwise as it started, and a bad mode or a machine that cannot compile is one line."""

import signal

import pytest
import torch
from conftest import TINY_RUNS
from support.resume import assert_same_state, checkpoint, fit, interrupt_at

from primacy import registry
from primacy.callbacks import compiling
from primacy.callbacks.compiling import CompileBackbone
from primacy.cli import main
from primacy.errors import UsageError

COMPILE = ["--trainer.callbacks+=primacy.callbacks.compiling.CompileBackbone"]


@pytest.mark.slow  # 20-40 s of compiling
def test_a_compiled_backbone_computes_its_eager_forward_and_keeps_its_parameter_names():
    torch.manual_seed(0)
    backbone = registry.get("LinearAttentionBackbone")(d_model=8, n_layers=1, n_heads=2, conv_kernel=4).double()
    names = list(backbone.state_dict())
    x = torch.randn(2, 12, 8, dtype=torch.float64, requires_grad=True)
    eager = backbone(x)
    (grad,) = torch.autograd.grad(eager.square().sum(), x)
    backbone.compile()
    assert compiling.compiled(backbone) and list(backbone.state_dict()) == names
    fast = backbone(x)
    (fast_grad,) = torch.autograd.grad(fast.square().sum(), x)
    torch.testing.assert_close(fast, eager, rtol=0, atol=1e-12)
    torch.testing.assert_close(fast_grad, grad, rtol=0, atol=1e-12)


def test_a_bad_mode_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        main(["fit", *TINY_RUNS["verification"], "--trainer.default_root_dir", str(tmp_path / "run"),
              "--trainer.callbacks+={\"class_path\": \"primacy.callbacks.compiling.CompileBackbone\", "
              "\"init_args\": {\"mode\": \"fastest\"}}"])
    assert refused.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("primacy: error: ") and "mode='fastest' is not a torch.compile mode" in last
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_machine_that_cannot_compile_is_told_before_training(monkeypatch):
    def fails(fn):
        def call(*args):
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx")
        return call

    monkeypatch.setattr(torch, "compile", fails)
    with pytest.raises(UsageError, match=r"cannot build code on cpu here \(InvalidCxxCompiler: No working C\+\+"):
        compiling.check_compiles(torch.device("cpu"))
    assert CompileBackbone(mode="max-autotune").mode == "max-autotune"


@pytest.mark.slow
def test_a_compiled_run_resumes_bitwise_and_tests(tmp_path):
    straight = tmp_path / "straight"
    fit("verification", straight, *COMPILE)
    run = tmp_path / "run"
    with pytest.raises(SystemExit):
        fit("verification", run, *COMPILE, *interrupt_at(3, signal.SIGINT))
    fit("verification", run, *COMPILE)
    assert_same_state(checkpoint(run), checkpoint(straight))
    main(["test", "--config", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints" / "last.ckpt")])
    assert (run / "results" / "summary.json").is_file()
