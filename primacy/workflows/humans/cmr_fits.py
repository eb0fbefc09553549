"""CMR fitted by likelihood to participants, people and model seeds alike (``primacy cmr_fit``, and ``primacy humans
--fit``, which launches it over chunks of participants and gathers the results).

A participant is one person's lists or one trained model's test lists (a free-recall run, one seed). Each is fitted
on its own (``primacy.analysis.behaviour.cmr.fitting``) and written to ``<out>/<participant>.json`` when its fit
ends: an interrupted fit loses only the participants in progress, and a rerun fits only those not yet written. A file
written under other settings (free parameters, bounds, seed, optimiser options) is refused, never mixed in.

The lag-CRP grid fit of a group (``primacy.analysis.behaviour.cmr.fits``) picks one cell of CMR's canonical variant
for the group's mean curve. ``grid_cell_spec`` writes that cell as a spec of the likelihood's CMR, so that the same
likelihood scores both, and ``grid_comparison`` sets their BICs side by side.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from primacy import files
from primacy.analysis.behaviour.cmr.fits import CMRFit
from primacy.analysis.behaviour.cmr.fitting import (
    DE_OPTIONS,
    DEFAULT_FREE,
    FitSpec,
    LikelihoodFit,
    fit_cmr_likelihood,
    recovery_correlations,
)
from primacy.analysis.behaviour.cmr.generate import cmr_generate
from primacy.analysis.behaviour.cmr.simulate import DEFAULT_TEMPERATURE
from primacy.analysis.behaviour.comparison import bootstrap_interval
from primacy.analysis.behaviour.free_recall import PADDING, recall_positions
from primacy.errors import UsageError
from primacy.rundir.layout import FREE_RECALL_ARRAYS, RunDir
from primacy.workflows.humans import people as human_data

FIT_FORMAT = 1  # the version of a participant file's layout
SPEC_FILE = "spec.json"  # a group's FitSpec, beside its fits, when it is not the default one


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
    lists: int | None = None  # fit each participant's first ``lists`` lists only (None: all of them)

    def as_dict(self) -> dict[str, Any]:
        """As each participant's file records it: every optimiser option, so that a change of default shows."""
        return {"format": FIT_FORMAT, "spec": self.spec.to_dict(), "seed": self.seed,
                "optimiser": {**DE_OPTIONS, "maxiter": self.max_generations, "polish": self.polish},
                **({} if self.lists is None else {"lists": self.lists})}

    def lists_of(self, participant: Participant) -> Participant:
        """The participant as fitted: its first ``lists`` lists."""
        if self.lists is None:
            return participant
        return Participant(participant.name, participant.study[: self.lists], participant.recalls[: self.lists])

    def fit(self, participant: Participant) -> LikelihoodFit:
        participant = self.lists_of(participant)
        return fit_cmr_likelihood(participant.positions, participant.n_items, self.spec, seed=self.seed,
                                  maxiter=self.max_generations, polish=self.polish)


def read_spec(path: Path) -> FitSpec:
    """The FitSpec in the JSON file ``path`` (``FitSpec.to_dict``'s layout); a UsageError names what is wrong."""
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UsageError(f"spec={path} cannot be read ({type(err).__name__}: {err}): give a JSON file "
                         '{"free": {NAME: [LOW, HIGH]}, "fixed": {NAME: VALUE}, "dependent": {NAME: "A - B * SOURCE"}}'
                         ) from None
    if not isinstance(content, dict) or set(content) - {"free", "fixed", "dependent"}:
        raise UsageError(f"spec={path} is invalid: its keys must be free, fixed and dependent")
    return FitSpec(**content)


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
            fitted = fitting.lists_of(participant)
            files.write_json(path, {"participant": participant.name, "n_lists": int(fitted.study.shape[0]),
                                    "list_length": participant.n_items, "settings": expected, "fit": fit.to_dict()})
            report(f"  {participant.name}: log-likelihood {fit.log_likelihood:.2f}, BIC {fit.bic:.1f} "
                   f"({time.perf_counter() - start:.1f} s)")
        fits[participant.name] = fit
    return fits


CHUNK = 8  # participants per job: each job is a process of its own, so a chunk pays its imports (~2 s) once


@dataclass(frozen=True)
class FitGroup:
    """People, or one model's seeds: where their data come from (``primacy cmr_fit``'s source arguments), who they
    are, where their fits go and what they are fitted with."""

    label: str
    source: tuple[str, ...]  # --dataset NAME | --data FILE | --runs RUN...
    participants: tuple[str, ...]
    out: Path  # <humans out>/fits/<label>
    settings: FitSettings = FitSettings()

    @property
    def spec_file(self) -> Path | None:
        """Where ``write_spec`` puts the group's spec for ``primacy cmr_fit --spec``; None for the default spec."""
        return None if self.settings.spec == FitSpec() else self.out / SPEC_FILE

    def write_spec(self) -> None:
        if self.spec_file is not None:
            files.write_json(self.spec_file, self.settings.spec.to_dict())


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
        """How status lines and the launcher's reports name the job: its group's folder and its index."""
        return f"{self.group.out.parent.name}/{self.group.out.name}/{self.index}"

    def args(self) -> tuple[str, ...]:
        """``primacy cmr_fit``'s arguments (its group's spec file written first: ``FitGroup.write_spec``)."""
        fitting, spec = self.group.settings, self.group.spec_file
        return ("cmr_fit", *self.group.source, "--out", str(self.group.out), "--seed", str(fitting.seed),
                "--max_generations", str(fitting.max_generations), *([] if fitting.polish else ["--no_polish"]),
                *([] if spec is None else ["--spec", str(spec)]),
                *([] if fitting.lists is None else ["--lists", str(fitting.lists)]), "--only", *self.participants)

    def done(self) -> bool:
        return all((self.group.out / file_name(name)).is_file() for name in self.participants)


def chunks(groups: list[FitGroup], size: int = CHUNK) -> list[FitChunk]:
    """Each group's participants in chunks of ``size``, in their order."""
    return [FitChunk(group, i // size, group.participants[i: i + size])
            for group in groups for i in range(0, len(group.participants), size)]


def gather(groups: list[FitGroup]) -> dict[str, dict[str, LikelihoodFit]]:
    """Every group's fits by participant, read from their files; a UsageError names the first one missing."""
    found: dict[str, dict[str, LikelihoodFit]] = {}
    for group in groups:
        found[group.label] = {}
        expected = group.settings.as_dict()
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


# The grid's canonical CMR has no start drift and no stopping rule (its chains start at a study context and draw a fixed
# number of items): what the likelihood needs for them is fitted, with DEFAULT_FREE's bounds.
GRID_FREE = ("B_start", "X1", "X2")
GRID_CELL = ("beta_enc", "beta_rec", "gamma_ft")  # what the lag-CRP grid fit chooses for a group, once


def grid_cell_spec(cell: CMRFit, temperature: float = DEFAULT_TEMPERATURE) -> FitSpec:
    """The likelihood's CMR at a cell of the canonical lag-CRP grid (``simulate``'s variant ``canonical``): B_enc =
    β_enc, B_rec = β_rec, M_FC = (1 - γ_FT) I + γ_FT · learned (Lfc = γ_FT, Dfc = 1 - γ_FT), M_CF learned only (Lcf =
    1, Dcf = 0), no primacy gradient (P1 = 0), no pre-experimental spread (Afc = Acf = 0), and the grid's choice rule
    e^(a / temperature) as cymr's e^(2a / T) (T = 2 · temperature); B_start, X1 and X2 free (``GRID_FREE``). One
    difference stays: the grid associates an item with the context before it, the likelihood's CMR with the context
    that includes it."""
    fixed = {"B_enc": cell.beta_enc, "B_rec": cell.beta_rec, "Lfc": cell.gamma_ft, "Dfc": 1 - cell.gamma_ft,
             "Lcf": 1.0, "Dcf": 0.0, "Afc": 0.0, "Acf": 0.0, "P1": 0.0, "P2": 1.0, "T": 2 * temperature}
    return FitSpec(free={name: DEFAULT_FREE[name] for name in GRID_FREE}, fixed=fixed, dependent={})


def grid_comparison(likelihood: dict[str, LikelihoodFit], grid: dict[str, LikelihoodFit],
                    cell: CMRFit) -> dict[str, Any]:
    """One group's BIC under its own likelihood fits (``likelihood``, by participant) beside the BIC of its lag-CRP
    grid cell (``grid``: each participant fitted with ``grid_cell_spec(cell)``). The grid's BIC counts its
    participants' free parameters (``GRID_FREE``) and, once for the group, the three the grid chose from the group's
    mean curve (``GRID_CELL``, with the group's events as n). ``delta_bic`` = grid's - likelihood's (> 0: the
    likelihood fit is better); ``members_better`` counts the participants whose own BIC is lower under their
    likelihood fit than under the grid cell (its three chosen parameters not counted)."""
    names = list(likelihood)
    n = sum(likelihood[name].n for name in names)
    grid_bic = sum(grid[name].bic for name in names) + len(GRID_CELL) * math.log(n)
    likelihood_bic = sum(likelihood[name].bic for name in names)
    return {"cell": {name: getattr(cell, name) for name in GRID_CELL}, "members": len(names), "n": n,
            "log_likelihood": sum(grid[name].log_likelihood for name in names), "bic": grid_bic,
            "likelihood_log_likelihood": sum(likelihood[name].log_likelihood for name in names),
            "likelihood_bic": likelihood_bic, "delta_bic": grid_bic - likelihood_bic,
            "members_better": sum(likelihood[name].bic < grid[name].bic for name in names)}


def simulated_participants(fits_dir: Path, seed: int,
                           n_lists: int | None = None) -> tuple[list[Participant], dict[str, dict[str, float]]]:
    """Parameter recovery's people: one simulated participant per fit in ``fits_dir`` (the files ``fit_participants``
    writes), with that participant's number of lists (or ``n_lists``) and list length, recalling under CMR at its
    fitted parameters (``cmr_generate``; participant i from the random stream (seed, i)). Returns them and their true
    parameters."""
    paths = sorted(fits_dir.glob("*.json")) if fits_dir.is_dir() else []
    if not paths:
        raise UsageError(f"recover={fits_dir} holds no fits: give a directory that `primacy cmr_fit` (or humans "
                         "--fit, in OUT/fits/GROUP) wrote")
    participants, truth = [], {}
    for index, path in enumerate(paths):
        try:
            content = json.loads(path.read_text())
            name, n_items = content["participant"], int(content["list_length"])
            lists = int(content["n_lists"]) if n_lists is None else n_lists
            parameters = LikelihoodFit.from_dict(content["fit"]).parameters
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UsageError(f"{path} is not a participant's fit ({type(err).__name__}: {err})") from None
        positions = cmr_generate(parameters, lists, n_items, np.random.default_rng([seed, index]))  # B L
        study = torch.arange(n_items).expand(lists, n_items)
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
