"""Triton ensembles run in-process: a DAG of steps, each through its composing model's scheduler.

``plan`` checks the config's shape (what needs no other model), ``compose`` checks it against the
composing models, ``scheduler`` runs requests through the steps and ``loader`` builds the
ensemble's model version. ``step`` defines what a step needs from a composing model.
"""

ENSEMBLE_PLATFORM = "ensemble"
