import gc
import importlib
import os
from pathlib import Path

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
if "PYTEST_XDIST_WORKER_COUNT" in os.environ and "OMP_NUM_THREADS" not in os.environ:
    # pytest-xdist's workers (pyproject's -n auto) share the cores: each gets its part for torch's threads, and so do
    # the processes its tests start. With two threads each, two workers took as long as one (2 cores).
    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

ROOT = Path(__file__).resolve().parents[1]


def extra_module(module: str):
    """A module of the [test] extra (psifr, pandas, submitit), imported; a test fails, not skips, without it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        pytest.fail(f"{module} is missing ({err}): install the test extra, pip install -e \".[test]\"")


def fake_slurm(tmp_path: Path, monkeypatch, job: int) -> tuple[Path, Path]:
    """A SLURM login node's tools first on PATH: an ``sbatch`` that keeps the script submitit writes and answers job
    ``job`` (and takes any options ``--test-only``), an ``srun`` that fails. Returns the directory of the tools (add
    ``sacct`` there) and the kept script."""
    tools, script = tmp_path / "bin", tmp_path / "sbatch.sh"
    tools.mkdir()
    (tools / "sbatch").write_text(f'#!/bin/sh\n[ "$1" = --test-only ] && exit 0\ncp "$1" {script}\n'
                                  f'echo "Submitted batch job {job}"\n')
    (tools / "srun").write_text("#!/bin/sh\nexit 1\n")
    for tool in tools.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    return tools, script


def recurrent_outputs(layer, heads):
    """A matrix-memory mixer's outputs (B, H, T, V) by its recurrent form, position by position from its initial
    state: what its chunked and parallel forms are compared with."""
    import torch

    state, steps = layer._initial(heads.q.shape[0], heads.q), []
    for t in range(heads.q.shape[2]):
        o, state = layer._recur(heads.at(t), state)
        steps.append(o)
    return torch.stack(steps, dim=2)


def stream_batches(loader, n: int) -> list:
    """The first ``n`` batches of a loader of the endless training stream, its worker processes (if any) shut down
    before returning: an abandoned iterator's workers stalled, for 10 s, whichever later test the garbage collector
    happened to run in."""
    it = iter(loader)
    try:
        return [next(it) for _ in range(n)]
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)  # DataLoader's own clean-up, also run when it is collected
        if shutdown is not None:
            shutdown()


@pytest.fixture
def quiet(tmp_path):
    """CLI arguments for a fast, file-local run without a logger or progress bar."""
    return ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
            "--trainer.enable_model_summary", "false", "--trainer.default_root_dir", str(tmp_path / "run")]


@pytest.fixture
def three_people(tmp_path):
    """Three subjects' lists as rows shuffled out of order, items as words; the file and the lists."""
    from support.people import three_people_file  # torch and primacy, imported when a test asks

    return three_people_file(tmp_path)


def __getattr__(name: str):
    """QUIET and TINY_RUNS, which the tests import from here: tiny runs of each task (a few seconds), with a logger,
    progress bar and summary off (a seed, a run directory and trainer flags are added by each test). They live in
    primacy's conformance kit, which plugins use too, and come with Lightning (10 s of CPU): imported when a test
    module asks, not by pytest-xdist's controller, which loads this file but runs no test."""
    if name in ("QUIET", "TINY_RUNS"):
        import primacy.testing

        return getattr(primacy.testing, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# Tasks whose runs exercise nothing of the checkpointing machinery that the first two do not: their resume tests of
# signal handling, kills and checkpoint bookkeeping (the same RunCheckpoint code whatever the task) run with
# `-m slow`; the bitwise resume after Ctrl-C stays in the default run for every task. A kill differs from Ctrl-C only
# in which checkpoint the run resumes from (the last periodic one, written by the same callback), and costs a new
# Python process (5 s of imports) per task: only the first task's kill test is in the default run.
LATER_TASKS = ("reconstruction", "recall", "free_recall", "mqar", "selective_copying")
TASK_INDEPENDENT_RESUME_TESTS = ("test_sigterm_during_validation_finishes_it_and_the_next_step_then_saves",
                                 "test_a_killed_run_resumes_from_its_last_periodic_checkpoint",
                                 "test_a_finished_run_is_refused_and_left_as_it_was",
                                 "test_a_run_written_before_periodic_checkpoints_still_tests")


# Modules with tests of 5-35 s each (most start processes): collected first, so that pytest-xdist hands them out
# while the many short tests can still fill the other workers (last, they ran alone at the end: 20 % more time).
LONG_FIRST = ("test_reproduce.py", "test_distributed.py", "test_plugin_docs.py", "test_resume.py", "test_atlas.py",
              "test_pretrained.py", "test_icl.py", "test_cmr_fits.py")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.path.name not in LONG_FIRST)  # stable: each module's order is kept
    for item in items:
        task = getattr(getattr(item, "callspec", None), "params", {}).get("straight")
        sigterm = item.originalname.startswith("test_a_signalled_run") and item.name.endswith("-sigterm]")
        killed = item.originalname == "test_a_killed_run_resumes_from_its_last_periodic_checkpoint"
        if (task in LATER_TASKS and (sigterm or item.originalname in TASK_INDEPENDENT_RESUME_TESTS)) or (
                killed and task != "verification"):
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session):
    """What the imports and the collection made lives until the end: out of the garbage collector's sight (as in the
    `primacy` command), the full collections during the tests scan only what the tests make (7-15 % less time)."""
    gc.collect()
    gc.freeze()
