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

STEPS = 60
PACE = json.dumps([{"class_path": "primacy.testing.runs.Pace", "init_args": {"seconds": 0.2}}])
# fig3's panel B cut small, logging to wandb (offline: tests/conftest.py), slowed to 5 steps a second at most so that
# the test signals it while it trains, with a progress line every 10 steps
RUN = ["--trainer.enable_model_summary", "false", "--data.init_args.n_items", "8", "--data.init_args.vocab_size", "64",
       "--data.init_args.batch_size", "8", "--data.init_args.num_test_sets", "4", "--data.init_args.num_val_sets", "2",
       "--results.formats", "[png]", "--model.init_args.backbone.init_args.d_model", "16",
       "--trainer.val_check_interval", "10", "--model.init_args.warmup_steps", "2", "--trainer.max_steps", str(STEPS),
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
    return max((int(n) for n in re.findall(rf"step (\d+)/{STEPS}", text)), default=0)


def _stopped_at(run: Path) -> list[int]:
    text = "".join(log.read_text(errors="replace") for log in sorted((run / "logs").glob("*.log")))
    return [int(n) for n in re.findall(rf"Stopped at step (\d+) of {STEPS}", text)]


@pytest.mark.slow  # about 5 minutes: SLURM holds a requeued job for 2 minutes before it starts it again
def test_preempted_and_cancelled_runs_resume_from_their_signal_bitwise(tmp_path, slurm_cluster, capsys):
    out = tmp_path / "fig3"
    command = ["reproduce", "fig3", "--seeds", "2", "--panels", "B", "--out", str(out), *SLURM, *RUN]
    main(command)
    runs = sorted(out.glob("*/seed*"))
    preempted, cancelled = runs
    jobs = {run: launchers.read_state(run)["job"] for run in runs}
    _wait_for(lambda: _steps_logged(preempted) >= 10, "the first run training", 300)
    subprocess.run(["scontrol", "requeue", jobs[preempted]], check=True)  # as a preempting scheduler does
    _wait_for(lambda: _steps_logged(cancelled) >= 10, "the second run training", 300)
    subprocess.run(["scancel", "--signal=TERM", jobs[cancelled]], check=True)
    _wait_for(lambda: all(_stopped_at(run) for run in runs), "both runs stopped with a checkpoint", 120)
    _wait_for(lambda: all(launchers.read_state(run).get("state") == "exited" for run in runs), "their state", 60)
    for run in runs:
        state = launchers.read_state(run)
        assert (state["exit_code"], state["outcome"]) == (143, "preempted"), state
    # while SLURM ends the jobs (COMPLETING, up to KillWait) a preempted run shows as stopped; then as queued again
    label = {run: f"{run.parent.name}/{run.name}" for run in runs}
    _wait_for(lambda: _status(command, capsys)[label[preempted]].startswith("queued"), "the status: queued", 60)
    assert _status(command, capsys)[label[cancelled]].startswith("stopped at step")

    main(command)  # submits the cancelled run again; the preempted one is SLURM's to start
    assert launchers.read_state(cancelled)["job"] != jobs[cancelled]
    _wait_for(lambda: all(launchers.read_state(run).get("outcome") == "done" for run in runs), "both runs done", 600)
    assert set(_status(command, capsys).values()) == {f"done step {STEPS}"}

    for run in runs:
        logs = sorted((run / "logs").glob("*.log"))
        texts = [log.read_text(errors="replace") for log in logs]
        assert len(logs) == 2, logs
        assert not any("Traceback" in text for text in texts), texts
        stopped = _stopped_at(run)[0]
        assert f"from step {stopped}" in texts[1], texts[1][-2000:]
        launches = sorted((run / "wandb").glob("offline-run-*"))  # each launch's, named by the wandb run's id
        assert len(launches) == 2 and len({launch.name.rsplit("-", 1)[1] for launch in launches}) == 1, launches
    for log in (out / "submitit").rglob("*.err"):
        assert "Traceback" not in log.read_text(errors="replace"), log

    for run in runs:  # each against the same run trained without a break, here
        reference = tmp_path / "reference" / run.name
        main(["fit", "--config", str(run / "config.yaml"), "--trainer.default_root_dir", str(reference),
              "--trainer.logger", "false", "--trainer.callbacks", "[]", "--test_after_fit", "false"])
        expected = torch.load(reference / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        got = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        assert expected.keys() == got.keys()
        assert all(torch.equal(expected[key], got[key]) for key in expected), run


@pytest.mark.slow  # 8-15 minutes: 4-minute limits, SLURM's 2-minute hold before each new start
def test_a_run_at_its_time_limit_resumes_from_the_checkpoint_of_submitits_signal_bitwise(tmp_path, slurm_cluster,
                                                                                        capsys):
    """--slurm.time 4: submitit's signal comes 90 s (or up to 60 s more) before the limit. At 2 steps a second at
    most, 500 steps take longer than the whole limit, so the first start is signalled whatever the machine's speed;
    every start trains from where the last one's signal stopped it (none is wasted at the step it began with) until a
    start ends the run. 80 steps (the test before) ended before the signal on an idle machine."""
    steps, slow = "500", json.dumps([{"class_path": "primacy.testing.runs.Pace", "init_args": {"seconds": 0.5}}])
    out = tmp_path / "fig3"
    run_args = [*RUN[:RUN.index("--trainer.max_steps")], "--trainer.max_steps", steps, "--trainer.callbacks", slow]
    command = ["reproduce", "fig3", "--seeds", "1", "--panels", "B", "--out", str(out), *SLURM[:-1], "4", *run_args]
    main(command)
    run = next(out.glob("*/seed0"))
    _wait_for(lambda: launchers.read_state(run).get("requeued"), "submitit's signal before the limit", 600)
    assert launchers.read_state(run)["outcome"] == "preempted"
    label = f"{run.parent.name}/{run.name}"
    _wait_for(lambda: _status(command, capsys)[label].startswith("queued"), "the status: queued", 60)
    _wait_for(lambda: not subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip(),
              "the requeued run", 1500)
    assert _status(command, capsys)[label] == f"done step {steps}"
    texts = [log.read_text(errors="replace") for log in sorted((run / "logs").glob("*.log"))]  # no wasted requeue
    assert len(texts) >= 2 and not any("Traceback" in text for text in texts), texts
    stopped = [0]
    for before, after in zip(texts, texts[1:]):  # each start stopped later than the one before, and the next resumed
        [step] = [int(n) for n in re.findall(rf"Stopped at step (\d+) of {steps}", before)] or [None]
        assert step is not None and step > stopped[-1] and f"from step {step}" in after, after[-2000:]
        stopped.append(step)
    assert "Job has timed out" in "".join(log.read_text() for log in (out / "submitit").rglob("*.out"))
    reference = tmp_path / "reference"
    main(["fit", "--config", str(run / "config.yaml"), "--trainer.default_root_dir", str(reference),
          "--trainer.logger", "false", "--trainer.callbacks", "[]", "--test_after_fit", "false"])
    expected = torch.load(reference / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    got = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert all(torch.equal(expected[key], got[key]) for key in expected)


def _until_drawn(command: list[str], done: Path, seconds: float) -> None:
    """Runs ``command`` again each time SLURM's queue has emptied (each step of a search is one array job) until it
    has written ``done``."""
    deadline = time.time() + seconds
    while not done.is_file():
        assert time.time() < deadline, f"{done} not written within {seconds:.0f} s"
        try:
            main(command)
        except SystemExit as stop:
            assert stop.code in (0, 1, None), stop.code  # 1: some runs are not done yet
        _wait_for(lambda: not subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip(),
                  "the array job", seconds)


@pytest.mark.slow  # about 5 minutes: a search's steps are array jobs one after another, and the requeue's hold
def test_an_atlas_on_slurm_resumes_its_preempted_pilot_and_draws(tmp_path, slurm_cluster, capsys):
    import yaml

    from primacy.testing import tiny_settings

    task = {"seed_everything": 0,
            "trainer": {"max_steps": STEPS, "val_check_interval": 10, "check_val_every_n_epoch": None,
                        "accelerator": "cpu", "devices": 1, "enable_model_summary": False, "num_sanity_val_steps": 0,
                        "callbacks": json.loads(PACE)},
            "model": {"class_path": "primacy.models.lists.SequenceModel",
                      "init_args": {"warmup_steps": 2, "backbone": "S4DBackbone"}},
            "data": {"class_path": "VerificationTask", "init_args": tiny_settings("VerificationTask")}}
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(task))
    row = {"label": "S4D", "backbone": {"class_path": "S4DBackbone", "init_args": {"d_model": 8, "d_state": 4}},
           "knob": "data.init_args.n_items", "values": [4]}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({"title": "Tiny", "band": [0.0, 1.0], "config": "task", "rows": [row]}))
    out = tmp_path / "out"
    command = ["atlas", str(path), "--seeds", "1", "--out", str(out), *SLURM, "--results.formats", "[]"]
    main(command)
    pilot = out / "S4D" / "n_items=4" / "seed0"
    _wait_for(lambda: _steps_logged(pilot) >= 10, "the pilot training", 300)
    job = launchers.read_state(pilot)["job"]
    subprocess.run(["scontrol", "requeue", job], check=True)
    _wait_for(lambda: launchers.read_state(pilot).get("outcome") == "preempted", "the pilot stopped", 120)
    def status() -> str:
        capsys.readouterr()
        main([*command, "--status"])
        return capsys.readouterr().out
    _wait_for(lambda: "1 queued" in status(), "the status: queued", 60)

    _until_drawn(command, out / "atlas.md", 900)
    launches = [log for log in out.rglob("logs/*.log") if (log.parent / "state.json").is_file()]  # not wandb's
    texts = [log.read_text(errors="replace") for log in sorted(launches)]
    assert not any("Traceback" in text for text in texts)
    stopped = _stopped_at(pilot)[0]
    assert any(f"from step {stopped}" in text for text in texts)


FITTED = re.compile(r"^  (\w+): log-likelihood", re.MULTILINE)  # cmr_fit's line as each participant's fit ends


@pytest.mark.slow  # about 5 minutes: SLURM's 2-minute hold before the requeued job starts again
def test_humans_fit_on_slurm_resumes_a_preempted_job_with_the_participants_not_yet_fitted(tmp_path, slurm_cluster,
                                                                                          capsys):
    """One job fits 8 people (a few seconds each); preempted after its first, it stops without a traceback, the
    requeued job fits only those without a file (the one in progress again), and every fit equals an unbroken one."""
    from support.people import lists, write

    from primacy.analysis.behaviour.free_recall import long_format_rows

    names = ["ann", "bo", "cy", "di", "ed", "fay", "gus", "hal"]
    data = tmp_path / "people.csv"
    write(data, [row for seed, name in enumerate(names)
                 for row in long_format_rows(*lists(seed, n_lists=30, n_items=8), name)])
    out = tmp_path / "out"
    command = ["humans", "--data", str(data), "--out", str(out), "--fit", *SLURM]
    main(command)
    people = out / "fits" / "people"
    job = people / "jobs" / "0"
    _wait_for(lambda: (people / "ann.json").is_file(), "the first participant fitted", 300)
    subprocess.run(["scontrol", "requeue", launchers.read_state(job)["job"]], check=True)
    _wait_for(lambda: launchers.read_state(job).get("outcome") == "preempted", "the job stopped", 120)
    _wait_for(lambda: _status(command, capsys)["fits/people/0"].startswith("queued"), "the status: queued", 60)

    _until_drawn(command, out / "fits.csv", 900)
    texts = [log.read_text(errors="replace") for log in sorted((job / "logs").glob("*.log"))]
    assert len(texts) == 2 and not any("Traceback" in text for text in texts), texts
    assert "primacy cmr_fit: stopped" in texts[0]
    first, second = (FITTED.findall(text) for text in texts)
    assert first and not set(first) & set(second) and sorted(first + second) == sorted(names), (first, second)
    assert launchers.read_state(job)["outcome"] == "done"
    for log in (out / "fits" / "submitit").rglob("*.err"):
        assert "Traceback" not in log.read_text(errors="replace"), log

    reference = tmp_path / "reference"  # the same fits here, without a break
    main(["cmr_fit", "--data", str(data), "--out", str(reference)])
    for name in names:
        got, expected = (json.loads((folder / f"{name}.json").read_text()) for folder in (people, reference))
        got["fit"].pop("seconds"), expected["fit"].pop("seconds")  # the fit's wall time
        assert got == expected, name


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
