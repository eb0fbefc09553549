"""A user's people as a free-recall file in psifr's long format: random lists with intrusions and repetitions, the
file written from rows, and three people's file (conftest.py's ``three_people`` fixture)."""

import csv
import random

import torch

from primacy.analysis.behaviour.free_recall import long_format_rows

HEADER = ["subject", "list", "trial_type", "position", "item", "study_position"]


def lists(seed: int, n_lists: int = 6, n_items: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """Random lists (B, L) of distinct words and their outputs (B, L + 2), with intrusions and repetitions."""
    generator = torch.Generator().manual_seed(seed)
    study = torch.rand(n_lists, 50, generator=generator).argsort(dim=1)[:, :n_items]
    recalls = torch.full((n_lists, n_items + 2), -1)
    for b in range(n_lists):
        said = study[b, torch.randperm(n_items, generator=generator)[: b % (n_items + 1)]].tolist()
        said += [study[b, 0].item()] * (b % 2) + [100 + b] * (b % 3 == 1)  # a repetition, an intrusion
        recalls[b, : len(said)] = torch.tensor(said, dtype=torch.long)
    return study, recalls


def write(path, rows: list[dict], header=HEADER) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def three_people_file(directory) -> tuple:
    """Three subjects' lists as rows shuffled out of order, items as words, in ``directory``/mine.csv; the file and the
    lists (conftest.py's ``three_people`` fixture)."""
    originals = {name: lists(seed) for seed, name in enumerate(["ann", "bo", "cy"])}
    rows = [{**row, "item": f"w{row['item']}"}
            for name, (study, recalls) in originals.items() for row in long_format_rows(study, recalls, name)]
    random.Random(0).shuffle(rows)
    path = directory / "mine.csv"
    write(path, rows)
    return path, originals
