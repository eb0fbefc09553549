"""The tasks: each a LightningDataModule over a pure, seeded batch generator.

Modules:
    associative_recall  associative recall: study pairs, answer by key
    base                what every task guarantees: seeded, resumable, split over processes; shared settings
    free_recall         free recall: study, cue, recall in any order, stop
    induction           repeated random tokens, next-token prediction
    mqar                multi-query associative recall as Zoology draws it
    prompts             BOS and the repeated-token prompt
    reconstruction      delayed reconstruction (copying memory)
    sampling            seeded generators, held-out sets, set hashes
    selective_copying   selective copying (the Mamba paper's)
    verification        memory verification (serial probe recognition)
"""
