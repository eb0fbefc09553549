"""The one residual block: every stack of mixers is built from it, and each stack's state_dict keeps the keys and the
parameter order its checkpoints (and their optimiser states, matched by order) were written with."""

import pytest
import torch

from primacy.backbones.block import Block, Parts
from primacy.backbones.gla import GLABackbone
from primacy.backbones.hybrid import HybridBackbone
from primacy.backbones.transformer import TransformerBackbone

MLP = ["mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"]
ATTENTION = ["attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias"]
CASES = {  # a tiny model of each stack -> its keys in order, as before the shared block
    "transformer": (lambda: TransformerBackbone(d_model=8, n_layers=1, n_heads=2),
                    ["norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias", *ATTENTION, *MLP], "blocks.0.",
                    ["norm.weight", "norm.bias"]),
    "transformer without MLP": (lambda: TransformerBackbone(d_model=8, n_layers=1, n_heads=2, mlp=False),
                                ["norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias", *ATTENTION], "blocks.0.",
                                ["norm.weight", "norm.bias"]),
    "hybrid window": (lambda: HybridBackbone(d_model=8, pattern=["attention"], n_heads=2),
                      ["norm1.weight", "norm2.weight", *ATTENTION, *MLP], "layers.0.block.", ["norm.weight"]),
    "hybrid window without MLP": (lambda: HybridBackbone(d_model=8, pattern=["attention"], n_heads=2, mlp=False),
                                  ["norm1.weight", *ATTENTION], "layers.0.block.", ["norm.weight"]),
    "GLA": (lambda: GLABackbone(d_model=8, n_layers=1, n_heads=2),
            ["norm1.weight", "mixer.qkv.weight", "mixer.norm.weight", "mixer.gate.weight", "mixer.out.weight",
             "mixer.gate_proj.0.weight", "mixer.gate_proj.1.weight", "mixer.gate_proj.1.bias", "norm2.weight", *MLP],
            "blocks.0.", ["norm.weight"]),
}


@pytest.mark.parametrize("case", CASES)
def test_each_stack_keeps_its_checkpoints_keys_in_order(case):
    build, block_keys, prefix, final = CASES[case]
    assert list(build().state_dict()) == [prefix + key for key in block_keys] + final


def test_the_hybrids_ssm_layer_is_a_block_named_as_before():
    model = HybridBackbone(d_model=8, pattern=["ssm"], d_state=4)
    assert isinstance(model.layers[0], Block)
    assert [key for key in model.state_dict() if not key.startswith("layers.0.ssm.")] == ["layers.0.norm.weight",
                                                                                           "norm.weight"]


def test_every_stack_is_built_from_the_one_block():
    stacks = [TransformerBackbone(d_model=8, n_layers=1, n_heads=2).blocks[0], GLABackbone(d_model=8).blocks[0],
              HybridBackbone(d_model=8, n_heads=2, d_state=4).layers[1].block]
    assert all(type(block) is Block for block in stacks)


def test_a_block_is_a_pre_norm_residual_around_its_mixer_and_mlp():
    torch.manual_seed(0)
    mixer = torch.nn.Linear(4, 4)
    block = Block(4, mixer, "rms", d_ff=6, parts=Parts(mixer="attn")).double()
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    h = x + mixer(torch.nn.functional.rms_norm(x, (4,), block.pre_norm.weight, 1e-6))
    mlp = block.mlp[2](torch.nn.functional.gelu(block.mlp[0](torch.nn.functional.rms_norm(h, (4,),
                                                                                            block.norm2.weight, 1e-6))))
    torch.testing.assert_close(block(x), h + mlp, rtol=1e-12, atol=1e-12)
    assert block.mixer is block.attn is mixer
