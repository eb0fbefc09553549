"""How much of a training step goes to making data, at the quickstart scale.

Measures, side by side in one run: the vectorised batch generator (with the held-out exclusion), a full
training step of the quickstart model (forward, backward, Adam), and a straightforward per-trial Python
generator of the same data. Then, for the list tasks with a RecallModel (delayed reconstruction and associative
recall), the task's training batch (``stream_batch``, held-out sets avoided) against one training step of the model
their quickstart config builds (training_step's forward and loss, backward, AdamW step), both built from the config
read now, so a retuned config is measured as it is. Prints medians and the ratios; no thresholds.

    python benchmarks/data_generation.py [--repeats 50] [--configs configs/quickstart-reconstruction.yaml ...]
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
import yaml
from lightning.pytorch.cli import LightningArgumentParser

from primacy import registry
from primacy.backbones.s4d import S4DBackbone
from primacy.models.lists import SequenceModel
from primacy.models.optim import param_groups
from primacy.rundir.runs import link_task_to_model
from primacy.tasks.verification import held_out_sets, set_hash, stream_generator, token_hashes, training_batch

L_ITEMS, VOCAB, BATCH, HELD_OUT = 32, 512, 64, 1024
ROOT = Path(__file__).resolve().parents[1]
LIST_CONFIGS = ("configs/quickstart-reconstruction.yaml", "configs/quickstart-recall.yaml")


def per_trial_batch(rng: random.Random, held_out: set[frozenset[int]]) -> dict[str, torch.Tensor]:
    """The obvious implementation: one trial at a time, sets checked against the held-out list."""
    tokens, targets, study_pos = [], [], []
    for _ in range(BATCH):
        while True:
            study = rng.sample(range(VOCAB), L_ITEMS)
            if frozenset(study) not in held_out:
                break
        pool = [t for t in range(VOCAB) if t not in set(study)]
        distractors = rng.sample(pool, L_ITEMS)
        order = list(range(L_ITEMS))
        rng.shuffle(order)
        queries, labels, positions = [], [], []
        for j, i in enumerate(order):
            if rng.random() < 0.5:
                query, label, position = distractors[j], 0.0, -1
            else:
                query, label, position = study[i], 1.0, i
            queries.append(query)
            labels.append(label)
            positions.append(position)
        tokens.append(study + queries)
        targets.append(labels)
        study_pos.append(positions)
    return {"tokens": torch.tensor(tokens), "targets": torch.tensor(targets), "study_pos": torch.tensor(study_pos)}


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def build(config: Path) -> tuple[L.LightningModule, L.LightningDataModule]:
    """The model and task ``config`` builds, as `primacy fit` does (the task's sizes linked to the model)."""
    settings = yaml.safe_load(config.read_text())
    registry.load_all()  # short backbone names
    parser = LightningArgumentParser()
    parser.add_lightning_class_args(L.LightningModule, "model", subclass_mode=True)
    parser.add_lightning_class_args(L.LightningDataModule, "data", subclass_mode=True)
    link_task_to_model(parser)
    parsed = parser.parse_object({"model": settings["model"], "data": settings["data"]})
    instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes  # renamed in jsonargparse 4.49
    built = instantiate(parsed)
    return built.model, built.data


def list_task(config: Path, repeats: int) -> None:
    """``stream_batch`` of the config's task against a training step of its model, each median of ``repeats``."""
    torch.manual_seed(0)
    model, task = build(config)
    model.train()
    hp = model.hparams
    optimizer = torch.optim.AdamW(param_groups(model, hp.lr, hp.weight_decay), lr=hp.lr, betas=hp.betas, eps=hp.eps)
    start = time.perf_counter()
    task.stream_batch(0, task.batch_size)  # the first call builds the held-out sets and their hashes, once a run
    first = 1e3 * (time.perf_counter() - start)
    index = itertools.count(1)  # a new batch each call, as training draws them
    batch = task.stream_batch(next(index), task.batch_size)

    def train_step() -> None:
        loss = model.training_step(batch, 0)  # forward and loss (no logging outside a Trainer)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    generation = median_ms(lambda: task.stream_batch(next(index), task.batch_size), repeats)
    step = median_ms(train_step, repeats)
    backbone = model.backbone
    print(f"\n{config.relative_to(ROOT) if config.is_relative_to(ROOT) else config}: {type(task).__name__} "
          f"{dict(task.hparams)}")
    print(f"  model: {type(model).__name__}, {type(backbone).__name__} d_model={backbone.d_model}, "
          f"vocab_size={hp.vocab_size}, sequences {tuple(batch['tokens'].shape)}")
    print(f"  first batch (builds the held-out sets)  {first:8.3f} ms")
    print(f"  stream_batch                          {generation:8.3f} ms")
    print(f"  training step (fwd, bwd, AdamW)       {step:8.3f} ms")
    print(f"  data / training step                  {generation / step:8.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--configs", nargs="*", default=[str(ROOT / c) for c in LIST_CONFIGS],
                        help="list-task configs to measure (default: the reconstruction and recall quickstarts)")
    args = parser.parse_args()

    held = held_out_sets(HELD_OUT, L_ITEMS, VOCAB, seed=0)
    token_hash = token_hashes(VOCAB, seed=0)
    excluded = set_hash(held, token_hash).sort().values
    generator = stream_generator(0, 0)
    rng = random.Random(0)
    held_sets = {frozenset(s.tolist()) for s in held}

    model = SequenceModel(S4DBackbone(d_model=64, d_state=64, train_A=False, train_B=False), vocab_size=VOCAB,
                          n_items=L_ITEMS)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = training_batch(BATCH, L_ITEMS, VOCAB, 0.5, generator, excluded, token_hash)

    def train_step() -> None:
        logits = model(batch["tokens"])
        loss = F.binary_cross_entropy_with_logits(logits, batch["targets"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    vectorised = median_ms(lambda: training_batch(BATCH, L_ITEMS, VOCAB, 0.5, generator, excluded, token_hash),
                           args.repeats)
    step = median_ms(train_step, args.repeats)
    per_trial = median_ms(lambda: per_trial_batch(rng, held_sets), max(5, args.repeats // 5))
    print(f"quickstart scale: L={L_ITEMS}, K={VOCAB}, batch={BATCH}, {HELD_OUT} held-out sets, "
          f"torch threads={torch.get_num_threads()}")
    print(f"vectorised batch generation  {vectorised:8.3f} ms")
    print(f"training step (S4D, H=64)    {step:8.3f} ms")
    print(f"per-trial Python generator   {per_trial:8.3f} ms")
    print(f"data / training step         {vectorised / step:8.1%}")
    print(f"per-trial / vectorised       {per_trial / vectorised:8.1f}x")
    for config in args.configs:
        list_task(Path(config).resolve(), args.repeats)


if __name__ == "__main__":
    main()
