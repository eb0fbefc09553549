"""Sequence backbones: the Backbone contract and the built-in implementations.

Modules:
    base              the Backbone contract every backbone keeps
    block             the one pre-norm residual block every stack of mixers is built from
    conv              the short causal depthwise convolution of the matrix-memory mixers
    deltanet          DeltaNet and gated DeltaNet
    gla               gated linear attention
    hybrid            S4D layers followed by sliding-window attention
    influence         exact token-to-token influence, a mixer written as weights over its sources
    linear_attention  linear attention (elu + 1 feature map)
    lstm              the recurrent baseline, one LSTM layer
    matrix_memory     the modern recurrent family's shared frame: a matrix state per head
    retnet            retention, a fixed decay per head with rotary positions
    s4                S4 with a DPLR HiPPO state matrix
    s4d               S4D with a diagonal state matrix
    seq2seq           an RNN encoder and an RNN decoder attending over its states, written causally
    ssm_block         what S4 and S4D share: Delta t, the D skip, the output block
    transformer       the causal pre-norm Transformer, with attention capture and head ablation
"""

from primacy.backbones.base import Backbone

__all__ = ["Backbone"]
