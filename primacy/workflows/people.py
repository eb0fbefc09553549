"""Human free-recall data, from the datasets psifr ships (an optional extra: psifr is GPL-3), as the tensors the
model's analyses take: per person, the study lists and the outputs in order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from primacy.analysis.behaviour.free_recall import PADDING
from primacy.checks import one_of
from primacy.errors import UsageError

INSTALL = "pip install -e '.[humans]'"


@dataclass(frozen=True)
class Dataset:
    name: str  # as primacy names it (the command line's --dataset)
    psifr_name: str  # psifr.fr.sample_data's
    list_length: int
    reference: str


DATASETS = {d.name: d for d in (
    Dataset("Morton2013", "Morton2013", 24, "Morton et al. (2013): 40 people, 48 lists of 24 words"),
    Dataset("peers", "peers_notask", 16, "PEERS experiment 1, no-task lists (Kahana et al.): 126 people, 28 lists of 16 words"),
)}


@dataclass(frozen=True)
class Person:
    subject: Any  # the dataset's subject id
    study: torch.Tensor  # lists x L: item ids, distinct within a list
    recalls: torch.Tensor  # lists x R: output item ids in order, PADDING after the last output


def dataset(name: str) -> Dataset:
    return DATASETS[one_of("dataset", name, DATASETS)]


def dataset_for_length(n_items: int) -> Dataset:
    """The dataset whose lists have ``n_items`` items."""
    for candidate in DATASETS.values():
        if candidate.list_length == n_items:
            return candidate
    lengths = ", ".join(f"{d.name} {d.list_length}" for d in DATASETS.values())
    raise UsageError(f"n_items={n_items}: no human dataset has lists of that length ({lengths})")


def load(name: str) -> list[Person]:
    """Every person of dataset ``name`` (psifr's sample data), in the dataset's subject order."""
    info = dataset(name)
    try:
        from psifr import fr
    except ImportError:
        raise UsageError(f"dataset={name} comes with psifr, which is not installed: {INSTALL}") from None
    return people(fr.sample_data(info.psifr_name), info.list_length)


def people(raw: Any, list_length: int) -> list[Person]:
    """A psifr raw table (a pandas DataFrame with columns subject, list, trial_type 'study' | 'recall', position,
    item; one row per study event and per output) as one Person per subject, in the order subjects first appear.
    Items become integer ids shared by the whole table, so an output of an item not studied in its list is an
    intrusion and an output said twice a repetition, as psifr scores them. Lists without outputs are kept."""
    import pandas as pd  # psifr's dependency: only reached with psifr installed

    order = {subject: rank for rank, subject in enumerate(pd.unique(raw["subject"]))}
    table = pd.DataFrame({"rank": raw["subject"].map(order).to_numpy(), "list": raw["list"].to_numpy(),
                          "study": (raw["trial_type"] == "study").to_numpy(), "position": raw["position"].to_numpy(),
                          "item": pd.factorize(raw["item"])[0]})
    keys = ["rank", "list"]
    studied = table[table["study"]].sort_values([*keys, "position"], kind="stable")
    sizes = studied.groupby(keys, sort=True).size()  # one entry per list, in (rank, list) order
    wrong = sizes[sizes != list_length]
    if len(wrong):
        (rank, list_id), n = wrong.index[0], int(wrong.iloc[0])
        subject = next(s for s, r in order.items() if r == rank)
        raise UsageError(f"subject {subject}, list {list_id} studied {n} items: the dataset's lists have {list_length}")
    study = studied["item"].to_numpy().reshape(-1, list_length)  # lists L
    outputs = table[~table["study"]].sort_values([*keys, "position"], kind="stable")
    row = sizes.index.get_indexer(pd.MultiIndex.from_frame(outputs[keys]))  # the list of each output
    if (row < 0).any():
        raise UsageError(f"the dataset has outputs of {int((row < 0).sum())} lists that studied nothing")
    rank_in_list = outputs.groupby(keys, sort=False).cumcount().to_numpy()
    recalls = np.full((len(sizes), max(1, int(rank_in_list.max(initial=-1)) + 1)), PADDING, dtype=np.int64)
    recalls[row, rank_in_list] = outputs["item"].to_numpy()
    ranks = sizes.index.get_level_values("rank").to_numpy()
    subjects = list(order)
    return [Person(subjects[r], torch.from_numpy(study[ranks == r].astype(np.int64)),
                   torch.from_numpy(_trim(recalls[ranks == r]))) for r in range(len(subjects))]


def _trim(recalls: np.ndarray) -> np.ndarray:
    """A person's recalls without the padding columns no list of theirs reaches (at least one column)."""
    used = (recalls != PADDING).any(axis=0)
    width = max(1, int(np.flatnonzero(used).max()) + 1) if used.any() else 1
    return recalls[:, :width]
