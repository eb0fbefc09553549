"""Helpers that several test modules share, one module per topic (imported as ``from support.x import y``: pytest puts
tests/ on the path, pyproject's pythonpath, for the tests in every folder, as for tests/signals.py and
tests/slurm_cluster.py). A test module imports no other test module.

- ``accuracy_results``: results directories of the accuracy tasks as a run's test writes them, without training.
- ``cli``: a command run as a user runs it, its one-line refusals, and a directory's files to check nothing changed.
- ``configs``: ``primacy fit`` built without training (``BuildOnly``) and the smallest evaluation of each task.
- ``distributed``: primacy commands on several gloo processes (DDP on CPU).
- ``free_recall_results``: free-recall results directories as a run's test writes them, without training.
- ``people``: a user's free-recall file in psifr's long format, written from random lists (conftest.py's
  ``three_people`` fixture writes one).
- ``pretrained``: tiny Hugging Face models and a word-level tokenizer, saved as a user's pretrained model.
- ``resume``: tiny runs interrupted by a signal, their checkpoints, and the bitwise comparison of resumed runs.
"""
