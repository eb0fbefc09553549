"""The free-recall model: study items, a recall cue, then the model's own outputs fed back one step at a time until it
says stop. Trained with an order-agnostic loss; scored on the recall sequences it decodes itself.

Sequence (``primacy.tasks.free_recall.FreeRecallTask``): L study items (with distractors among them or after them in
the delayed and continual-distractor conditions), the cue, then L fed items. Output step r (r = 0..L) reads the
backbone at position T - L - 1 + r of a T-token sequence: the cue, then each fed item (L + r without distractors).
Items are tokens 0..K-1, stop is the last token (vocab_size - 1) and the cue the one before; the distractors, between
the items and the cue, are input only: no output is read at them, and recall is scored on the studied items alone.

Losses, with p_r the model's distribution at step r and R_r the study items not fed before step r (R_L is empty and
the answer there is stop):

* ``set_mass`` (default): loss_r = -log sum_{i in R_r} p_r(i). Any remaining item is a right answer; the model may
  put its mass on one of them (a recall order of its own) or spread it.
* ``uniform``: loss_r = -(1 / |R_r|) sum_{i in R_r} log p_r(i), cross-entropy against the uniform distribution over
  R_r: every remaining item must be equally likely, so the model is pushed to have no order.

Both add loss_L = -log p_L(stop) and average over the L + 1 steps. The fed items come from the batch (the task's
random order: ``teacher_forcing: sampled``) or, with ``teacher_forcing: greedy``, from the model itself: a pass
without gradients picks at each step the remaining item it rates highest, then the loss is taken on that order.
Feeding back runs a backbone's ``step`` when it has one (the recurrence of S4, S4D and the LSTM, the Transformer's
key-value cache), one step per token; a backbone without it runs a pass over the sequence per output.

At validation and test the model recalls freely (``decoding``): at each step it outputs the most probable token
(``greedy``) or samples one at ``temperature`` (``sampled``) from the whole vocabulary, and feeds it back.
Intrusions (any token that is not a studied item, the cue included) and repetitions are kept, not removed; the
recall ends at stop or after L outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import nn
from torchmetrics import MeanMetric

from primacy.analysis.behaviour.free_recall import PADDING, summarize
from primacy.analysis.behaviour.serial_position import position_indices
from primacy.backbones.base import Backbone
from primacy.checks import fits_in_memory, one_of, positive
from primacy.errors import UsageError
from primacy.metrics import FreeRecallStats
from primacy.models.base import TaskModel

Batch = dict[str, torch.Tensor]
LOSSES = ("set_mass", "uniform")
TEACHER_FORCING = ("sampled", "greedy")
DECODING = ("greedy", "sampled")
SUMMARY_KEYS = ("mean_recalled", "intrusion_rate", "repetition_rate", "early_minus_late")


class FreeRecallModel(TaskModel):
    """Token embedding (V, H), a backbone and an unembedding Linear(H, V) read at the L + 1 output steps.

    Args:
        backbone: the sequence model (any registered Backbone).
        vocab_size: V = K + 2 (items, cue, stop); linked from the task.
        n_items: L, linked from the task.
        loss: ``set_mass`` or ``uniform`` (module docstring).
        teacher_forcing: which items are fed back while training: ``sampled`` (the batch's random order of the
            remaining items) or ``greedy`` (the model's own best remaining item, decoded without gradients before the
            loss: 2L + 1 steps of a backbone with ``step``, or L passes over the sequence).
        decoding: how the model recalls at validation and test: ``greedy`` or ``sampled`` at ``temperature``.
        temperature: softmax temperature of ``sampled`` decoding (> 0).
        decoding_seed: seeds sampled decoding; each list draws from its own generator (seed, list index), so the
            recalls do not depend on batching or the number of processes.
        lr, betas, eps, weight_decay, warmup_steps: as for SequenceModel.
    """

    METRIC = "recall"  # val_recall and test_recall: FreeRecallStats
    HEADLINE = ("mean_recalled", "early_minus_late")
    requires = frozenset({"tokens", "study", "index"})  # training reads tokens; recall decodes from study and index
    task_sizes = frozenset({"n_items"})

    def __init__(
        self,
        backbone: Backbone,
        vocab_size: int = 34,
        n_items: int = 12,
        loss: Literal["set_mass", "uniform"] = "set_mass",
        teacher_forcing: Literal["sampled", "greedy"] = "sampled",
        decoding: Literal["greedy", "sampled"] = "greedy",
        temperature: float = 1.0,
        decoding_seed: int = 0,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.99),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        warmup_steps: int = 1000,
    ) -> None:
        super().__init__(backbone, vocab_size, lr, betas, eps, weight_decay, warmup_steps)
        positive(n_items=n_items)
        if not temperature > 0:
            raise UsageError(f"temperature={temperature} is invalid: it must be > 0")
        one_of("loss", loss, LOSSES)
        one_of("teacher_forcing", teacher_forcing, TEACHER_FORCING)
        one_of("decoding", decoding, DECODING)
        if vocab_size < n_items + 2:
            raise UsageError(f"vocab_size={vocab_size} is too small for n_items={n_items}: the model's tokens are "
                             f"the task's K = {vocab_size - 2} items, the cue and stop, and a list of distinct items "
                             f"needs K >= {n_items}")
        fits_in_memory("the unembedding", 4 * vocab_size * backbone.d_model, vocab_size=vocab_size,
                       d_model=backbone.d_model)
        self.save_hyperparameters(logger=False)  # the loggers get the whole config (RunConfig)
        self.unembedding = nn.Linear(backbone.d_model, vocab_size)
        self.n_items, self.stop = n_items, vocab_size - 1
        self.loss_name, self.teacher_forcing = loss, teacher_forcing
        self.decoding, self.temperature, self.decoding_seed = decoding, temperature, decoding_seed
        self.val_recall, self.test_recall = FreeRecallStats(n_items), FreeRecallStats(n_items)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) -> logits (B, L + 1, V) at the output steps, the last L + 1 positions (T = 2L + 1 without
        distractors)."""
        h = self.backbone(self.embedding(tokens))  # B T H
        return self.unembedding(h[:, tokens.shape[1] - self.n_items - 1 :])  # B L+1 V

    def order_agnostic_loss(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean loss over the L + 1 steps and whether each step's most probable token is a right answer (a
        remaining item, or stop at the end), (B, L + 1) bool. tokens: (B, T), the fed items the last L."""
        n = self.n_items
        logp = self(tokens).float().log_softmax(-1)  # B L+1 V
        fed = tokens[:, tokens.shape[1] - n :]  # B L: R_r is fed[:, r:]
        at_fed = logp[:, :n].gather(2, fed[:, None, :].expand(-1, n, -1))  # B L(step r) L(fed item j)
        remaining = torch.ones(n, n, dtype=torch.bool, device=tokens.device).triu()  # r L: j >= r
        if self.loss_name == "set_mass":
            step_loss = -at_fed.masked_fill(~remaining, float("-inf")).logsumexp(-1)  # B L
        else:
            step_loss = -(at_fed * remaining).sum(-1) / remaining.sum(-1)  # B L
        loss = torch.cat([step_loss, -logp[:, n, self.stop, None]], dim=1).mean()
        best = logp.argmax(-1)  # B L+1
        right = ((best[:, :n, None] == fed[:, None, :]) & remaining).any(-1)  # B L
        return loss, torch.cat([right, best[:, n, None] == self.stop], dim=1)

    @torch.no_grad()
    def greedy_order(self, tokens: torch.Tensor, study: torch.Tensor | None = None) -> torch.Tensor:
        """tokens with the fed items replaced by the model's own choice at each step: the remaining study item it
        rates highest. (B, T) -> (B, T); ``study`` (B, L) the lists, by default the tokens' first L (a sequence
        without distractors)."""
        prompt = tokens[:, : tokens.shape[1] - self.n_items]  # B T-L: the study phase and the cue
        if study is None:
            if prompt.shape[1] != self.n_items + 1:
                raise UsageError(f"greedy_order of {tokens.shape[1]}-token sequences needs their study lists: the "
                                 f"tokens' first n_items={self.n_items} are the list only without distractors")
            study = tokens[:, : self.n_items]  # B L
        left = torch.ones_like(study, dtype=torch.bool)  # B L: study positions not fed yet
        rows = torch.arange(len(study), device=study.device)

        def pick(r: int, logits: torch.Tensor) -> torch.Tensor:  # B V -> B
            best = logits.gather(1, study).masked_fill(~left, float("-inf")).argmax(-1)  # B: a study position
            left[rows, best] = False
            return study[rows, best]

        return torch.cat([prompt, self.feed_back(prompt, pick)], dim=1)

    @torch.no_grad()
    def recall(self, study: torch.Tensor, index: torch.Tensor, prompt: torch.Tensor | None = None) -> torch.Tensor:
        """The model's free recall of each list: study (B, L) items, index (B,) the lists' indices (they seed sampled
        decoding) -> recalls (B, L) output tokens, -1 after stop. ``prompt`` (B, P): what the model reads before its
        first output, ending with the cue (the study phase with its distractors); by default the list, then the
        cue."""
        if prompt is None:
            prompt = torch.cat([study, torch.full_like(study[:, :1], self.stop - 1)], dim=1)  # B L+1
        noise = self._gumbel(index, study.device) if self.decoding == "sampled" else None  # B L V

        def output(r: int, logits: torch.Tensor) -> torch.Tensor:  # B V -> B
            logits = logits.float()
            if noise is not None:
                logits = logits / self.temperature + noise[:, r]
            return logits.argmax(-1)  # B

        outputs = self.feed_back(prompt, output)  # B L
        return outputs.masked_fill(outputs.eq(self.stop).cumsum(1) > 0, PADDING)  # the stop and what follows it

    def feed_back(self, prompt: torch.Tensor, choose: Callable[[int, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Runs the model on ``prompt`` (B, P), the study phase and the cue, then feeds back at each output step
        r = 0..L-1 the token ``choose(r, logits)`` picks from that step's logits (B, V). Returns the fed tokens (B, L).

        A backbone with ``initial_state`` and ``step`` takes one step per token, P + L in all; any other runs L
        passes over the sequence, the tokens not fed yet held at stop (causality hides them)."""
        n, length = self.n_items, prompt.shape[1]
        fed = torch.full_like(prompt[:, :1], self.stop).expand(-1, n).clone()  # B L
        if callable(getattr(self.backbone, "step", None)):
            state = self.backbone.initial_state(len(prompt))
            for x_t in self.embedding(prompt).unbind(1):  # B H each
                h, state = self.backbone.step(x_t, state)
            for r in range(n):
                fed[:, r] = choose(r, self.unembedding(h))
                if r + 1 < n:
                    h, state = self.backbone.step(self.embedding(fed[:, r]), state)
            return fed
        tokens = torch.cat([prompt, fed], dim=1)  # B P+L
        for r in range(n):
            tokens[:, length + r] = choose(r, self(tokens)[:, r])
        return tokens[:, length:]

    def _gumbel(self, index: torch.Tensor, device: torch.device) -> torch.Tensor:
        """Gumbel noise (B, L, V), each list's from its own generator, so sampling is argmax(logits / T + noise)."""
        shape = (self.n_items, self.stop + 1)
        rows = [torch.rand(shape, generator=torch.Generator().manual_seed(self.decoding_seed * 1_000_003 + int(i)),
                           dtype=torch.float64) for i in index.tolist()]
        uniform = torch.stack(rows).clamp_min(1e-300)  # B L V
        return (-(-uniform.log()).log()).float().to(device)

    def training_answers(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = batch["tokens"]
        if self.teacher_forcing == "greedy":
            tokens = self.greedy_order(tokens, batch["study"])
        return self.order_agnostic_loss(tokens)

    def _update(self, batch: Batch, stats: FreeRecallStats, loss_mean: MeanMetric) -> None:
        loss, right = self.order_agnostic_loss(batch["tokens"])  # on the task's order, as sampled training sees it
        loss_mean.update(loss, weight=right.numel())
        prompt = batch["tokens"][:, : batch["tokens"].shape[1] - self.n_items]  # B T-L: the study phase, the cue
        stats.update(batch["study"], self.recall(batch["study"], batch["index"], prompt), batch["index"])

    def _summary(self, stats: FreeRecallStats) -> dict[str, float]:
        curves = summarize(stats.compute()[0])
        values = {"mean_recalled": curves.mean_recalled, "intrusion_rate": curves.intrusion_rate,
                  "repetition_rate": curves.repetition_rate,
                  "early_minus_late": position_indices(curves.spc.float())["early_minus_late"]}
        return {k: float(values[k]) for k in SUMMARY_KEYS}
