"""Behaviour: which items a model or a person recalls. Serial-position summaries of the study x query matrix
(``serial_position``), free-recall counts and curves (``free_recall``), a group's curves and their distances
(``comparison``), one member's human phenomena (``phenomena``) and the CMR model of free recall with its fits (``cmr``).

Modules:
    cmr              the CMR model: its simulated lag-CRP, the grid, fits; cymr's likelihood and fits
    comparison       a group's free-recall curves (mean, SE) and their distances
    free_recall      spc, pfr, lag-CRP, intrusions and repetitions of output sequences
    phenomena        a member's human phenomena: recency, primacy, where recall starts, forward asymmetry
    serial_position  serial-position summaries of the study x query matrix, recognition contiguity
"""
