"""Pretrained Hugging Face causal language models as ``HeadModel``s, for ``primacy analyze icl|ablation --hf_model``:
``PretrainedHeads`` for attention, ``PretrainedMamba`` for Mamba's selective scan (its exact influence).

A model loaded with eager attention (``primacy.workflows.induction.hf_models.load_pretrained`` reads it from a hub id
or a local directory; this module reads no file) is seen as heads. Its attention is read where the model computes it:
every ``softmax`` an attention module calls is intercepted (a ``TorchFunctionMode``), its input being the pre-softmax
scores (scaled q·k plus the causal mask, after rotary embeddings and whatever else the architecture does) and its
output the weights the model returns with ``output_attentions``. The OV circuit and head ablation need the layout of
the attention weights; three families cover GPT-2, GPT-NeoX (Pythia) and every model with separate q/k/v/o
projections (Llama, Mistral, Qwen2, grouped-query attention included).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from primacy.analysis.heads.model import Head, OVCircuit, influence_shares
from primacy.backbones.influence import selective_scan_weights, unit_pair, zero_units
from primacy.errors import UsageError

FAMILIES = {  # attention family: the child modules that identify it
    "gpt2": ("c_attn", "c_proj"),
    "gpt_neox": ("query_key_value", "dense"),
    "qkvo": ("q_proj", "k_proj", "v_proj", "o_proj"),
}
OUTPUT = {"gpt2": "c_proj", "gpt_neox": "dense", "qkvo": "o_proj"}  # the projection the heads' outputs enter
FINAL_NORMS = ("ln_f", "final_layer_norm", "norm")  # the base model's last norm: GPT-2, GPT-NeoX, Llama and kin
SPACE_WORD = re.compile("[\u0120\u2581][A-Za-z]+")  # 'Ġ' (byte-level BPE) or '▁' (SentencePiece), then letters


def family(module: nn.Module) -> str | None:
    """The attention family of ``module`` (a key of FAMILIES), or None if it is not an attention module."""
    for name, children in FAMILIES.items():
        if all(isinstance(getattr(module, child, None), nn.Module) for child in children):
            if name == "gpt2" and type(module.c_attn).__name__ != "Conv1D":  # Qwen v1's fused nn.Linear: not GPT-2's
                continue
            return name
    return None


@dataclass(frozen=True)
class Vocabulary:
    """The tokens prompts draw from: ``allowed`` (vocab_size,) bool, the BOS token (None: none) and where they
    came from (``tokenizer`` or ``config``)."""

    allowed: torch.Tensor | None
    bos: int | None
    source: str

    def describe(self) -> dict:
        count = None if self.allowed is None else int(self.allowed.sum())
        return {"vocabulary": self.source, "bos_token": self.bos, "prompt_tokens": count}


def vocabulary(tokenizer, config, vocab_size: int) -> Vocabulary:
    """The tokenizer's tokens without its special tokens, with its BOS token if it has one; without a tokenizer (or
    with one that has only special tokens, what ``transformers`` builds for a directory without tokenizer files),
    every id below the embedding's ``vocab_size`` and the config's ``bos_token_id``."""
    if tokenizer is None or len(tokenizer) <= len(set(tokenizer.all_special_ids)):
        bos = getattr(config, "bos_token_id", None)
        if bos is not None and not 0 <= bos < vocab_size:
            raise UsageError(f"bos_token_id={bos} of the model's config is invalid: the embedding has {vocab_size} "
                             f"tokens")
        return Vocabulary(None, bos, "config")
    allowed = torch.zeros(vocab_size, dtype=torch.bool)
    allowed[: min(len(tokenizer), vocab_size)] = True
    special = [i for i in tokenizer.all_special_ids if 0 <= i < vocab_size]
    allowed[special] = False
    bos = tokenizer.bos_token_id
    return Vocabulary(allowed, bos if bos is not None and 0 <= bos < vocab_size else None, "tokenizer")


class _SoftmaxTap(TorchFunctionMode):
    """Records the input and output of every ``softmax`` called while an attention module of a chosen layer runs."""

    def __init__(self, chosen: set[int]) -> None:
        super().__init__()
        self.chosen, self.layer = chosen, None
        self.calls: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is F.softmax and self.layer in self.chosen:
            self.calls.setdefault(self.layer, []).append((args[0].detach().float(), out.detach().float()))
        return out


class _Done(Exception):
    """Raised after the last chosen layer's attention, so the rest of the model does not run."""


class _Pretrained:
    """What the ``HeadModel`` of a Hugging Face causal language model shares, whatever mixes its tokens: the
    vocabulary prompts draw from, the tokenizer, next-token losses and the unembedding bias.

    Args:
        model: an ``AutoModelForCausalLM``, in eval mode.
        vocab: the tokens prompts draw from and the BOS token.
        name: what the model was loaded from, for messages.
        tokenizer: the model's tokenizer, for natural text (None: the model has none).
    """

    def __init__(self, model: nn.Module, vocab: Vocabulary, name: str, tokenizer=None) -> None:
        self.model, self.name, self.tokenizer = model, name, tokenizer
        config = model.config
        self.model_type = getattr(config, "model_type", type(model).__name__)
        self.vocab_size = model.get_input_embeddings().weight.shape[0]
        self.vocab = vocab
        self.bos, self.allowed = vocab.bos, vocab.allowed
        self.predicts_tokens = True
        self.device = next(model.parameters()).device
        # the longest input its positions allow (None: the config does not say)
        self.max_length = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)

    def _run_hooked(self, tokens: torch.Tensor, handles: list, mode: TorchFunctionMode | None = None) -> None:
        """The model on ``tokens`` without gradients (inside ``mode``, if given) until a hook raises ``_Done`` or the
        pass ends; the hooks' ``handles`` are removed after, whatever happens."""
        try:
            with torch.no_grad(), mode or nullcontext():
                self.model(tokens.to(self.device), use_cache=False)
        except _Done:
            pass
        finally:
            for handle in handles:
                handle.remove()

    def tokenize(self, texts: Sequence[str]) -> list[torch.Tensor]:
        """Each text's token ids (1-D int64), without the special tokens a tokenizer may add."""
        if self.tokenizer is None or self.vocab.source != "tokenizer":
            raise UsageError(f"texts need the model's tokenizer, and {self.name} has no tokenizer files: save one "
                             f"beside the model (tokenizer.save_pretrained)")
        ids = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return [torch.tensor(row, dtype=torch.long) for row in ids]

    def unembedding_bias(self) -> torch.Tensor:
        """b_U (V,) float32: the logit bias each token gets whatever the residual stream holds, as TransformerLens
        defines it once the final LayerNorm is folded into the unembedding: the final norm's bias times W_U, plus
        the output layer's own bias. Zero for models whose final norm has no bias (RMSNorm: Llama, Mistral, Qwen2)
        and whose output layer has none."""
        head = self.model.get_output_embeddings()
        if head is None:
            raise UsageError(f"{self.name} has no output embedding: its unembedding bias is undefined")
        bias = torch.zeros(head.weight.shape[0], device=head.weight.device)  # V
        norm = next((getattr(self.model.base_model, name) for name in FINAL_NORMS
                     if isinstance(getattr(self.model.base_model, name, None), nn.Module)), None)
        if norm is not None and getattr(norm, "bias", None) is not None:
            bias += head.weight.float() @ norm.bias.float()  # V D · D
        if getattr(head, "bias", None) is not None:
            bias += head.bias.float()
        return bias.cpu()

    def space_words(self) -> torch.Tensor:
        """(vocab_size,) bool: the tokens that are a leading space and then letters only (' the', ' cat'), spelled
        as byte-level BPE (GPT-2, Pythia: 'Ġthe') or SentencePiece ('▁the') tokenizers spell them."""
        if self.tokenizer is None or self.vocab.source != "tokenizer":
            raise UsageError(f"prompt_vocabulary=unembedding_bias needs the model's tokenizer, and {self.name} has no "
                             f"tokenizer files: save one beside the model (tokenizer.save_pretrained)")
        words = torch.zeros(self.vocab_size, dtype=torch.bool)
        for i, token in enumerate(self.tokenizer.convert_ids_to_tokens(list(range(min(len(self.tokenizer),
                                                                                        self.vocab_size))))):
            words[i] = bool(token) and SPACE_WORD.fullmatch(token) is not None
        return words if self.allowed is None else words & self.allowed

    def paper_prompt_tokens(self, n: int) -> torch.Tensor:
        """The paper's prompt tokens (Ji-An et al., App. D): the ``n`` tokens of a leading space and letters with the
        largest unembedding biases (``unembedding_bias``), largest first: (n,) int64. A model without such a bias
        (every b_U 0) is refused: the most frequent tokens of a text (``frequent``) stand in for it."""
        bias = self.unembedding_bias()
        if not bool(bias.abs().max() > 0):
            raise UsageError(f"prompt_vocabulary=unembedding_bias is undefined for {self.name} ({self.model_type}): "
                             f"its final norm and output layer have no bias; use --prompt_vocabulary frequent "
                             f"--texts FILE, the most frequent tokens of a text, instead")
        words = self.space_words()
        if int(words.sum()) < n:
            raise UsageError(f"{self.name}'s tokenizer has {int(words.sum())} tokens of a leading space and letters: "
                             f"prompts of n_items={n} need as many")
        ranked = torch.where(words, bias, torch.tensor(float("-inf")))  # V
        return torch.argsort(-ranked, stable=True)[:n]

    def token_losses(self, tokens: torch.Tensor, predicted: Sequence[int] | None = None) -> torch.Tensor:
        """Only the logits of the predicting positions are computed (``logits_to_keep``): with a large vocabulary
        the unembedding is a large share of the model."""
        predicted = list(range(1, tokens.shape[1])) if predicted is None else list(predicted)
        keep = torch.tensor([p - 1 for p in predicted], device=self.device)  # the position predicting each
        with torch.no_grad():
            logits = self.model(tokens.to(self.device), use_cache=False, logits_to_keep=keep).logits.float()  # B k V
        targets = tokens[:, predicted].to(self.device)  # B k
        return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none").cpu()  # B k


class PretrainedHeads(_Pretrained):
    """``HeadModel`` of a Hugging Face causal language model with attention (``primacy.workflows.induction.hf_models.
    load_pretrained`` makes one), loaded with eager attention."""

    def __init__(self, model: nn.Module, vocab: Vocabulary, name: str, tokenizer=None) -> None:
        super().__init__(model, vocab, name, tokenizer)
        config = model.config
        self.attention_modules = [m for m in model.modules() if family(m) is not None]
        n_layers = getattr(config, "num_hidden_layers", None)
        if not self.attention_modules or len(self.attention_modules) != n_layers:
            raise UsageError(f"{name} ({self.model_type}) has no attention heads primacy can read: it knows "
                             f"GPT-2, GPT-NeoX and q/k/v/o-projection (Llama, Mistral, Qwen2) attention, and Mamba")
        self.families = [family(m) for m in self.attention_modules]
        self.n_layers, self.n_heads = n_layers, config.num_attention_heads
        self.n_kv_heads = getattr(config, "num_key_value_heads", None) or self.n_heads
        self.d_head = getattr(config, "head_dim", None) or config.hidden_size // self.n_heads

    def attention(self, tokens: torch.Tensor, layers: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        tap = _SoftmaxTap(set(layers))
        last = max(layers)

        def enter(layer: int):
            def hook(module, args):
                tap.layer = layer
            return hook

        def leave(layer: int):
            def hook(module, args, output):
                tap.layer = None
                if layer == last:
                    raise _Done
            return hook

        handles = [m.register_forward_pre_hook(enter(i)) for i, m in enumerate(self.attention_modules)]
        handles += [m.register_forward_hook(leave(i)) for i, m in enumerate(self.attention_modules)]
        self._run_hooked(tokens, handles, tap)
        expected = (len(tokens), self.n_heads, tokens.shape[1], tokens.shape[1])
        for layer in layers:
            calls = tap.calls.get(layer, [])
            if len(calls) != 1 or tuple(calls[0][0].shape) != expected:
                raise UsageError(f"{self.name} ({self.model_type}) has no attention weights primacy can "
                                 f"read in layer {layer}: its eager attention made {len(calls)} softmax calls, not "
                                 f"one of shape {expected}")
        scores = torch.stack([tap.calls[layer][0][0] for layer in layers]).cpu()  # layers B heads T T
        weights = torch.stack([tap.calls[layer][0][1] for layer in layers]).cpu()
        return scores, weights

    def _value_output(self, layer: int, head: int) -> tuple[torch.Tensor, torch.Tensor]:
        """W_V (D, d_head) and W_O (d_head, D) of a head, row-vector convention, biases aside."""
        attn, kind, d = self.attention_modules[layer], self.families[layer], self.d_head
        columns = slice(head * d, (head + 1) * d)
        if kind == "gpt2":  # Conv1D: y = x W, W (D, 3D) holding q, k, v side by side
            width = attn.c_attn.weight.shape[0]
            return attn.c_attn.weight[:, 2 * width :][:, columns], attn.c_proj.weight[columns]
        if kind == "gpt_neox":  # Linear (3D, D), rows grouped per head as q, k, v
            begin = head * 3 * d + 2 * d
            return attn.query_key_value.weight[begin : begin + d].T, attn.dense.weight[:, columns].T
        kv = head // (self.n_heads // self.n_kv_heads)  # grouped-query attention: the group's key/value head
        return attn.v_proj.weight[kv * d : (kv + 1) * d].T, attn.o_proj.weight[:, columns].T

    def ov_circuit(self, layer: int, head: int) -> OVCircuit | None:
        unembedding = self.model.get_output_embeddings()
        if unembedding is None:
            return None
        w_v, w_o = self._value_output(layer, head)
        return self.model.get_input_embeddings().weight, w_v, w_o, unembedding.weight.T

    @contextmanager
    def ablate_heads(self, heads: Iterable[Head]) -> Iterator[None]:
        """Zero the heads' slices of their layer's output-projection input (forward pre-hooks; no weight is
        touched) while the block is open."""
        by_layer: dict[int, list[int]] = {}
        for layer, head in heads:
            if not (0 <= layer < self.n_layers and 0 <= head < self.n_heads):
                raise UsageError(f"head (layer, head)={(layer, head)} is invalid: layer must lie in "
                                 f"[0, {self.n_layers - 1}] and head in [0, {self.n_heads - 1}]")
            by_layer.setdefault(layer, []).append(head)

        def zero(chosen: list[int]):
            def hook(module, args):
                x = args[0].clone()  # B T heads·d_head
                view = x.view(*x.shape[:-1], self.n_heads, self.d_head)
                view[..., chosen, :] = 0
                return (x, *args[1:])
            return hook

        handles = [getattr(self.attention_modules[layer], OUTPUT[self.families[layer]]).register_forward_pre_hook(
            zero(chosen)) for layer, chosen in by_layer.items()]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()


MAMBA_TYPES = ("mamba",)  # model types whose mixers are Mamba-1's (FalconMamba adds norms on B, C and Δ: not read)


def mamba_mixer_influence(mixer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The exact influence of a Hugging Face ``MambaMixer`` on its input x (B, T, D): weights (B, E, T, T)
    (``selective_scan_weights``), the scan's input u (B, E, T) and the gate z (B, E, T), computed from the mixer's own
    modules as its forward does, so that out_proj((Σ_s weights · u) · silu(z)) is its output. No gradients."""
    n, rank = mixer.ssm_state_size, mixer.time_step_rank
    length = x.shape[1]
    with torch.no_grad():
        u, gate = mixer.in_proj(x).transpose(1, 2).chunk(2, dim=1)  # B E T each
        u = mixer.act(mixer.conv1d(u)[..., :length])  # B E T: the causal convolution (padding k - 1, cut to T)
        dt_low, b, c = torch.split(mixer.x_proj(u.transpose(1, 2)), [rank, n, n], dim=-1)  # B T R, B T N, B T N
        dt = F.softplus(dt_low @ mixer.dt_proj.weight.T + mixer.dt_proj.bias)  # B T E
        work = torch.promote_types(x.dtype, torch.float32)  # float32 at least, as the model's own scan runs
        a = -torch.exp(mixer.A_log.to(work))  # E N
        weights = selective_scan_weights(dt.to(work), a, b.to(work), c.to(work), mixer.D.to(work))  # B E T T
    return weights, u, gate


class PretrainedMamba(_Pretrained):
    """``HeadModel`` of a Hugging Face Mamba (``MambaForCausalLM``;
    ``primacy.workflows.induction.hf_models.load_pretrained`` makes one): each layer's selective scan read through its
    exact influence (``mamba_mixer_influence``), its inner channels ``group`` to a head, as
    ``primacy.analysis.heads.model.InfluenceHeads`` reads primacy's own Mamba runs (weights are shares of absolute
    influence, scores their logarithm; ablating a head zeroes its channels at the output projection's input; no OV
    circuit)."""

    def __init__(self, model: nn.Module, vocab: Vocabulary, name: str, tokenizer=None, group: int = 1) -> None:
        super().__init__(model, vocab, name, tokenizer)
        if self.model_type not in MAMBA_TYPES:
            raise UsageError(f"{name} ({self.model_type}) is not a Mamba primacy can read: it knows "
                             f"{', '.join(MAMBA_TYPES)}")
        self.mixers = [layer.mixer for layer in model.base_model.layers]
        inner = self.mixers[0].intermediate_size
        if group < 1 or inner % group:
            raise UsageError(f"group={group} is invalid for {name}: it must divide the {inner} inner channels of a "
                             "layer")
        self.group, self.unit = group, "inner channel"
        self.n_layers, self.n_heads = len(self.mixers), inner // group

    def attention(self, tokens: torch.Tensor, layers: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        inputs: dict[int, torch.Tensor] = {}
        last = max(layers)

        def keep(layer: int):
            def hook(module, args):
                if layer in layers:
                    inputs[layer] = args[0].detach()
                if layer == last:
                    raise _Done
            return hook

        self._run_hooked(tokens, [mixer.register_forward_pre_hook(keep(i)) for i, mixer in enumerate(self.mixers)])
        shares = [influence_shares(mamba_mixer_influence(self.mixers[layer], inputs[layer])[0], self.group)
                  for layer in layers]
        return torch.stack([scores for scores, _ in shares]).cpu(), torch.stack([share for _, share in shares]).cpu()

    def ov_circuit(self, layer: int, head: int) -> OVCircuit | None:
        return None

    @contextmanager
    def ablate_heads(self, heads: Iterable[Head]) -> Iterator[None]:
        """Zero the heads' inner channels at their layer's output-projection input (forward pre-hooks; no weight is
        touched) while the block is open."""
        chosen = [unit_pair(item, [self.n_heads] * self.n_layers, "head") for item in heads]
        by_layer: dict[int, frozenset[int]] = {}
        for layer, head in chosen:
            channels = range(head * self.group, (head + 1) * self.group)
            by_layer[layer] = by_layer.get(layer, frozenset()) | frozenset(channels)

        def zero(channels: frozenset[int]):
            def hook(module, args):
                return (zero_units(args[0], channels, dim=-1), *args[1:])  # B T E
            return hook

        handles = [self.mixers[layer].out_proj.register_forward_pre_hook(zero(channels))
                   for layer, channels in by_layer.items()]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
