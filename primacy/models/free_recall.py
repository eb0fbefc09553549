"""The free-recall model: study items, a recall cue, then the model's own outputs fed back one step at a time until it
says stop. Trained with an order-agnostic loss or by reward; scored on the recall sequences it decodes itself.

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

Both add loss_L = -log p_L(stop) and average over the L + 1 steps (with ``loss_decay`` < 1, a mean weighting step r
by loss_decay ** r: "favour a few", below). The fed items come from the batch (the task's random order:
``teacher_forcing: sampled``) or, with ``teacher_forcing: greedy``, from the model itself: a pass without gradients
picks at each step the remaining item it rates highest, then the loss is taken on that order.
Feeding back runs a backbone's ``step`` when it has one (the recurrence of S4, S4D and the LSTM, the Transformer's
key-value cache), one step per token; a backbone without it runs a pass over the sequence per output.

At validation and test the model recalls freely (``decoding``): at each step it outputs the most probable token
(``greedy``) or samples one at ``temperature`` (``sampled``) from the whole vocabulary, and feeds it back.
Intrusions (any token that is not a studied item, the cue included) and repetitions are kept, not removed; the
recall ends at stop or after L outputs. Each list is also teacher-forced twice, fed the task's order and the model's
own greedy one, and the steps whose most probable token is a right answer are counted (``forced_accuracy`` in the
test's summary): a model right on the first but not on the second learned the task on orders its own recall never
feeds it (exposure bias).

``objective: reward`` trains by reward instead (REINFORCE, ``primacy.models.recall_reward``): the model recalls each
training list itself, sampling each output from its whole-vocabulary distribution (temperature 1) and feeding it back,
until stop or ``recall_limit`` outputs; a new studied item earns +1 (or less: ``rewarded_recalls``, ``reward_decay``),
a repeat costs ``repeat_cost``, an intrusion ``intrusion_cost``, stop 0. Stop is the task's stop token, which the
model already outputs, so the task is unchanged. The loss is -sum_r (G_r - b_r) log p_r(a_r), G_r the return from
output r on; the baseline b_r (``leave_one_out``) is the mean return from step r of the batch's other lists that
reach it, over every process's lists (gathered), so N processes at B / N follow the gradient of one at B. A
running mean was not chosen: it is state to checkpoint and to keep equal across processes, for no less bias. Each
list's samples come from its own generator, seeded by (``sampling_seed``, the list's row in the training stream), one
number an output put through the inverse of the model's cumulative distribution: they depend neither on batching nor
on the number of processes, and a resumed run draws what an unbroken one does.
The log-probabilities are those of one pass over the sampled sequence (the samples come from stepping: the same
distribution, to rounding). Validation and test are as with the order-agnostic objective, their loss included.

The objective variants of Li, Jensen, Zhang, Lu & Mattar (2024, "A neural network model of free recall learns
multiple memory strategies"): their abstract says the index code (forward recall from the start) emerged more when
networks were "encouraged to recall all studied items rather than prioritizing a few items". Here "every item
alike" is the default (every new recall +1) and "a few" is ``rewarded_recalls: K`` (only the first K distinct
recalls earn, so the best policy recalls its K surest items and stops) or ``reward_decay < 1`` (the k-th earns
decay ** k). The order-agnostic loss has its own, ``loss_decay < 1``: step r's loss weighs loss_decay ** r, so the
first outputs count most and the last ones, where only the few items not yet recalled are right, least (a model
that recalls a few items well and the rest poorly loses little). Only the abstract (and a 2024 CCN abstract of the
same group) could be read here, not the paper's methods: its reward values, its penalties, how its stop action is
rewarded, its recall limit and its learner (their group's earlier free-recall code trains an actor-critic with a
learned value, penalises lures and repeats alike and rewards stop only once every item is recalled) are not checked,
and these variants are this module's reading of the abstract, not their definitions.

``embedding_noise`` adds Gaussian noise of that standard deviation to every input embedding (the study items, the
distractors, the cue and the fed items), in training and at validation and test, with either objective: items held in
memory for longer carry more of it, a noisy encoding as in models of human memory. Each list's noise comes from its own
generator (training lists: the run's seed and their row; evaluation lists: ``decoding_seed`` and their index), one
vector a position, the same in every pass over the list: the teacher-forced, greedy and recall passes of a list read
the same noisy inputs, and the noise depends neither on batching nor on the number of processes. The head analyses
(``primacy.analysis.heads``) read the model without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import nn
from torchmetrics import MeanMetric

from primacy.analysis.behaviour.free_recall import PADDING, summarize
from primacy.analysis.behaviour.serial_position import position_indices
from primacy.backbones.base import Backbone
from primacy.checks import finite, fits_in_memory, non_negative, one_of
from primacy.errors import UsageError
from primacy.metrics import FreeRecallStats
from primacy.models import recall_draws, recall_reward
from primacy.models.base import TaskModel, logs_this_step
from primacy.models.optim import Optimiser
from primacy.models.recall_draws import gumbel_noise
from primacy.models.recall_reward import RewardSettings
from primacy.models.recall_settings import DECODING, LOSSES, TEACHER_FORCING, check_objective

Batch = dict[str, torch.Tensor]
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
        objective: ``order_agnostic`` (the loss above; the default) or ``reward`` (REINFORCE on the model's own
            sampled recalls, module docstring). The settings below are read by ``reward`` alone and must keep their
            defaults otherwise.
        repeat_cost, intrusion_cost: what a repeated studied item and an intrusion cost (>= 0). Keep them below
            L / (V - L), the odds that a random output is a studied item: above it, stopping at once beats the
            untrained model's recall, and training can settle there (0.5 at L = 32, V = 514 stopped every list by
            step 80 and never learned).
        rewarded_recalls: only the first K new recalls of an episode earn (1..L); None: every one.
        reward_decay: the k-th new recall (k = 0, 1, ...) earns reward_decay ** k, in (0, 1]; 1: all alike.
        recall_limit: the most outputs of a training episode, stop included (1..L); None: L, as at test.
        baseline: ``leave_one_out`` (the batch's other lists' mean return) or ``none``.
        sampling_seed: seeds the training samples with each list's row; None: the run's seed
            (``torch.initial_seed()``, which ``seed_everything`` sets).
        loss_decay: the order-agnostic loss of output step r (stop's at r = L) weighs loss_decay ** r, normalised to
            a weighted mean, in (0, 1]; 1: the plain mean over the L + 1 steps. Read by ``order_agnostic`` alone.
        embedding_noise: the standard deviation (>= 0) of the Gaussian noise added to every input embedding, in
            training and evaluation (module docstring); 0: none.
        **optimiser: the optimiser's settings (lr, betas, eps, weight_decay, warmup_steps): ``Optimiser``.
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
        objective: Literal["order_agnostic", "reward"] = "order_agnostic",
        repeat_cost: float = 0.05,
        intrusion_cost: float = 0.05,
        rewarded_recalls: int | None = None,
        reward_decay: float = 1.0,
        recall_limit: int | None = None,
        baseline: Literal["leave_one_out", "none"] = "leave_one_out",
        sampling_seed: int | None = None,
        loss_decay: float = 1.0,
        embedding_noise: float = 0.0,
        **optimiser: Any,
    ) -> None:
        super().__init__(backbone, vocab_size, Optimiser(**optimiser))
        # n_items is the task's, checked where it is linked (primacy.contract.check_linked_sizes); built by hand, the
        # metrics refuse a bad one, before the checks below that compare other settings with it
        stats = FreeRecallStats(n_items), FreeRecallStats(n_items)
        if not temperature > 0:
            raise UsageError(f"temperature={temperature} is invalid: it must be > 0")
        one_of("loss", loss, LOSSES)
        one_of("teacher_forcing", teacher_forcing, TEACHER_FORCING)
        one_of("decoding", decoding, DECODING)
        reward = {"repeat_cost": repeat_cost, "intrusion_cost": intrusion_cost, "rewarded_recalls": rewarded_recalls,
                  "reward_decay": reward_decay, "recall_limit": recall_limit, "baseline": baseline,
                  "sampling_seed": sampling_seed}
        check_objective(objective, teacher_forcing, n_items, reward, loss_decay)
        finite(embedding_noise=embedding_noise)
        non_negative(embedding_noise=embedding_noise)
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
        self.val_recall, self.test_recall = stats
        self.objective, self.baseline, self.sampling_seed = objective, baseline, sampling_seed
        self.loss_decay, self.embedding_noise = loss_decay, embedding_noise
        self.rewards = RewardSettings(recall_limit or n_items, repeat_cost, intrusion_cost, rewarded_recalls,
                                      reward_decay)

    def forward(self, tokens: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """tokens (B, T) -> logits (B, L + 1, V) at the output steps, the last L + 1 positions (T = 2L + 1 without
        distractors); ``noise`` (B, >= T, H) the input noise (``input_noise``), if any."""
        h = self.backbone(self.embed(tokens, noise))  # B T H
        return self.unembedding(h[:, tokens.shape[1] - self.n_items - 1 :])  # B L+1 V

    def embed(self, tokens: torch.Tensor, noise: torch.Tensor | None = None, start: int = 0) -> torch.Tensor:
        """The embeddings (B, T, H) of tokens (B, T) at positions start.., plus those positions' noise (B, >= T, H)."""
        x = self.embedding(tokens)  # B T H
        return x if noise is None else x + noise[:, start : start + tokens.shape[1]].to(x.dtype)

    def input_noise(self, index: torch.Tensor, length: int, training: bool) -> torch.Tensor | None:
        """The input noise (B, T, H) of lists ``index`` (B,) over ``length`` positions (None without it): training
        lists' from the run's seed and their row, evaluation lists' from ``decoding_seed`` and their index."""
        if self.embedding_noise == 0:
            return None
        seed, stream = ((torch.initial_seed(), recall_draws.TRAIN_NOISE_STREAM) if training
                        else (self.decoding_seed, recall_draws.EVAL_NOISE_STREAM))
        return recall_draws.input_noise(seed, stream, index, (length, self.backbone.d_model), self.embedding_noise,
                                        index.device)

    def order_agnostic_loss(self, tokens: torch.Tensor,
                            noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean loss over the L + 1 steps (weighted by ``loss_decay`` ** r) and whether each step's most probable
        token is a right answer (a remaining item, or stop at the end), (B, L + 1) bool. tokens: (B, T), the fed items
        the last L."""
        n = self.n_items
        logp = self(tokens, noise).float().log_softmax(-1)  # B L+1 V
        fed = tokens[:, tokens.shape[1] - n :]  # B L: R_r is fed[:, r:]
        at_fed = logp[:, :n].gather(2, fed[:, None, :].expand(-1, n, -1))  # B L(step r) L(fed item j)
        remaining = torch.ones(n, n, dtype=torch.bool, device=tokens.device).triu()  # r L: j >= r
        if self.loss_name == "set_mass":
            step_loss = -at_fed.masked_fill(~remaining, float("-inf")).logsumexp(-1)  # B L
        else:
            step_loss = -(at_fed * remaining).sum(-1) / remaining.sum(-1)  # B L
        losses = torch.cat([step_loss, -logp[:, n, self.stop, None]], dim=1)  # B L+1
        if self.loss_decay == 1:
            loss = losses.mean()
        else:
            weights = self.loss_decay ** torch.arange(n + 1, dtype=losses.dtype, device=losses.device)  # L+1
            loss = (losses * weights).sum(1).mean() / weights.sum()
        best = logp.argmax(-1)  # B L+1
        right = ((best[:, :n, None] == fed[:, None, :]) & remaining).any(-1)  # B L
        return loss, torch.cat([right, best[:, n, None] == self.stop], dim=1)

    @torch.no_grad()
    def greedy_order(self, tokens: torch.Tensor, study: torch.Tensor | None = None,
                     noise: torch.Tensor | None = None) -> torch.Tensor:
        """tokens with the fed items replaced by the model's own choice at each step: the remaining study item it
        rates highest. (B, T) -> (B, T); ``study`` (B, L) the lists, by default the tokens' first L (a sequence
        without distractors); ``noise`` (B, T, H) the input noise, if any."""
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

        return torch.cat([prompt, self.feed_back(prompt, pick, noise)], dim=1)

    @torch.no_grad()
    def recall(self, study: torch.Tensor, index: torch.Tensor, prompt: torch.Tensor | None = None,
               noise: torch.Tensor | None = None) -> torch.Tensor:
        """The model's free recall of each list: study (B, L) items, index (B,) the lists' indices (they seed sampled
        decoding) -> recalls (B, L) output tokens, -1 after stop. ``prompt`` (B, P): what the model reads before its
        first output, ending with the cue (the study phase with its distractors); by default the list, then the
        cue. With ``embedding_noise``, the lists' evaluation noise (B, P + L, H): ``noise`` if given (the caller drew
        it already), else drawn here from ``index``."""
        if prompt is None:
            prompt = torch.cat([study, torch.full_like(study[:, :1], self.stop - 1)], dim=1)  # B L+1
        if noise is None:
            noise = self.input_noise(index, prompt.shape[1] + self.n_items, training=False)  # B P+L H, or None
        gumbel = self._gumbel(index, study.device) if self.decoding == "sampled" else None  # B L V

        def output(r: int, logits: torch.Tensor) -> torch.Tensor:  # B V -> B
            logits = logits.float()
            if gumbel is not None:
                logits = logits / self.temperature + gumbel[:, r]
            return logits.argmax(-1)  # B

        outputs = self.feed_back(prompt, output, noise)  # B L
        return outputs.masked_fill(outputs.eq(self.stop).cumsum(1) > 0, PADDING)  # the stop and what follows it

    def feed_back(self, prompt: torch.Tensor, choose: Callable[[int, torch.Tensor], torch.Tensor],
                  noise: torch.Tensor | None = None) -> torch.Tensor:
        """Runs the model on ``prompt`` (B, P), the study phase and the cue, then feeds back at each output step
        r = 0..L-1 the token ``choose(r, logits)`` picks from that step's logits (B, V). Returns the fed tokens (B, L).
        ``noise`` (B, P + L, H): the input noise, if any.

        A backbone with ``initial_state`` and ``step`` takes one step per token, P + L in all; any other runs L
        passes over the sequence, the tokens not fed yet held at stop (causality hides them)."""
        n, length = self.n_items, prompt.shape[1]
        fed = torch.full_like(prompt[:, :1], self.stop).expand(-1, n).clone()  # B L
        if callable(getattr(self.backbone, "step", None)):
            state = self.backbone.initial_state(len(prompt))
            for x_t in self.embed(prompt, noise).unbind(1):  # B H each
                h, state = self.backbone.step(x_t, state)
            for r in range(n):
                fed[:, r] = choose(r, self.unembedding(h))
                if r + 1 < n:
                    h, state = self.backbone.step(self.embed(fed[:, r, None], noise, length + r)[:, 0], state)
            return fed
        tokens = torch.cat([prompt, fed], dim=1)  # B P+L
        for r in range(n):
            tokens[:, length + r] = choose(r, self(tokens, noise)[:, r])
        return tokens[:, length:]

    def _gumbel(self, index: torch.Tensor, device: torch.device) -> torch.Tensor:
        """Gumbel noise (B, L, V), each list's from its own generator, so sampling is argmax(logits / T + noise)."""
        generators = [torch.Generator().manual_seed(self.decoding_seed * 1_000_003 + int(i)) for i in index.tolist()]
        return gumbel_noise(generators, (self.n_items, self.stop + 1), device)

    def policy_uniforms(self, index: torch.Tensor, device: torch.device) -> torch.Tensor:
        """The reward objective's random numbers (B, L) float64 in [0, 1), one per output, for the training lists of
        rows ``index`` (B,): each list's from generator (``sampling_seed`` or the run's seed, POLICY_STREAM, row)."""
        seed = self.sampling_seed if self.sampling_seed is not None else torch.initial_seed()
        return recall_draws.policy_uniforms(seed, index, self.n_items, device)  # B L

    @torch.no_grad()
    def sample_recall(self, prompt: torch.Tensor, uniforms: torch.Tensor,
                      noise: torch.Tensor | None = None) -> torch.Tensor:
        """The model's own recall of each list, every output drawn from its distribution over the vocabulary
        (temperature 1) and fed back: prompt (B, P) ending with the cue, uniforms (B, L) -> outputs (B, L), stop and
        what follows it included. Output r is the token where the cumulative distribution (float64) passes
        uniforms[:, r]: one number an output, where Gumbel noise needs one a token (V times as many to draw).
        ``noise`` (B, P + L, H): the input noise, if any."""

        def draw(r: int, logits: torch.Tensor) -> torch.Tensor:  # B V -> B
            cdf = logits.double().softmax(-1).cumsum(-1)  # B V
            return torch.searchsorted(cdf, uniforms[:, r, None] * cdf[:, -1:]).squeeze(1).clamp_max(self.stop)

        return self.feed_back(prompt, draw, noise)

    def output_log_probs(self, prompt: torch.Tensor, outputs: torch.Tensor,
                         noise: torch.Tensor | None = None) -> torch.Tensor:
        """log p_r(outputs[:, r]) of each output given the prompt and the outputs before it, from one pass over
        the sequence: prompt (B, P), outputs (B, L) -> (B, L), with gradient; ``noise`` (B, P + L, H), if any."""
        logp = self(torch.cat([prompt, outputs], dim=1), noise).float().log_softmax(-1)[:, : self.n_items]  # B L V
        return logp.gather(2, outputs[:, :, None]).squeeze(2)  # B L

    def reward_loss(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The REINFORCE loss on the model's own sampled recall of each list, whether each output of the episodes
        was a new recall (1-D bool, the outputs taken) and each episode's return (B,) float64."""
        tokens, study = batch["tokens"], batch["study"]
        prompt = tokens[:, : tokens.shape[1] - self.n_items]  # B T-L: the study phase and the cue
        noise = self.input_noise(batch["index"], tokens.shape[1], training=True)  # B T H, or None
        outputs = self.sample_recall(prompt, self.policy_uniforms(batch["index"], tokens.device), noise)  # B L
        episode = recall_reward.score_recalls(study, outputs, self.stop, self.rewards)
        returns = recall_reward.returns_to_go(episode.rewards)  # B L
        if self.baseline == "none":
            baseline = torch.zeros_like(returns)
        else:
            totals = self._batch_totals(recall_reward.step_totals(returns, episode.taken))  # 2 L
            baseline = recall_reward.leave_one_out(returns, episode.taken, totals)
        log_probs = self.output_log_probs(prompt, outputs, noise)  # B L
        loss = recall_reward.reinforce_loss(log_probs, returns, baseline, episode.taken)
        return loss, episode.new[episode.taken], returns[:, 0]

    def _batch_totals(self, totals: torch.Tensor) -> torch.Tensor:
        """This process's ``step_totals`` (2, L) summed over every process of the run (itself alone outside one)."""
        trainer = self._trainer
        if trainer is None or trainer.world_size == 1:
            return totals
        return self.all_gather(totals).sum(0)

    def training_answers(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The objective's loss and its answers: the L + 1 output steps (right: a right answer is the most probable
        token), or with ``reward`` the episodes' outputs (right: a new recall; train/return logs the mean return)."""
        if self.objective == "reward":
            loss, new, returns = self.reward_loss(batch)
            if logs_this_step(self._trainer):
                self.log("train/return", returns.mean().float(), prog_bar=True)
            return loss, new
        tokens = batch["tokens"]
        noise = self.input_noise(batch["index"], tokens.shape[1], training=True)  # B T H, or None
        if self.teacher_forcing == "greedy":
            tokens = self.greedy_order(tokens, batch["study"], noise)
        return self.order_agnostic_loss(tokens, noise)

    def _update(self, batch: Batch, stats: FreeRecallStats, loss_mean: MeanMetric) -> None:
        noise = self.input_noise(batch["index"], batch["tokens"].shape[1], training=False)  # B T H, or None
        # teacher-forced on the task's order, as sampled training sees it, then on the model's own, as greedy does
        loss, right = self.order_agnostic_loss(batch["tokens"], noise)
        loss_mean.update(loss, weight=right.numel())
        own = self.greedy_order(batch["tokens"], batch["study"], noise)
        _, right_own = self.order_agnostic_loss(own, noise)
        stats.update_forced(right, right_own)
        prompt = batch["tokens"][:, : batch["tokens"].shape[1] - self.n_items]  # B T-L: the study phase, the cue
        stats.update(batch["study"], self.recall(batch["study"], batch["index"], prompt, noise), batch["index"])

    def _summary(self, stats: FreeRecallStats) -> dict[str, float]:
        curves = summarize(stats.compute()[0])
        values = {"mean_recalled": curves.mean_recalled, "intrusion_rate": curves.intrusion_rate,
                  "repetition_rate": curves.repetition_rate,
                  "early_minus_late": position_indices(curves.spc.float())["early_minus_late"]}
        return {k: float(values[k]) for k in SUMMARY_KEYS}

