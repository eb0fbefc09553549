"""Behaviour: which items a model or a person recalls. Serial-position summaries of the study x query matrix
(``serial_position``), free-recall counts and curves (``free_recall``), a group's curves and their distances
(``comparison``) and the CMR model of free recall with its fits (``cmr``)."""
