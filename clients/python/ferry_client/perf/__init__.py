"""``ferry-client perf``: a perf_analyzer-like load generator for any KServe V2 / Triton server."""

from .runner import StepPlan, StepResult

__all__ = ["StepPlan", "StepResult"]
