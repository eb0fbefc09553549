"""results/: the published runs that the docs' numbers come from. Each run kept there is complete (its config, its
results, a launch that ended well and its wall time), sits in the folder its knob's value names, and its summary says
what its arrays say, so a table drawn from the folder is a table of those arrays."""

import json
import math
import re
import subprocess

import pytest
import yaml
from conftest import ROOT

from primacy.rundir import kinds, results
from primacy.rundir.kinds.study_query import StudyQueryResults
from primacy.rundir.layout import RunDir
from primacy.workflows import launchers

RESULTS = ROOT / "results"
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's: 500 configs in 2 s, not 23
PUBLISHED = subprocess.run(["git", "ls-files", "-z", "results"], cwd=ROOT, capture_output=True, check=True).stdout
# every run directory git holds in the folder (a run training into results/ is not one until it is added), with its
# results: an atlas seed's (<atlas>/<row>/<knob>=<value>/seed<k>) and its test at 2L, a reproduced figure's
# (<figure>/<config>/seed<k>)
KEPT = sorted({(ROOT / name).parents[1] for name in PUBLISHED.decode().split("\0")
               if name.endswith("/results/summary.json") and any(part.startswith("seed") for part in name.split("/"))})


def test_the_folder_keeps_runs():
    assert (RESULTS / "README.md").is_file()
    assert KEPT or not any(RESULTS.glob("*/*/*/seed*")), "run directories without results"


@pytest.mark.parametrize("run", KEPT, ids=[str(run.relative_to(RESULTS)) for run in KEPT])
def test_a_kept_run_is_complete_and_its_summary_is_its_arrays(run):
    state = launchers.read_state(run)
    assert state.get("state") == "exited" and state.get("exit_code") == 0, state
    assert launchers.run_seconds(run) > 0
    tested_at_2l = run.name == "extrapolate"  # `primacy test` of its seed's model: the seed's config, twice its L
    seed = run.parent if tested_at_2l else run
    config = yaml.load(RunDir(seed).config.read_text(), Loader=YAML_LOADER)
    assert config["ckpt_path"] is None, f"{seed}: its config.yaml would resume from a checkpoint results/ does not keep"
    if "=" in seed.parent.name:  # an atlas's run: its folder names its knob's value
        knob, value = seed.parent.name.split("=")
        assert str(_find(config, knob)) == value, f"{seed}: {knob} is not {value}"
    kind = kinds.for_run(RunDir(run))
    if not isinstance(kind, StudyQueryResults):  # another kind (an induction run's logged losses): its files read
        assert kind.read(RunDir(run)), run
        return
    read = results.read(RunDir(run).results)
    summary = json.loads(RunDir(run).summary.read_text())
    assert summary["n_items"] == (2 if tested_at_2l else 1) * config["data"]["init_args"]["n_items"]
    for key in results.SCALAR_KEYS:
        if summary[key] is None:  # JSON's NaN: a measure the task has none of (MQAR's distractors)
            assert math.isnan(float(read[key])), key
        else:
            assert summary[key] == pytest.approx(float(read[key]), abs=1e-6), key


def _find(config: dict, knob: str):
    """A knob's value in a run's config: the atlas names knobs by their last key (n_items, window, mlstm_heads)."""
    for section in (config["data"]["init_args"], config["model"]["init_args"]["backbone"]["init_args"]):
        if knob in section:
            return section[knob]
    raise KeyError(knob)


BUDGET_MB = 150  # results/README.md, "What is here"


def test_the_folder_stays_within_its_budget_and_its_readme_says_its_size():
    """The published files (git's, so a run training into results/ does not count until it is added) stay under the
    budget, and results/README.md says their size to the megabyte."""
    files = [ROOT / name for name in PUBLISHED.decode().split("\0") if name]
    size = sum(path.stat().st_size for path in files if path.is_file()) / 2**20
    assert size < BUDGET_MB, f"results/ holds {size:.0f} MB of published files, over its {BUDGET_MB} MB budget"
    said = re.search(r"results/ holds (\d+) MB", (RESULTS / "README.md").read_text())
    assert said and abs(int(said.group(1)) - size) <= 1, f"results/README.md should say {size:.0f} MB"
