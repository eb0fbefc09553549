"""The run directory: where a run's files live and how they are written and read back.

Modules:
    checkpoints  checkpoints read safely and checked against a config
    free_recall  a free-recall run's results read back
    kinds        the kinds of result: written, read, aggregated and drawn, plugins' too
    layout       RunDir and the analyses' folders: every file name of a run
    records      numbers of result files (JSON, CSV rows, .npz arrays) by a dotted key
    results      the result files of the study x query matrix and of free recall, the Delta t history
    resume       start, resume or refuse a run directory
    runs         a finished run's model and task rebuilt, and the classes a command needs of its config
    settings     the settings stored with results, and the trained steps
"""
