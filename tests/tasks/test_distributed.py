"""Data parallelism divides the work and metrics are exact on any number of processes (DDP with gloo on CPU).

The contract: N processes at a per-process batch B / N see exactly the training data of one process at batch B,
split without overlap, and every evaluation trial is scored exactly once however many processes share the test.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY_RUNS
from support.distributed import ddp, ddp_commands

from primacy.cli import main
from primacy.tasks.base import EvalShard, TrainingStream
from primacy.tasks.induction import InductionTask
from primacy.tasks.verification import VerificationTask

TASKS = {"verification": lambda: VerificationTask(n_items=4, vocab_size=32, batch_size=6, num_held_out=12,
                                                  num_test_sets=5, num_val_sets=2),
         "induction": lambda: InductionTask(vocab_size=32, length=16, min_period=2, prompt_items=5, batch_size=6)}


@pytest.mark.parametrize("task", TASKS)
def test_processes_split_each_training_batch_without_overlap(task):
    make = TASKS[task]().stream_batch
    single = next(iter(TrainingStream(make, batch_size=6)))
    parts = [next(iter(TrainingStream(make, batch_size=2, rank=r, world_size=3))) for r in range(3)]
    for key, value in single.items():
        assert torch.equal(torch.cat([p[key] for p in parts]), value), key
    rows = {tuple(row.tolist()) for p in parts for row in p["tokens"]}
    assert len(rows) == 6, "each process trains on its own rows"


@pytest.mark.parametrize("n_trials,processes", [(40, 3), (11, 3), (2, 3), (64, 2)])
def test_evaluation_shards_cover_every_trial_once(n_trials, processes):
    shards = [EvalShard(lambda i: {"index": i}, n_trials, 4, rank, processes) for rank in range(processes)]
    seen = torch.cat([b["index"] for shard in shards for b in shard] or [torch.zeros(0, dtype=torch.long)])
    assert sorted(seen.tolist()) == list(range(n_trials))
    assert all(len(shard) == len(list(shard)) for shard in shards), "len is the number of batches, for progress bars"


@pytest.mark.parametrize("strategy", ["ddp_fork", pytest.param("ddp", marks=pytest.mark.slow)])
def test_two_processes_at_half_the_batch_train_like_one_at_the_whole_batch(strategy, tmp_path):
    """Under ddp_fork the processes train in forked children, so this also checks that fit reports the step they
    reached (the parent's own trainer never steps)."""
    common = [*TINY_RUNS["verification"], "--trainer.max_steps", "4", "--test_after_fit", "false",
              "--trainer.num_sanity_val_steps", "0"]
    main(["fit", *common, "--data.init_args.batch_size", "4", "--trainer.default_root_dir", str(tmp_path / "one")])
    main(["fit", *common, "--data.init_args.batch_size", "2", "--trainer.default_root_dir", str(tmp_path / "half")])
    ddp("fit", *common, "--data.init_args.batch_size", "2", "--trainer.default_root_dir", str(tmp_path / "two"),
        processes=2, strategy=strategy)
    weights = {name: torch.load(tmp_path / name / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
               for name in ("one", "half", "two")}
    gap = max((weights["two"][k] - weights["one"][k]).abs().max().item() for k in weights["one"])
    moved = max((weights["half"][k] - weights["one"][k]).abs().max().item() for k in weights["one"])
    assert gap < 1e-6, "2 x batch 2 computes the batch-4 step (up to the order of float sums)"
    assert moved > 1e-4, "a batch of 2 alone trains differently, so the comparison can tell"


def train(task: str, root) -> Path:
    run = root / task
    main(["fit", *TINY_RUNS[task], "--trainer.default_root_dir", str(run), "--trainer.max_steps", "4"])
    return run


@pytest.fixture(scope="module", params=list(TINY_RUNS))
def trained(request, tmp_path_factory):
    return request.param, train(request.param, tmp_path_factory.mktemp("trained"))


def results(out) -> tuple[dict, dict]:
    summary = json.loads((out / "results" / "summary.json").read_text())
    npz = next((path for path in (out / "results" / f"{name}.npz" for name in ("accuracy", "free_recall"))
                if path.exists()), None)
    return summary, (dict(np.load(npz)) if npz else {})


def split_test_args(task: str, run: Path, out: Path) -> list[str]:
    """`primacy test` of a trained run's last checkpoint, written to ``out``."""
    args = ["test", "--config", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints" / "last.ckpt"),
            "--trainer.default_root_dir", str(out)]
    return [*args, "--results.formats", "[png]"] if task == "free_recall" else args


def check_split_test(task: str, run: Path, out: Path) -> None:
    """The test written to ``out`` on several processes has the numbers the run's own test had on one.
    5 sets x 4 shifts x 2 variants = 40 verification trials, 11 induction prompts, 36 reconstruction and 24 recall
    trials and 5 free-recall lists (recalled by sampling, each list from its own generator), split unevenly."""
    single, single_arrays = results(run)  # written by fit's test on one process
    summary, arrays = results(out)
    for key, value in single_arrays.items():  # counts and hits: integers, exactly equal
        np.testing.assert_array_equal(arrays[key], value, err_msg=f"{task}: {key}")
    if task == "verification":
        assert arrays["counts"].sum() + arrays["distractor_counts"].sum() == 40 * 4
    elif task == "reconstruction":  # cued: 3 sets x 3 delays (0, 1, 2) x 4 shifts, 4 answers each
        assert arrays["counts"].sum() == arrays["delay_counts"].sum() == 36 * 4
    elif task == "recall":  # half: 3 sets x 4 shifts x 2 variants, 4 answers each, half about unseen keys
        assert arrays["counts"].sum() == arrays["distractor_counts"].sum() == 24 * 2
    elif task == "free_recall":  # every list's recall, in test order, and the same long-format file
        assert arrays["lists"] == 5 and arrays["recalls"].shape == (5, 4)
        assert (out / "results" / "free_recall.csv").read_text().replace(f"{out.name},", "run,") == \
            (run / "results" / "free_recall.csv").read_text().replace(f"{run.name},", "run,")
        assert summary["cmr_fit"] == single["cmr_fit"] == {"lags": [-5, -4, -3, -2, -1, 1, 2, 3, 4, 5], "paper": None,
                                                           "canonical": None}, "L = 4: no lag beyond 3, no fit"
        assert (out / "results" / "free_recall.png").is_file()  # drawn once, by rank 0
        assert set(summary["forced_accuracy"]) == {"task_order", "own_order"}  # counts of 5 lists x 5 steps: exact
        assert summary["forced_accuracy"] == single["forced_accuracy"]
    elif task == "induction":
        assert summary["repeat_tokens"] == 11 * 4 and summary["other_tokens"] == 11 * 6
    numbers = {k: v for k, v in single.items() if isinstance(v, float)}
    assert numbers and {k: summary[k] for k in numbers} == pytest.approx(numbers, rel=1e-6), task


# Every task's test on the number of processes that splits it most unevenly, in one Python (its imports paid once);
# the other case of each task (and MQAR's and selective copying's) runs with `-m slow`, one Python each.
SPLITS = {"verification": 2, "reconstruction": 2, "recall": 3, "free_recall": 2, "induction": 3}


def test_every_tasks_test_metrics_equal_the_single_process_ones(tmp_path):
    runs = {task: train(task, tmp_path / "trained") for task in SPLITS}
    ddp_commands([(split_test_args(task, runs[task], tmp_path / task), processes)
                  for task, processes in SPLITS.items()])
    for task in SPLITS:
        check_split_test(task, runs[task], tmp_path / task)


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 3])
def test_test_metrics_equal_the_single_process_ones(trained, processes, tmp_path):
    task, run = trained
    ddp(*split_test_args(task, run, tmp_path / "out"), processes=processes, strategy="ddp_fork")
    check_split_test(task, run, tmp_path / "out")
