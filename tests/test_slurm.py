"""`--launcher slurm` on a real one-node SLURM cluster (tests/slurm_cluster.py): a preempted run (``scontrol requeue``)
and a cancelled one (``scancel --signal=TERM``) each stop with a checkpoint at the signal and without a traceback while
wandb's service dies beside them, resume from that checkpoint (by SLURM's requeue, or by the same command again) and
end bitwise equal to an uninterrupted run, with ``--status`` right at each stage. Where the cluster cannot run (not
root, no apt), the tests skip and say why; the refusals of options SLURM would reject need no cluster."""

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import torch
from conftest import extra_module, fake_slurm
from slurm_cluster import Cluster, Unavailable

from primacy.cli import main
from primacy.workflows import launchers

PACE = json.dumps([{"class_path": "primacy.testing.runs.Pace", "init_args": {"seconds": 0.1}}])
# fig3's panel B cut small, logging to wandb (offline: tests/conftest.py), slowed to 10 steps a second at most so that
# the test signals it while it trains, with a progress line every 5 steps
RUN = ["--trainer.enable_model_summary", "false", "--data.init_args.n_items", "8", "--data.init_args.vocab_size", "64",
       "--data.init_args.batch_size", "8", "--data.init_args.num_test_sets", "4", "--data.init_args.num_val_sets", "2",
       "--results.formats", "[png]", "--model.init_args.backbone.init_args.d_model", "16",
       "--trainer.val_check_interval", "5", "--model.init_args.warmup_steps", "2", "--trainer.max_steps", "300",
       "--trainer.callbacks", PACE]
SLURM = ["--launcher", "slurm", "--slurm.gpus_per_task", "0", "--slurm.cpus_per_task", "1", "--slurm.time", "20"]


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """A one-node cluster for this module's tests, its daemons stopped (by their PID files) afterwards."""
    extra_module("submitit")
    cluster = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except Unavailable as reason:
        pytest.skip(f"no one-node SLURM cluster here: {reason}")
    with pytest.MonkeyPatch.context() as patch:
        for key, value in cluster.env().items():
            patch.setenv(key, value)
        try:
            yield cluster
        finally:
            subprocess.run(["scancel", "--full", "--user", "root"], capture_output=True)
            cluster.stop()


def _status(command: list[str], capsys) -> dict[str, str]:
    capsys.readouterr()
    main([*command, "--status"])
    lines = capsys.readouterr().out.splitlines()[:-1]
    return {line.split()[0]: " ".join(line.split()[1:]) for line in lines}


def _wait_for(condition, what: str, seconds: float) -> None:
    deadline = time.time() + seconds
    while not condition():
        if time.time() > deadline:
            raise AssertionError(f"{what}: not within {seconds:.0f} s")
        time.sleep(1)


def _steps_logged(run: Path) -> int:
    text = "".join(log.read_text(errors="replace") for log in (run / "logs").glob("*.log"))
    return max((int(n) for n in re.findall(r"step (\d+)/300", text)), default=0)


def _stopped_at(run: Path) -> list[int]:
    text = "".join(log.read_text(errors="replace") for log in sorted((run / "logs").glob("*.log")))
    return [int(n) for n in re.findall(r"Stopped at step (\d+) of 300", text)]


@pytest.mark.slow  # about 8 minutes: SLURM holds a requeued job for 2 minutes before it starts it again
def test_preempted_and_cancelled_runs_resume_from_their_signal_bitwise(tmp_path, slurm_cluster, capsys):
    out = tmp_path / "fig3"
    command = ["reproduce", "fig3", "--seeds", "2", "--panels", "B", "--out", str(out), *SLURM, *RUN]
    main(command)
    runs = sorted(out.glob("*/seed*"))
    preempted, cancelled = runs
    jobs = {run: launchers.read_state(run)["job"] for run in runs}
    _wait_for(lambda: all(_steps_logged(run) >= 10 for run in runs), "both runs training", 300)

    subprocess.run(["scontrol", "requeue", jobs[preempted]], check=True)
    subprocess.run(["scancel", "--signal=TERM", jobs[cancelled]], check=True)
    _wait_for(lambda: all(_stopped_at(run) for run in runs), "both runs stopped with a checkpoint", 120)
    _wait_for(lambda: all(launchers.read_state(run).get("state") == "exited" for run in runs), "their state", 60)
    for run in runs:
        state = launchers.read_state(run)
        assert (state["exit_code"], state["outcome"]) == (143, "preempted"), state
    status = _status(command, capsys)
    assert status[f"{preempted.parent.name}/seed0"].startswith("queued"), status
    assert status[f"{cancelled.parent.name}/seed1"].startswith("stopped"), status

    main(command)  # submits the cancelled run again; the preempted one is SLURM's to start
    assert launchers.read_state(cancelled)["job"] != jobs[cancelled]
    _wait_for(lambda: all(launchers.read_state(run).get("outcome") == "done" for run in runs), "both runs done", 600)
    assert set(_status(command, capsys).values()) == {"done step 300"}

    for run in runs:
        logs = sorted((run / "logs").glob("*.log"))
        texts = [log.read_text(errors="replace") for log in logs]
        assert len(logs) == 2, logs
        assert not any("Traceback" in text for text in texts), texts
        stopped = _stopped_at(run)[0]
        assert f"from step {stopped}" in texts[1], texts[1][-2000:]
    for log in (out / "submitit").rglob("*.err"):
        assert "Traceback" not in log.read_text(errors="replace"), log

    reference = tmp_path / "reference"
    config = sorted(out.glob("*/seed0/config.yaml"))[0]
    main(["fit", "--config", str(config), "--trainer.default_root_dir", str(reference), "--trainer.logger", "false",
          "--test_after_fit", "false"])
    expected = torch.load(reference / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    got = torch.load(preempted / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[key], got[key]) for key in expected)


@pytest.mark.slow  # the cluster's own answer; test_options_slurm_rejects_... check the same without a cluster
@pytest.mark.parametrize("option,value,message", [
    ("--slurm.partition", "nope", "SLURM refuses slurm.partition=nope (invalid partition specified: nope"),
    ("--slurm.cpus_per_task", "999", "SLURM refuses slurm.cpus_per_task=999"),
])
def test_the_cluster_refuses_options_before_anything_is_submitted(tmp_path, slurm_cluster, capsys, option, value,
                                                                  message):
    _refused(tmp_path, capsys, [*SLURM[:-4], option, value], message)


def test_a_time_limit_without_room_to_train_is_refused(tmp_path, capsys):
    _refused(tmp_path, capsys, [*SLURM[:-1], "2"],
             "slurm.time=2 is too short: submitit asks SLURM to signal a task 90 s before its limit, SLURM may signal "
             "up to 60 s earlier, and a run needs 30 s to start and train: give at least 3 (minutes)")


def test_options_slurm_rejects_are_refused_naming_the_option(tmp_path, monkeypatch, capsys):
    """sbatch --test-only's refusal (its words on the one-node cluster) names the option, before any submission."""
    extra_module("submitit")
    tools, _ = fake_slurm(tmp_path, monkeypatch, 1)
    (tools / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: invalid partition specified: gpu' >&2\n"
                                  "echo 'allocation failure: Invalid partition name specified' >&2\nexit 1\n")
    _refused(tmp_path, capsys, [*SLURM, "--slurm.partition", "gpu"],
             "SLURM refuses slurm.partition=gpu (invalid partition specified: gpu allocation failure: Invalid "
             "partition name specified): choose what `sinfo` lists for the partition, or leave the option out")


def _refused(tmp_path: Path, capsys, options: list[str], message: str) -> None:
    out = tmp_path / "fig3"
    with pytest.raises(SystemExit) as stop:
        main(["reproduce", "fig3", "--seeds", "1", "--panels", "B", "--out", str(out), *options])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]
    assert not out.exists()
