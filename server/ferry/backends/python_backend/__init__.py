"""Triton-style Python models (``model.py``), opt-in: see ``backend`` and the README's Security section."""

from .backend import PythonBackend

__all__ = ["PythonBackend"]
