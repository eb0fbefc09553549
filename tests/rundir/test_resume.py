"""Long runs survive interruption: a run stopped by Ctrl-C, SIGTERM (SLURM's preemption notice) or SIGKILL resumes
from the same command and ends bitwise equal to an uninterrupted run, for every task; last.ckpt holds the final step."""

import os
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, TINY_RUNS
from support.resume import STEPS, assert_same_state, checkpoint, fit, interrupt_at

from primacy.cli import main

TASKS = list(TINY_RUNS)


@pytest.fixture(scope="module", params=TASKS)
def straight(request, tmp_path_factory):
    """An uninterrupted run of each task."""
    run = tmp_path_factory.mktemp("straight") / request.param
    fit(request.param, run)
    return request.param, checkpoint(run)


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_a_signalled_run_stops_with_a_checkpoint_and_the_same_command_resumes_it(straight, signum, code, tmp_path,
                                                                                 caplog):
    task, expected = straight
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as stopped:
        fit(task, run, *interrupt_at(3, signum))
    assert stopped.value.code == code
    assert checkpoint(run)["global_step"] == 3, "the step in progress finished and was saved"
    fit(task, run)  # the same command, without the interruption
    assert "Resuming the unfinished run" in caplog.text
    assert_same_state(checkpoint(run), expected)
    # its config.yaml is the run's from the start: a copy without checkpoints (results/) trains again from it
    assert "ckpt_path: null" in (run / "config.yaml").read_text().splitlines()


def test_sigterm_during_validation_finishes_it_and_the_next_step_then_saves(straight, tmp_path):
    """Lightning's own SIGTERM handling would abandon the validation without a checkpoint."""
    task, expected = straight
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as stopped:
        fit(task, run, *interrupt_at(4, signal.SIGTERM, during_validation=True))  # validation every 4 steps
    assert stopped.value.code == 143
    assert checkpoint(run)["global_step"] == 5
    fit(task, run)
    assert_same_state(checkpoint(run), expected)


def killed_run(args: list[str]) -> int:
    """The return code of `primacy <args>` in a process of its own, negative for a signal as subprocess's: forked from
    this one when it runs torch on one thread (as pytest-xdist's workers do; 7 s of imports saved), else a new Python
    (a process forked from several OpenMP threads can hang in them)."""
    if torch.get_num_threads() > 1:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
        done = subprocess.run([sys.executable, "-m", "primacy", *args], env=env, capture_output=True, timeout=300)
        return done.returncode
    pid = os.fork()
    if pid == 0:  # the child: ends by its signal, or by os._exit, never back into pytest
        code = 1
        try:
            main(args)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def test_a_killed_run_resumes_from_its_last_periodic_checkpoint(straight, tmp_path):
    task, expected = straight
    run = tmp_path / "run"
    args = ["fit", *TINY_RUNS[task], "--trainer.default_root_dir", str(run), "--trainer.max_steps", str(STEPS),
            "--test_after_fit", "false", "--checkpoint.every_n_train_steps", "2", *interrupt_at(5, signal.SIGKILL)]
    assert killed_run(args) == -signal.SIGKILL
    assert checkpoint(run)["global_step"] == 4
    fit(task, run)
    assert_same_state(checkpoint(run), expected)


def test_last_checkpoint_holds_the_final_step_between_periodic_saves(tmp_path):
    run = tmp_path / "run"
    main(["fit", *TINY_RUNS["verification"], "--trainer.default_root_dir", str(run), "--trainer.max_steps", "10",
          "--checkpoint.every_n_train_steps", "4", "--test_after_fit", "false"])
    assert checkpoint(run)["global_step"] == 10


def test_a_run_is_resumed_only_to_the_budget_it_started_with(tmp_path, capsys):
    """Its learning rate decays to 0 at the max_steps it started with: resumed to another, it would be neither run."""
    run = tmp_path / "run"
    with pytest.raises(SystemExit):
        fit("verification", run, *interrupt_at(3, signal.SIGTERM))
    before = (run / "checkpoints" / "last.ckpt").read_bytes()
    for steps in ("12", "2"):
        with pytest.raises(SystemExit) as refused:
            fit("verification", run, "--trainer.max_steps", steps)
        assert refused.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert f"trainer.max_steps={steps} is not the budget of the run" in err[-1]
        assert "(8, its config.yaml)" in err[-1]
        assert "Traceback" not in "".join(err)
    assert (run / "checkpoints" / "last.ckpt").read_bytes() == before
    fit("verification", run)
    assert checkpoint(run)["global_step"] == STEPS


def test_a_finished_run_is_refused_and_left_as_it_was(straight, tmp_path, capsys):
    task, _ = straight
    run = tmp_path / "run"
    fit(task, run)
    before = (run / "checkpoints" / "last.ckpt").read_bytes()
    with pytest.raises(SystemExit) as refused:
        fit(task, run)
    assert refused.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "already holds a finished run (step 8 of max_steps=8)" in err[-1] and "Traceback" not in "".join(err)
    assert (run / "checkpoints" / "last.ckpt").read_bytes() == before


def test_a_run_written_before_periodic_checkpoints_still_tests(straight, tmp_path):
    """config.yaml of runs made before this checkpointing had checkpoint.save_last and no every_n_minutes or plugins."""
    import yaml

    task, _ = straight
    run = tmp_path / "run"
    fit(task, run)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["checkpoint"] = {"dirpath": None, "save_last": True, "every_n_train_steps": None, "save_top_k": 0}
    del config["trainer"]["plugins"]
    (run / "old.yaml").write_text(yaml.safe_dump(config))
    main(["test", "--config", str(run / "old.yaml"), "--ckpt_path", str(run / "checkpoints" / "last.ckpt")])
    assert (run / "results" / "summary.json").is_file()


def test_a_run_directory_moved_before_resuming_resumes_into_its_own_last_checkpoint(tmp_path):
    """Runs are copied off scratch disks and resumed elsewhere: the resumed steps go to the moved last.ckpt (Lightning
    alone would write last-v1.ckpt and leave last.ckpt at the step it resumed from), numbered checkpoints as in a run
    resumed where it stopped."""
    numbered = ("--checkpoint.save_top_k", "-1", "--checkpoint.every_n_train_steps", "2")
    runs = {name: tmp_path / name / "run" for name in ("in_place", "scratch", "home", "straight")}
    fit("verification", runs["straight"], *numbered)
    for run in (runs["in_place"], runs["scratch"]):
        with pytest.raises(SystemExit):
            fit("verification", run, *numbered, *interrupt_at(3, signal.SIGINT))
    runs["home"].parent.mkdir()
    shutil.move(runs["scratch"], runs["home"])
    for run in (runs["in_place"], runs["home"]):
        fit("verification", run, *numbered)
        assert_same_state(checkpoint(run), checkpoint(runs["straight"]))
    listing = {name: sorted(p.name for p in (runs[name] / "checkpoints").iterdir()) for name in ("in_place", "home")}
    assert listing["home"] == listing["in_place"] and "last.ckpt" in listing["home"]
