"""`primacy fit` up to the moment training would start (``BuildOnly``, which raises ``Built`` with the model and task
it built), and the smallest evaluation of each task (``TASK_SIZES``, flags added to a config's command)."""

from primacy.cli.lightning import PrimacyCLI

HELD_OUT = ["--data.init_args.num_test_sets", "1", "--data.init_args.num_val_sets", "1"]
TASK_SIZES = {  # the smallest evaluation of each task, by class name
    "VerificationTask": HELD_OUT, "ReconstructionTask": HELD_OUT, "AssociativeRecallTask": HELD_OUT,
    "FreeRecallTask": HELD_OUT, "MQARTask": HELD_OUT, "SelectiveCopyingTask": HELD_OUT,
    "InductionTask": ["--data.init_args.num_test_prompts", "4", "--data.init_args.num_val_prompts", "4"],
}


class Built(Exception):  # noqa: N818 - carries the built objects out of the CLI
    def __init__(self, cli: PrimacyCLI) -> None:
        super().__init__()
        self.model, self.datamodule = cli.model, cli.datamodule


class BuildOnly(PrimacyCLI):
    """`primacy fit` up to the moment training would start: everything parsed, checked and built."""

    def before_fit(self) -> None:
        raise Built(self)
