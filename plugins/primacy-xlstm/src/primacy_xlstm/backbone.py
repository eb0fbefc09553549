"""XLSTMBackbone: a stack of mLSTM and sLSTM blocks (Beck et al. 2024), xlstm's ``xLSTMBlockStack``.

xlstm builds the stack; some of its modules are then made subclasses that compute the same map faster on a CPU, with
the parameters, buffers and state dict keys xlstm gave them (``_with_our_loop``, ``_with_chunkwise_mlstm``,
``_with_fast_components``), so that a checkpoint of either loads into the other. The components are
``primacy_xlstm.components``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from primacy.backbones.base import Backbone
from primacy.backbones.influence import Influence, unit_pair, zero_units
from primacy.checks import one_of, positive
from primacy.errors import UsageError
from xlstm import (
    FeedForwardConfig,
    mLSTMBlockConfig,
    mLSTMLayerConfig,
    sLSTMBlockConfig,
    sLSTMLayerConfig,
    xLSTMBlockStack,
    xLSTMBlockStackConfig,
)
from xlstm.blocks.mlstm.cell import mLSTMCell
from xlstm.blocks.mlstm.layer import mLSTMLayer
from xlstm.blocks.slstm.cell import sLSTMCell_vanilla
from xlstm.blocks.slstm.layer import sLSTMLayer

from primacy_xlstm.backends import (
    Backend,
    MLSTMLoop,
    RecordsLoop,
    SLSTMLoop,
    log,
    resolve_backend,
    resolve_loop,
    resolve_mlstm_loop,
)
from primacy_xlstm.components import (  # noqa: F401 (their old home: importable from here as before)
    DenseHeadwiseExpand,
    FastCausalConv1d,
    FastGatedFeedForward,
    FastMultiHeadLayerNorm,
    _with_fast_components,
)
from primacy_xlstm.mlstm import ChunkwisemLSTMCell, FastmLSTMLayer
from primacy_xlstm.slstm import FastsLSTMCell, FastsLSTMLayer

BLOCK_TYPES = ("mlstm", "slstm")
_ROUND_UP_TO = 64  # xlstm rounds the mLSTM's inner width (proj_factor * d_model) up to a multiple of 64

State = dict[str, dict[str, Any]]  # per block, xlstm's step state: the cell's state and the convolution's window


class XLSTMBackbone(RecordsLoop, Backbone):
    """xLSTM blocks, each x + Layer(LayerNorm(x)), then a LayerNorm (xlstm's ``xLSTMBlockStack``).

    An mLSTM block projects D up to an inner width (``proj_factor`` · D, rounded up to a multiple of 64), runs a
    causal convolution, a matrix-memory LSTM with exponential gating over ``mlstm_heads`` heads (xlstm's parallel
    form, computed in chunks: primacy_xlstm.mlstm), gates it and projects back. An sLSTM block runs a causal
    convolution and a scalar-memory LSTM with exponential gating and recurrent connections within each of
    ``slstm_heads`` heads, then a gated feed-forward layer of width ``ff_proj_factor`` · D.

    Args:
        d_model: width D of inputs and outputs.
        blocks: the block types in order, each ``mlstm`` or ``slstm`` (xlstm's ``slstm_at`` are the sLSTM positions).
        context_length: the longest input ``forward`` takes (the mLSTM's causal mask is that size); ``primacy
            fit`` sets it to the task's longest sequence. None: no limit, the mask grows with the input.
        mlstm_heads: heads of each mLSTM; they divide its inner width.
        slstm_heads: heads of each sLSTM; they divide d_model.
        conv_kernel: width of the causal convolution in both block types, at least 2.
        proj_factor: the mLSTM's up-projection factor.
        ff_proj_factor: the sLSTM feed-forward layer's factor.
        backend: the sLSTM cell: ``vanilla`` is xlstm's PyTorch cell with this plugin's loop over the sequence
            (``primacy_xlstm.slstm``; any device), ``cuda`` xlstm's fused kernel
            (compiled when the model is built; needs CUDA), ``auto`` the kernel where CUDA is available.
        slstm_loop: the PyTorch cell's loop: ``pytorch`` (any device), ``compiled`` (C++, CPU: primacy_xlstm.compiled),
            ``compiled_gates`` (that loop forming each head's gates from its own units), ``compiled_conv`` (that with
            the layer's convolution and its SiLU compiled too), ``compiled_block`` (that with the layer's output norm
            and the block's feed-forward GELU gate compiled as well: primacy_xlstm.block_compiled), ``auto``
            compiled_block where it builds (CPU, float32/64 inputs), else pytorch; recorded in the state dict.
        mlstm_loop: the mLSTM cell: ``pytorch`` (the chunkwise form, any device: primacy_xlstm.mlstm), ``compiled``
            (its recurrence in C++, CPU: primacy_xlstm.mlstm_compiled), ``compiled_qkv`` (that recurrence forming q, k,
            v itself from the layer's rows), ``compiled_conv`` (that with the layer's convolution and its SiLU
            compiled too), ``compiled_layer`` (that with the layer's output norm, skip and gate in the cell's kernel),
            ``auto`` compiled_layer where it builds (CPU, float32/64 inputs), else pytorch; recorded in the state
            dict.
    """

    def __init__(
        self,
        d_model: int = 64,
        blocks: list[str] = ["mlstm", "slstm"],  # noqa: B006 (never mutated; a list so configs can write one)
        context_length: int | None = None,
        mlstm_heads: int = 4,
        slstm_heads: int = 4,
        conv_kernel: int = 4,
        proj_factor: float = 2.0,
        ff_proj_factor: float = 1.3,
        backend: Backend = "auto",
        slstm_loop: SLSTMLoop = "auto",
        mlstm_loop: MLSTMLoop = "auto",
    ) -> None:
        super().__init__()
        positive(d_model=d_model, mlstm_heads=mlstm_heads, slstm_heads=slstm_heads)
        if conv_kernel < 2:  # xlstm's causal convolution drops its padding with x[..., :-pad]: pad 0 leaves nothing
            raise UsageError(f"conv_kernel={conv_kernel} is invalid: xlstm's causal convolution needs at least 2")
        if not blocks:
            raise UsageError("blocks=[] is invalid: give at least one block, 'mlstm' or 'slstm'")
        for kind in blocks:
            one_of("blocks", kind, BLOCK_TYPES)
        if context_length is not None and context_length < 1:
            raise UsageError(f"context_length={context_length} is invalid: it must be at least 1 (or null for no "
                             "limit)")
        if proj_factor <= 0 or ff_proj_factor <= 0:
            raise UsageError(f"proj_factor={proj_factor}, ff_proj_factor={ff_proj_factor} are invalid: both must be "
                             "positive")
        inner = math.ceil(proj_factor * d_model / _ROUND_UP_TO) * _ROUND_UP_TO
        if "mlstm" in blocks and inner % mlstm_heads:
            raise UsageError(f"mlstm_heads={mlstm_heads} does not divide the mLSTM's inner width {inner} "
                             f"(proj_factor={proj_factor} x d_model={d_model}, rounded up to a multiple of 64)")
        if "slstm" in blocks and d_model % slstm_heads:
            raise UsageError(f"slstm_heads={slstm_heads} does not divide d_model={d_model}")
        self.d_model, self.blocks, self.context_length = d_model, list(blocks), context_length
        built, reason = resolve_backend(backend)
        settings = dict(d_model=d_model, blocks=list(blocks), context_length=context_length or 1,
                        mlstm_heads=mlstm_heads, slstm_heads=slstm_heads, conv_kernel=conv_kernel,
                        proj_factor=proj_factor, ff_proj_factor=ff_proj_factor)
        try:
            self.stack = xLSTMBlockStack(_stack_config(backend=built, **settings))
        except Exception as err:  # the CUDA kernel failed to compile (no nvcc, an unsupported GPU, ...)
            if built != "cuda":
                raise
            if backend == "cuda":
                raise UsageError(f"backend={backend!r}: xlstm could not build the sLSTM cell: {_first_line(err)}"
                                 ) from None
            log.warning("XLSTMBackbone: the sLSTM CUDA kernel did not build (%s); using the PyTorch cell",
                        _first_line(err))
            built, reason = "vanilla", "backend='auto' and the CUDA kernel did not build"
            self.stack = xLSTMBlockStack(_stack_config(backend=built, **settings))
        self.backend, self.slstm_setting = built, slstm_loop
        self.slstm_loop, loop_reason = resolve_loop(slstm_loop, built)
        if self.backend == "vanilla":
            _with_our_loop(self.stack, self.slstm_loop)
        _with_chunkwise_mlstm(self.stack)
        self.mlstm_setting = mlstm_loop
        self.use_mlstm_loop(*resolve_mlstm_loop(mlstm_loop))
        _with_fast_components(self.stack)
        self.use_loop(self.slstm_loop)  # the feed-forward layers' GELU gate follows the loop (compiled_block)
        if "slstm" in blocks:
            loop = f" on the {self.slstm_loop} loop ({loop_reason})" if built == "vanilla" else ""
            log.info("XLSTMBackbone builds the %s sLSTM cell (%s)%s", built, reason, loop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        if self.context_length is not None and length > self.context_length:
            raise UsageError(f"an input of length {length} is longer than context_length={self.context_length} of "
                             f"XLSTMBackbone: raise context_length to at least {length} (or null for no limit)")
        if self.context_length is None:
            self._cover(length)
        self.follow_input(x)  # 'auto' loops: the PyTorch one for an input the compiled one does not take
        return self.stack(x)  # B T D

    @property
    def influence(self) -> Callable[[torch.Tensor], list[Influence]]:
        """``influence(x)``, the mLSTM blocks' exact form (``_mlstm_influence``); a stack without an mLSTM block has
        no such method (``hasattr`` is False): the sLSTM's recurrence has no exact matrix and is never approximated."""
        if "mlstm" not in self.blocks:
            raise AttributeError("influence")  # reported by __getattr__ below
        return self._mlstm_influence

    def __getattr__(self, name: str) -> Any:
        if name == "influence":  # only reached when the property above found no mLSTM block
            raise AttributeError(f"XLSTMBackbone with blocks={self.blocks} has no influence: only mLSTM blocks have "
                                 "an exact form, and sLSTM blocks are not approximated")
        return super().__getattr__(name)

    def _mlstm_influence(self, x: torch.Tensor) -> list[Influence]:
        """Each mLSTM block's exact gated linear attention on x (B, T, D), in block order (sLSTM blocks skipped; each
        Influence's ``unit`` names its block, ``head (block i, mLSTM)``); per head of width d, for s ≤ t:

            weights[b, h, t, s] = C[t, s] / (max(|Σ_s' C[t, s']|, exp(−m_t)) + eps),
            C[t, s] = (q_t · k_s / √d) · D[t, s],   D[t, s] = exp(F[t, s] + ĩ_s − m_t),
            F[t, s] = Σ_{s<k≤t} log σ(f̃_k),   m_t = max_{s'≤t} (F[t, s'] + ĩ_s'),

        0 above the diagonal, eps = 1e-6 (the function's): xlstm's ``parallel_stabilized_simple``, the cell's
        ``backend_fn`` (forward computes the same map in chunks, ``primacy_xlstm.mlstm``, on every device; ``backend``
        only picks the sLSTM cell). It is not rewritten here: the cell's own call is recorded during a forward pass
        (while ``backend_fn`` is the recorder, the cell calls it, so the parallel function itself) with its q, k, v
        (B, H, T, d), gate pre-activations ĩ, f̃ (B, H, T, 1) and causal mask, and the weights are that same function
        called again with the identity as values, C_normalised @ I, which is C_normalised exactly. ``values`` are v
        (B, H, T, d) (``v_proj`` of the up-projection, before the convolution, as xlstm's layer does), and ``output``
        is the function's result in forward, h̃ (B, H, T, d): the cell's output before its per-head ``outnorm``, the
        learnable skip, the silu(z) gate and the down-projection. Guaranteed: Σ_s weights · v equals output to
        rounding (float64: ≤ 1e-10; measured 0 on the tests' inputs and T = 64).

        Computed in evaluation mode (restored after) without gradients, by one forward pass (so a length beyond
        ``context_length`` is refused as in forward). Holds (B, H, T, T) per mLSTM block, as the parallel form does."""
        training = self.training
        cells = self._mlstm_cells()
        calls: dict[int, tuple[dict[str, Any], torch.Tensor]] = {}
        try:
            self.eval()
            with torch.no_grad():
                with _recording(cells, calls):
                    self(x)  # B T D: every block as forward runs it, the mLSTM cells' calls recorded
                layers = []
                for i, cell in cells:
                    inputs, output = calls[i]  # the kwargs of cell.backend_fn, its result h̃: B H T d
                    batch, heads, length, _ = inputs["values"].shape
                    identity = torch.eye(length, dtype=output.dtype, device=output.device)  # T T
                    weights = cell.backend_fn(**{**inputs, "values": identity.expand(batch, heads, length, length)})
                    layers.append(Influence(weights, inputs["values"], output, f"head (block {i}, mLSTM)"))  # B H T T
        finally:
            self.train(training)
        return layers

    @contextmanager
    def ablate(self, units: Iterable[tuple[int, int]]) -> Iterator[None]:
        """``Backbone.ablate``: a unit (layer, h) is head h of the layer-th mLSTM block (the order of ``influence``);
        the head's normalised output (its ``outnorm``, whose input is h̃) is zero, in forward and step, so it adds
        nothing to the block's output. Raises UsageError, ablating nothing, on a pair out of range."""
        cells = self._mlstm_cells()
        if not cells:
            raise UsageError(f"XLSTMBackbone with blocks={self.blocks} has no mLSTM head to ablate: sLSTM blocks have "
                             "no exact form")
        chosen = [unit_pair(item, [cell.config.num_heads for _, cell in cells], "head") for item in units]
        handles = []
        try:
            for layer, (_, cell) in enumerate(cells):
                heads = frozenset(head for at, head in chosen if at == layer)
                if heads:  # xlstm calls outnorm on (B, NH, T, DH) in forward and step alike
                    handles.append(cell.outnorm.register_forward_hook(
                        lambda module, inputs, output, heads=heads: zero_units(output, heads, dim=1)))
            yield
        finally:
            for handle in handles:
                handle.remove()

    def _mlstm_cells(self) -> list[tuple[int, mLSTMCell]]:
        """(block index, cell) of every mLSTM block, in block order."""
        return [(i, block.xlstm.mlstm_cell) for i, block in enumerate(self.stack.blocks)
                if isinstance(getattr(block.xlstm, "mlstm_cell", None), mLSTMCell)]

    def initial_state(self, batch_size: int) -> State:
        """No block has seen an input: xlstm starts each block's state at zeros on its first step."""
        return {}

    def step(self, x_t: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """One position, x_t (B, D) -> y_t (B, D): each block's recurrence advanced once (xlstm's ``step``), so free
        recall decodes an item with one step. Steps have no length limit."""
        y_t, state = self.stack.step(x_t[:, None], _unshared(state))
        return y_t[:, 0], state

    def _cover(self, length: int) -> None:
        """With no context_length, grows each mLSTM's causal mask (a buffer outside the state dict) to ``length``."""
        for module in self.stack.modules():
            mask = getattr(module, "causal_mask", None)
            if isinstance(mask, torch.Tensor) and mask.shape[0] < length:
                module.causal_mask = torch.ones(length, length, dtype=torch.bool, device=mask.device).tril()


@contextmanager
def _recording(cells: list[tuple[int, mLSTMCell]], calls: dict[int, tuple[dict[str, Any], torch.Tensor]]
               ) -> Iterator[None]:
    """While open, each cell's ``backend_fn`` (xlstm's parallel mLSTM) also stores its keyword arguments and result
    in ``calls[block index]``; the cells' own functions are put back on exit."""
    def recorder(i: int, function: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def call(**kwargs: Any) -> torch.Tensor:  # mLSTMCell.forward passes everything by keyword
            result = function(**kwargs)
            calls[i] = (kwargs, result)
            return result
        return call

    originals = [(cell, cell.__dict__.get("backend_fn")) for _, cell in cells]
    try:
        for i, cell in cells:
            cell.backend_fn = recorder(i, cell.backend_fn)
        yield
    finally:
        for cell, function in originals:
            if function is None:
                del cell.backend_fn
            else:
                cell.backend_fn = function


def _unshared(state: State) -> State:
    """A state xlstm may change without touching ``state``: it writes each block's new state into the dict it is
    given and shifts the convolution's window in place (the cells' states it replaces)."""
    return {block: {key: tuple(t.clone() for t in value) if key == "conv_state" and value is not None else value
                    for key, value in entries.items()}
            for block, entries in state.items()}


def _with_our_loop(stack: xLSTMBlockStack, loop: str) -> None:
    """Makes each of xlstm's PyTorch sLSTM cells a ``FastsLSTMCell`` running ``loop`` in place (same parameters and
    state dict, the sequence loop in O(T): primacy_xlstm.slstm), and each sLSTM layer a ``FastsLSTMLayer`` (its gates'
    projections feed that loop directly); xlstm builds its cells in ``sLSTMLayer`` with no way to choose one."""
    for module in stack.modules():
        if type(module) is sLSTMCell_vanilla:
            module.__class__ = FastsLSTMCell
            module.slstm_loop = loop
        elif type(module) is sLSTMLayer:
            module.__class__ = FastsLSTMLayer


def _with_chunkwise_mlstm(stack: xLSTMBlockStack) -> None:
    """Makes each of xlstm's mLSTM cells a ``ChunkwisemLSTMCell`` in place (same parameters, buffers and state dict;
    forward computes the parallel form in chunks: primacy_xlstm.mlstm), and each mLSTM layer a ``FastmLSTMLayer``
    (q, k, v projected per head); xlstm builds its cells in ``mLSTMLayer``."""
    for module in stack.modules():
        if type(module) is mLSTMCell:
            module.__class__ = ChunkwisemLSTMCell
        elif type(module) is mLSTMLayer:
            module.__class__ = FastmLSTMLayer


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _stack_config(d_model: int, blocks: list[str], context_length: int, mlstm_heads: int, slstm_heads: int,
                  conv_kernel: int, proj_factor: float, ff_proj_factor: float, backend: str) -> xLSTMBlockStackConfig:
    """xlstm's configuration of the stack; each block type's config is given only when the stack has one."""
    mlstm = mLSTMBlockConfig(mlstm=mLSTMLayerConfig(
        conv1d_kernel_size=conv_kernel, num_heads=mlstm_heads, proj_factor=proj_factor))
    slstm = sLSTMBlockConfig(
        slstm=sLSTMLayerConfig(backend=backend, num_heads=slstm_heads, conv1d_kernel_size=conv_kernel),
        feedforward=FeedForwardConfig(proj_factor=ff_proj_factor, act_fn="gelu"))
    return xLSTMBlockStackConfig(
        mlstm_block=mlstm if "mlstm" in blocks else None,
        slstm_block=slstm if "slstm" in blocks else None,
        context_length=context_length, num_blocks=len(blocks), embedding_dim=d_model,
        slstm_at=[i for i, kind in enumerate(blocks) if kind == "slstm"],
    )
