"""How much of a training step goes to making data, at the quickstart scale.

Measures, side by side in one run: the vectorised batch generator (with the held-out exclusion), a full
training step of the quickstart model (forward, backward, Adam), and a straightforward per-trial Python
generator of the same data. Prints medians and the ratios; no thresholds.

    python benchmarks/data_generation.py [--repeats 50]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch
import torch.nn.functional as F

from primacy.backbones.s4d import S4DBackbone
from primacy.model import SequenceModel
from primacy.tasks.verification import held_out_sets, set_hash, stream_generator, token_hashes, training_batch

L_ITEMS, VOCAB, BATCH, HELD_OUT = 32, 512, 64, 1024


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
                queries.append(distractors[j]); labels.append(0.0); positions.append(-1)
            else:
                queries.append(study[i]); labels.append(1.0); positions.append(i)
        tokens.append(study + queries); targets.append(labels); study_pos.append(positions)
    return {"tokens": torch.tensor(tokens), "targets": torch.tensor(targets), "study_pos": torch.tensor(study_pos)}


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
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


if __name__ == "__main__":
    main()
