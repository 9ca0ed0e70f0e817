"""``ferry-client perf``: a perf_analyzer-like load generator for any KServe V2 / Triton server."""

from .extra import PERF_INSTALL_HINT
from .runner import StepPlan, StepResult

__all__ = ["PERF_INSTALL_HINT", "StepPlan", "StepResult"]
