"""Every compiled path of the plugin, the mLSTM cell's and the sLSTM loop's alike: the backbone on it equals the
backbone on the PyTorch path in float64 with every gradient; a checkpoint trained on it resumes under auto on it with
its bits; and where no C++ compiler works, naming it or loading a checkpoint that records it is refused in one line.
Each path's kernels against their references, float32's bounds and threads: its own file (test_mlstm_*.py,
test_slstm_*.py)."""

import pytest
import torch
from primacy.errors import UsageError

import primacy_xlstm.block_compiled
import primacy_xlstm.compiled
import primacy_xlstm.mlstm_compiled
from primacy_xlstm import XLSTMBackbone
from primacy_xlstm.mlstm import ChunkwisemLSTMCell
from primacy_xlstm.slstm import FastsLSTMCell

# each setting's compiled paths, oldest first (the plugin's defaults over its versions)
PATHS = [("mlstm_loop", path) for path in ("compiled", "compiled_qkv", "compiled_conv", "compiled_layer")]
PATHS += [("slstm_loop", path) for path in ("compiled", "compiled_gates", "compiled_conv", "compiled_block")]
LIBRARIES = (primacy_xlstm.mlstm_compiled._library, primacy_xlstm.compiled.library,
             primacy_xlstm.block_compiled._library)


def small(**settings):
    torch.manual_seed(0)
    return XLSTMBackbone(d_model=8, blocks=["mlstm", "slstm"], mlstm_heads=2, slstm_heads=2, backend="vanilla",
                         **settings)


def runs_on(model, setting):
    """The paths the cells of ``setting``'s kind run and the backbone's record, as a set (one entry if they agree)."""
    kind = ChunkwisemLSTMCell if setting == "mlstm_loop" else FastsLSTMCell
    return {getattr(m, setting) for m in model.modules() if isinstance(m, kind)} | {getattr(model, setting)}


@pytest.fixture
def no_compiler(tmp_path, monkeypatch):
    """An empty kernel cache and a compiler that does not exist for all three libraries; found again afterwards."""
    monkeypatch.setenv("PRIMACY_KERNEL_CACHE", str(tmp_path / "kernels"))
    monkeypatch.setenv("CXX", "no-such-c++")
    for library in LIBRARIES:
        library.cache_clear()
    yield
    for library in LIBRARIES:
        library.cache_clear()


@pytest.mark.parametrize("setting,path", PATHS)
def test_the_backbone_on_it_equals_the_backbone_on_the_pytorch_path_in_float64(setting, path):
    """Output and the gradients of the input and every parameter within 1e-10, two blocks of each kind, T 40; the
    parameters moved off their initial values (the norms' weights, the mLSTM's skip) so that every one counts."""
    plain = {"mlstm_loop": "pytorch", "slstm_loop": "pytorch"}
    torch.manual_seed(0)
    models = [XLSTMBackbone(d_model=8, blocks=["slstm", "mlstm", "slstm", "mlstm"], mlstm_heads=2, slstm_heads=2,
                            backend="vanilla", **settings).double() for settings in ({**plain, setting: path}, plain)]
    with torch.no_grad():
        for parameter in models[1].parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    models[0].load_state_dict(models[1].state_dict())
    assert runs_on(models[0], setting) == {path}
    x = torch.randn(3, 40, 8, dtype=torch.float64, requires_grad=True)
    results = []
    for model in models:
        y = model(x)
        weights = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)
        results.append((y, *torch.autograd.grad((y * weights).sum(), [x, *model.parameters()])))
    for mine, expected in zip(*results):
        torch.testing.assert_close(mine, expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("setting,path", PATHS)
def test_a_checkpoint_resumes_under_auto_on_its_path_with_its_bits(setting, path):
    """The sLSTM block's feed-forward gate is compiled on compiled_block alone, and back in PyTorch on the others."""
    trained = small(**{setting: path})
    resumed = small()
    resumed.load_state_dict(trained.state_dict())
    x = torch.randn(2, 5, 8)
    assert runs_on(resumed, setting) == {path} and torch.equal(resumed(x), trained(x))
    if setting == "slstm_loop":
        assert resumed.stack.blocks[1].ffn.gelu_compiled == (path == "compiled_block")


@pytest.mark.parametrize("setting,path", PATHS)
def test_without_a_compiler_it_and_a_checkpoint_of_it_are_refused_in_one_line(no_compiler, setting, path):
    plain = {"mlstm_loop": "pytorch", "slstm_loop": "pytorch"}
    with pytest.raises(UsageError, match=rf"^{setting}='{path}' needs a C\+\+ compiler and 'no-such-c\+\+' \(CXX\) is "
                                         rf"not one on PATH: install one \(g\+\+ or clang\+\+\) or use "
                                         rf"{setting}='pytorch'$"):
        small(**{**plain, setting: path})
    state = small(**plain).state_dict()
    state["_extra_state"] = {**plain, setting: path}
    with pytest.raises(UsageError, match=rf"^this checkpoint was trained with {setting}='{path}', which cannot run "
                                         rf"here \(.*\); set {setting} explicitly to run it on the other loop"):
        small(**{**plain, setting: "auto"}).load_state_dict(state)
