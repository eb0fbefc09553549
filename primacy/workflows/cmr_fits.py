"""CMR fitted by likelihood to participants, people and model seeds alike (``primacy cmr_fit``, and ``primacy humans
--fit``, which launches it over chunks of participants and gathers the results).

A participant is one person's lists or one trained model's test lists (a free-recall run, one seed). Each is fitted
on its own (``primacy.analysis.behaviour.cmr.fitting``) and written to ``<out>/<participant>.json`` when its fit
ends: an interrupted fit loses only the participants in progress, and a rerun fits only those not yet written. A file
written under other settings (free parameters, bounds, seed, optimiser options) is refused, never mixed in.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from primacy import files
from primacy.analysis.behaviour.cmr.fitting import (
    DE_OPTIONS,
    FitSpec,
    LikelihoodFit,
    fit_cmr_likelihood,
    recovery_correlations,
)
from primacy.analysis.behaviour.cmr.generate import cmr_generate
from primacy.analysis.behaviour.comparison import bootstrap_interval
from primacy.analysis.behaviour.free_recall import PADDING, recall_positions
from primacy.errors import UsageError
from primacy.rundir.layout import FREE_RECALL_ARRAYS, RunDir
from primacy.workflows import people as human_data

FIT_FORMAT = 1  # the version of a participant file's layout


@dataclass(frozen=True)
class Participant:
    """One person's or one seed's free-recall lists."""

    name: str  # the person's subject id, or the run directory's name (seed0, ...)
    study: torch.Tensor  # B L item ids
    recalls: torch.Tensor  # B R output item ids, PADDING (-1) after the last

    @property
    def positions(self) -> np.ndarray:
        """(B, R) serial positions of the outputs, as the likelihood reads them."""
        return recall_positions(self.study, self.recalls).numpy()

    @property
    def n_items(self) -> int:
        return int(self.study.shape[1])


def people_participants(persons: list[human_data.Person]) -> list[Participant]:
    return [Participant(str(person.subject), person.study, person.recalls) for person in persons]


def run_participants(run_dirs: list[Path]) -> list[Participant]:
    """One participant per free-recall run: its test lists (results/free_recall.npz), named after its directory."""
    found = []
    for run in map(RunDir, run_dirs):
        path = run.results / FREE_RECALL_ARRAYS
        if not path.is_file():
            raise UsageError(f"run {run.path} has no {FREE_RECALL_ARRAYS} in results/: give free-recall runs that "
                             "`primacy fit` tested")
        with np.load(path) as arrays:
            if "study" not in arrays or "recalls" not in arrays:
                raise UsageError(f"{path} holds no recall sequences (study, recalls): test the run again with "
                                 f"`primacy test` to write them")
            found.append(Participant(run.path.name, torch.from_numpy(arrays["study"]),
                                     torch.from_numpy(arrays["recalls"])))
    return found


def file_name(participant: str) -> str:
    """A participant's file name: its name with anything but letters, digits, '.', '-' and '_' as '_'."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", participant) + ".json"


@dataclass(frozen=True)
class FitSettings:
    """What a participant's fit depends on besides its data: which parameters are free (and their bounds), fixed
    and dependent, the optimiser's seed, its generations at most and whether the best set is polished by L-BFGS-B
    at the end (differential evolution, ``DE_OPTIONS``)."""

    spec: FitSpec = FitSpec()
    seed: int = 0
    max_generations: int = DE_OPTIONS["maxiter"]
    polish: bool = DE_OPTIONS["polish"]

    def as_dict(self) -> dict[str, Any]:
        """As each participant's file records it: every optimiser option, so that a change of default shows."""
        return {"format": FIT_FORMAT, "spec": self.spec.to_dict(), "seed": self.seed,
                "optimiser": {**DE_OPTIONS, "maxiter": self.max_generations, "polish": self.polish}}

    def fit(self, participant: Participant) -> LikelihoodFit:
        return fit_cmr_likelihood(participant.positions, participant.n_items, self.spec, seed=self.seed,
                                  maxiter=self.max_generations, polish=self.polish)


def read_fit(path: Path, expected: dict[str, Any]) -> LikelihoodFit | None:
    """The fit in ``path`` when it exists and was made under ``expected`` settings; None when it does not exist."""
    if not path.is_file():
        return None
    try:
        content = json.loads(path.read_text())
        written = content["settings"]
        fit = LikelihoodFit.from_dict(content["fit"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UsageError(f"{path} is damaged ({type(err).__name__}: {err}): delete it to fit that participant "
                         "again") from None
    if written != expected:
        raise UsageError(f"{path} was fitted under other settings ({_difference(written, expected)}): give another "
                         "--out, or delete it to fit again")
    return fit


def _difference(written: dict[str, Any], expected: dict[str, Any]) -> str:
    keys = sorted(set(written) | set(expected), key=str)
    key = next(k for k in keys if written.get(k) != expected.get(k))
    return f"{key} {json.dumps(written.get(key))} there, {json.dumps(expected.get(key))} now"


def fit_participants(participants: list[Participant], out: Path, fitting: FitSettings,
                     report: Any = print) -> dict[str, LikelihoodFit]:
    """Each participant's fit, from ``out`` when already written there, else fitted and written (one file each, as
    it ends). ``report`` gets a line per fitted participant."""
    expected = fitting.as_dict()
    names = [file_name(p.name) for p in participants]
    clash = next((n for n in names if names.count(n) > 1), None)
    if clash:
        raise UsageError(f"two participants are both written as {out / clash}: give them distinct names")
    fits = {}
    for participant, name in zip(participants, names):
        path = out / name
        fit = read_fit(path, expected)
        if fit is None:
            start = time.perf_counter()
            fit = fitting.fit(participant)
            files.write_json(path, {"participant": participant.name, "n_lists": int(participant.study.shape[0]),
                                    "list_length": participant.n_items, "settings": expected, "fit": fit.to_dict()})
            report(f"  {participant.name}: log-likelihood {fit.log_likelihood:.2f}, BIC {fit.bic:.1f} "
                   f"({time.perf_counter() - start:.1f} s)")
        fits[participant.name] = fit
    return fits


CHUNK = 8  # participants per job: each job is a process of its own, so a chunk pays its imports (~2 s) once


@dataclass(frozen=True)
class FitGroup:
    """People, or one model's seeds: where their data come from (``primacy cmr_fit``'s source arguments), who they
    are, and where their fits go."""

    label: str
    source: tuple[str, ...]  # --dataset NAME | --data FILE | --runs RUN...
    participants: tuple[str, ...]
    out: Path  # <humans out>/fits/<label>


@dataclass(frozen=True)
class FitChunk:
    """One job: ``primacy cmr_fit`` on some participants of a group, its logs and state in ``dir``."""

    group: FitGroup
    index: int
    participants: tuple[str, ...]

    @property
    def dir(self) -> Path:
        return self.group.out / "jobs" / str(self.index)

    @property
    def label(self) -> str:
        """How status lines and the launcher's reports name the job."""
        return f"{self.group.label}/{self.index}"

    def args(self, fitting: FitSettings) -> tuple[str, ...]:
        if fitting.spec != FitSpec():
            raise UsageError("primacy cmr_fit fits the default FitSpec only: fit other specs in Python")
        return ("cmr_fit", *self.group.source, "--out", str(self.group.out), "--seed", str(fitting.seed),
                "--max_generations", str(fitting.max_generations), *([] if fitting.polish else ["--no_polish"]),
                "--only", *self.participants)

    def done(self) -> bool:
        return all((self.group.out / file_name(name)).is_file() for name in self.participants)


def chunks(groups: list[FitGroup], size: int = CHUNK) -> list[FitChunk]:
    """Each group's participants in chunks of ``size``, in their order."""
    return [FitChunk(group, i // size, group.participants[i: i + size])
            for group in groups for i in range(0, len(group.participants), size)]


def gather(groups: list[FitGroup], fitting: FitSettings) -> dict[str, dict[str, LikelihoodFit]]:
    """Every group's fits by participant, read from their files; a UsageError names the first one missing."""
    expected = fitting.as_dict()
    found: dict[str, dict[str, LikelihoodFit]] = {}
    for group in groups:
        found[group.label] = {}
        for name in group.participants:
            fit = read_fit(group.out / file_name(name), expected)
            if fit is None:
                raise UsageError(f"participant {name} of {group.label} has no fit in {group.out}: run the same "
                                 "command again")
            found[group.label][name] = fit
    return found


def fit_rows(fits: dict[str, dict[str, LikelihoodFit]]) -> list[dict[str, Any]]:
    """fits.csv: a row per participant: group, participant, every parameter, log_likelihood, n (events), k (free
    parameters), bic."""
    return [{"group": label, "participant": name, **fit.parameters, "log_likelihood": fit.log_likelihood,
             "n": fit.n, "k": fit.k, "bic": fit.bic}
            for label, members in fits.items() for name, fit in members.items()]


def fit_summary(fits: dict[str, dict[str, LikelihoodFit]], free: list[str]) -> dict[str, Any]:
    """Per group: members, the summed log-likelihood, events and BIC, and each free parameter's mean, standard
    deviation and bootstrap 95% interval of the mean over members."""
    summary = {}
    for label, members in fits.items():
        values = {name: np.array([fit.parameters[name] for fit in members.values()]) for name in free}
        summary[label] = {
            "members": len(members), "log_likelihood": sum(f.log_likelihood for f in members.values()),
            "n": sum(f.n for f in members.values()), "bic": sum(f.bic for f in members.values()),
            "parameters": {name: {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if len(v) > 1 else None,
                                  **dict(zip(("ci_low", "ci_high"), bootstrap_interval(v)))}
                           for name, v in values.items()}}
    return summary


def simulated_participants(fits_dir: Path, seed: int) -> tuple[list[Participant], dict[str, dict[str, float]]]:
    """Parameter recovery's people: one simulated participant per fit in ``fits_dir`` (the files ``fit_participants``
    writes), with that participant's number of lists and list length, recalling under CMR at its fitted parameters
    (``cmr_generate``; participant i from the random stream (seed, i)). Returns them and their true parameters."""
    paths = sorted(fits_dir.glob("*.json")) if fits_dir.is_dir() else []
    if not paths:
        raise UsageError(f"recover={fits_dir} holds no fits: give a directory that `primacy cmr_fit` (or humans "
                         "--fit, in OUT/fits/GROUP) wrote")
    participants, truth = [], {}
    for index, path in enumerate(paths):
        try:
            content = json.loads(path.read_text())
            name, n_lists, n_items = content["participant"], int(content["n_lists"]), int(content["list_length"])
            parameters = LikelihoodFit.from_dict(content["fit"]).parameters
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UsageError(f"{path} is not a participant's fit ({type(err).__name__}: {err})") from None
        positions = cmr_generate(parameters, n_lists, n_items, np.random.default_rng([seed, index]))  # B L
        study = torch.arange(n_items).expand(n_lists, n_items)
        recalls = torch.from_numpy(np.where(positions >= 0, positions, PADDING))
        participants.append(Participant(name, study, recalls))
        truth[name] = dict(parameters)
    return participants, truth


def recovery(truth: dict[str, dict[str, float]], fits: dict[str, LikelihoodFit],
             free: tuple[str, ...]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """recovery.csv's rows (participant, then each free parameter's true and fitted value) and recovery.json (per
    free parameter Pearson's r between true and fitted values over the participants, and n)."""
    names = list(truth)
    true = np.array([[truth[name][p] for p in free] for name in names])  # P k
    fitted = np.array([[fits[name].parameters[p] for p in free] for name in names])  # P k
    rows = [{"participant": name, **{f"{kind}_{p}": table[i, j] for p_i, p in enumerate(free)
                                     for kind, table, j in (("true", true, p_i), ("fitted", fitted, p_i))}}
            for i, name in enumerate(names)]
    r = recovery_correlations(true, fitted) if len(names) > 1 else np.full(len(free), np.nan)
    return rows, {"n": len(names), "r": dict(zip(free, r.tolist()))}
