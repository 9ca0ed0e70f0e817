"""Triton ensembles run in-process: a DAG of steps, each through its composing model's scheduler.

``plan`` checks the config's shape (what needs no other model), ``compose`` checks it against the
composing models, ``scheduler`` runs requests through the steps (``repository.ensemble_loader``
builds the ensemble's model version from them). ``step`` defines what a step needs from a
composing model. Nothing here imports ``repository``.
"""

ENSEMBLE_PLATFORM = "ensemble"
