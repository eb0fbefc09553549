"""Post-hoc analyses of a model's memory: serial-position summaries and, later, CRPs and CMR fits."""
