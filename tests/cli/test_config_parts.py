"""Every run config in configs/ resolves (``primacy fit --config FILE --print_config``) to the text saved under
tests/data/resolved_configs/: rewriting a config over shared parts must not change a single resolved setting.

The saved texts are the resolved configs of commit c722d6a, before any config was rewritten. A config added later gets
its saved text by ``python tests/cli/test_config_parts.py configs/NEW.yaml``; a change meant to alter resolved configs
(a new constructor parameter, a Lightning upgrade) rewrites them all by ``python tests/cli/test_config_parts.py``, and
the diff of tests/data/resolved_configs/ shows what changed. The runs a figure composes from parts (``COMPOSED``: the
recall-like-people grid, once 36 whole files configs/cpu/recall-like-people-*.yaml) are checked against the saved
forms of the files they replaced, with the one setting ``primacy reproduce`` adds, the run's folder."""

import contextlib
import difflib
import io
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
RESOLVED = ROOT / "tests" / "data" / "resolved_configs"
PARTS = CONFIGS / "parts"  # pieces of runs, not runs


def run_configs() -> list[str]:
    """Every run config, relative to configs/; not the atlas files (tables of rows over configs/atlas/tasks/)."""
    return sorted(p.relative_to(CONFIGS).as_posix() for p in CONFIGS.rglob("*.yaml")
                  if p.parent != CONFIGS / "atlas" and PARTS not in p.parents)


def resolve(config: str, *more: str) -> str:
    """What ``primacy fit --config configs/CONFIG [MORE] --print_config`` prints, less its first line (Lightning's
    version)."""
    from primacy.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as ended:
        main(["fit", "--config", str(CONFIGS / config), *more, "--print_config"])
    assert ended.value.code in (0, None), f"{config} {' '.join(more)}: --print_config failed"
    header, _, text = out.getvalue().partition("\n")
    assert header.startswith("# lightning"), header
    return text


def saved(config: str) -> Path:
    return RESOLVED / config


def composed() -> dict[str, tuple[str, ...]]:
    """The runs a figure composes from parts, by the name of their saved form (cpu/NAME.yaml): their files under
    configs/, in order."""
    from primacy.workflows.paper import phenomena

    return {f"cpu/{name}.yaml": parts for name, parts in phenomena.cells().items()}


COMPOSED = composed()


def resolve_now(config: str) -> str:
    """How a run config, or a run composed from parts, resolves today; a composed run in the folder its saved form
    names (the whole file's default_root_dir, runs/cpu/NAME), as ``primacy reproduce`` gives each run its folder."""
    if config not in COMPOSED:
        return resolve(config)
    first, *more = COMPOSED[config]
    folder = f"runs/{Path(config).with_suffix('').as_posix()}"
    return resolve(first, *(arg for part in more for arg in ("--config", str(CONFIGS / part))),
                   "--trainer.default_root_dir", folder)


# Resolving a config takes 0.4-0.95 s in-process on 2 cores busy with training runs (the first test also pays the
# imports), all 90 took 67 s: the default run resolves one config of each folder (3 s; the parts' tests below, 6 s);
# `-m slow` resolves them all.
SAMPLE = ["quickstart.yaml", "cpu/fig3a-s4-legs-L32.yaml", "paper/fig3a-s4-legs-L128.yaml",
          "atlas/tasks/verification-cpu.yaml"]
# Two composed cells: the LSTM's span for its condition and the reward part's budget over the backbone's; a
# Transformer's own budget and validation interval (`-m slow -k recall` resolves the 36).
SAMPLE_COMPOSED = ["cpu/recall-like-people-lstm-reward-continual-L24.yaml",
                   "cpu/recall-like-people-transformer-agnostic-delayed-L24.yaml"]


def check_unchanged(config: str) -> None:
    expected = saved(config)
    assert expected.is_file(), (f"configs/{config} has no saved resolved form: write it with "
                                f"python tests/cli/test_config_parts.py configs/{config}")
    got, want = resolve_now(config), expected.read_text()
    diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), str(expected), config))
    assert got == want, f"configs/{config} resolves differently than it did:\n{diff}"


def test_every_saved_form_has_its_config():
    """A config renamed or removed leaves no stale saved form (and the samples name existing configs); a composed run
    is no whole file too."""
    configs = set(run_configs())
    assert {p.relative_to(RESOLVED).as_posix() for p in RESOLVED.rglob("*.yaml")} <= configs | set(COMPOSED)
    assert set(SAMPLE) <= configs and set(SAMPLE_COMPOSED) <= set(COMPOSED) and not configs & set(COMPOSED)


@pytest.mark.parametrize("config", SAMPLE + SAMPLE_COMPOSED)
def test_config_resolves_as_saved(config):
    check_unchanged(config)


@pytest.mark.slow
@pytest.mark.parametrize("config", sorted(set(run_configs()) - set(SAMPLE)))
def test_every_config_resolves_as_saved(config):
    check_unchanged(config)


@pytest.mark.slow
@pytest.mark.parametrize("config", sorted(set(COMPOSED) - set(SAMPLE_COMPOSED)))
def test_every_composed_run_resolves_as_its_saved_form(config):
    check_unchanged(config)


def test_the_grids_runs_are_given_the_composed_configs(tmp_path):
    """``primacy reproduce recall-like-people`` hands each run the parts checked here, in this order, and its folder."""
    from primacy.workflows.paper.pages import FIGURES
    from primacy.workflows.paper.reproduce import plan

    runs, _ = plan(FIGURES["recall-like-people"], "cpu", 1, tmp_path, [], lambda args: args)
    assert len(runs) == 35  # the 36 cells but the one left out
    for run in runs:
        args = run.fit_args()
        files = [args[i + 1] for i, arg in enumerate(args) if arg == "--config"]
        assert files == [str(CONFIGS / part) for part in COMPOSED[f"cpu/{run.panel}.yaml"]], run.panel
        assert args[args.index("--trainer.default_root_dir") + 1] == str(tmp_path / run.panel / "seed0")


def test_a_missing_part_is_refused_in_one_line(tmp_path):
    from primacy.errors import UsageError
    from primacy.workflows.paper.reproduce import plan
    from primacy.workflows.paper.spec import FigureSpec, Panel

    panel = Panel("A", "a", ("a-run", ""), parts=(("parts/trainer/cpu.yaml", "parts/task/none.yaml"), ()))
    with pytest.raises(UsageError, match=r"^figure=f: the config parts \S+/configs/parts/task/none.yaml of panel A are "
                       "missing$"):
        plan(FigureSpec("f", "F", (panel,), "aggregates"), "cpu", 1, tmp_path, [], lambda args: args)


def parts(*names: str) -> list[str]:
    """``--config configs/parts/NAME.yaml`` for each name, after the first."""
    return [arg for name in names for arg in ("--config", str(PARTS / f"{name}.yaml"))]


def test_parts_compose_the_atlas_task_configs():
    """The CPU trainer, the L = 32 task and the S4D part are the atlas's CPU verification config, to the last resolved
    setting; at the paper's scale, with the width part, they are its paper config as the atlas widens it."""
    cpu = resolve("parts/trainer/cpu.yaml", *parts("task/verification-L32", "backbone/s4d"))
    assert cpu == saved("atlas/tasks/verification-cpu.yaml").read_text()
    paper = resolve("parts/trainer/paper.yaml", *parts("task/verification-L128", "backbone/s4d", "scale/paper-width"))
    widened = ["--model.init_args.backbone.init_args.d_model", "256"]  # the atlas file's args at the paper scale
    assert paper == resolve("atlas/tasks/verification-paper.yaml", *widened)


def test_the_documented_command_composes_a_run():
    """README's command (the parts of a trainer, a task and a backbone) gives the run it describes."""
    import yaml

    readme = (ROOT / "README.md").read_text()
    start = readme.index("primacy fit --config configs/parts/")
    command = readme[start:readme.index("\n```", start)].replace("\\\n", " ").split()
    config, *more = command[3:]
    resolved = yaml.safe_load(resolve(Path(config).relative_to("configs").as_posix(), *more))
    assert resolved["model"]["init_args"]["backbone"]["class_path"].endswith(".MambaBackbone")
    assert resolved["data"]["init_args"]["n_items"] == 32 and resolved["trainer"]["max_steps"] == 6000
    assert resolved["trainer"]["default_root_dir"] == "runs/verification-mamba"


@pytest.mark.parametrize("backbone", sorted(p.stem for p in (PARTS / "backbone").glob("*.yaml")))
def test_every_backbone_part_composes_with_every_task_part(backbone):
    for task in sorted(p.stem for p in (PARTS / "task").glob("*.yaml")):
        resolve("parts/trainer/cpu.yaml", *parts(f"task/{task}", f"backbone/{backbone}"))


def write(configs: list[str]) -> None:
    for config in configs:
        path = saved(config)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(resolve_now(config))
        print(path.relative_to(ROOT))


if __name__ == "__main__":
    given = [Path(arg).resolve().relative_to(CONFIGS).as_posix() for arg in sys.argv[1:]]
    write(given or [*run_configs(), *COMPOSED])
