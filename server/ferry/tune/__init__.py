"""``ferry tune``: measure serving configurations of one model on this machine and recommend one.

candidates (what a configuration is), objective (how samples are scored), search (which
configurations to try, within the time budget), precision (variants from ``ferry optimize``),
runner (the real server), measure (the ``ferry-client perf`` engine), report and writer (results).
"""
