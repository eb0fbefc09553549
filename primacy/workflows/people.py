"""Human free-recall data, from the datasets psifr ships (an optional extra: psifr is GPL-3), as the tensors the
model's analyses take: per person, the study lists and the outputs in order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from primacy.analysis.free_recall import PADDING
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
    """A psifr raw table (columns subject, list, trial_type 'study' | 'recall', position, item; one row per study
    event and per output) as one Person per subject. Items become integer ids shared by the whole table, so an
    output of an item not studied in its list is an intrusion and an output said twice a repetition, as psifr
    scores them."""
    ids: dict[Any, int] = {}
    persons = []
    for subject, rows in raw.groupby("subject", sort=False):
        study, recalls = [], []
        for list_id, trial in rows.groupby("list", sort=True):
            studied = trial[trial["trial_type"] == "study"].sort_values("position")
            outputs = trial[trial["trial_type"] == "recall"].sort_values("position")
            if len(studied) != list_length:
                raise UsageError(f"subject {subject}, list {list_id} studied {len(studied)} items: the dataset's "
                                 f"lists have {list_length}")
            study.append([ids.setdefault(item, len(ids)) for item in studied["item"]])
            recalls.append([ids.setdefault(item, len(ids)) for item in outputs["item"]])
        width = max(1, max(len(r) for r in recalls))
        padded = [r + [PADDING] * (width - len(r)) for r in recalls]
        persons.append(Person(subject, torch.tensor(study), torch.tensor(padded)))
    return persons
