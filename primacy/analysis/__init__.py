"""Post-hoc analyses of a model's memory: serial-position summaries (serial_position), attention-head scores
(heads, icl), the CMR model of free recall and its fits (cmr, fits), and head ablation (ablation)."""
