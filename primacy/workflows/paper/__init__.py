"""The figures of ``primacy reproduce``: the paper's pages and figure files of your own, each a set of runs planned
and drawn from their results. It draws every study's results (the induction and humans pages among them), so it sits
above the study packages; no study imports it.

Modules:
    figure_files  a figure of your own for primacy reproduce
    pages         which config draws each panel, and how runs become a figure
    phenomena     recall-like-people: backbones x objectives x delays scored on human phenomena
    reproduce     a figure's runs planned, and the figure drawn from them
    selection     Delta by token for the figure pages
    spec          a figure's panels, layout and reference
"""
