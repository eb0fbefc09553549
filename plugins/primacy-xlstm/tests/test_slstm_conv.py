"""slstm_loop='compiled_conv': compiled_gates with the sLSTM layer's causal convolution and its SiLU compiled too
(primacy_xlstm.mlstm_compiled.conv_silu_compiled, tested against PyTorch's in test_mlstm_conv) equals xlstm's sLSTM
layer in float64 with every gradient (the backbone on it: test_paths); was auto's choice where the compiler works
in primacy-xlstm 0.5 (compiled_block since 0.6: test_slstm_block); refuses bad values and inputs it cannot take in
one line (its checkpoints and refusals without a compiler: test_paths)."""

import pytest
import torch
from primacy.errors import UsageError
from test_fast_components import OURS, assert_same_map, shaken, with_classes
from test_slstm_compiled import small
from xlstm import sLSTMLayerConfig
from xlstm.blocks.slstm.layer import sLSTMLayer

from primacy_xlstm import XLSTMBackbone
from primacy_xlstm.slstm import FastsLSTMLayer


@pytest.mark.parametrize("kernel", [4, 0], ids=["convolution", "no-convolution"])
def test_the_slstm_layer_on_it_is_xlstms_in_float64(kernel):
    config = sLSTMLayerConfig(embedding_dim=12, num_heads=3, backend="vanilla", conv1d_kernel_size=kernel)
    theirs = shaken(sLSTMLayer(config))
    ours = with_classes(theirs, OURS)
    ours.slstm_cell.slstm_loop = "compiled_conv"
    x = torch.randn(3, 9, 12, dtype=torch.float64)
    assert type(ours) is FastsLSTMLayer and ours._fast_path(x)
    assert not kernel or ours._conv_compiled()
    assert_same_map(ours, theirs, x)


def test_bad_values_and_inputs_it_cannot_take_are_refused_in_one_line():
    with pytest.raises(UsageError, match=r"^slstm_loop='compiled_convolution' is unknown: choose one of 'auto', "
                                         r"'pytorch', 'compiled', 'compiled_gates', 'compiled_conv', "
                                         r"'compiled_block'$"):
        small(slstm_loop="compiled_convolution")
    model = XLSTMBackbone(d_model=8, blocks=["slstm"], slstm_heads=2, backend="vanilla",
                          slstm_loop="compiled_conv").bfloat16()
    with pytest.raises(UsageError, match=r"^slstm_loop='compiled_conv' runs on float32 or float64 CPU tensors of one "
                                         r"dtype, not torch.bfloat16 on cpu: use slstm_loop='pytorch'$"):
        model(torch.randn(2, 5, 8, dtype=torch.bfloat16))
