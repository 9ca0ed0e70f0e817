"""Precision variants for the search, built by ``ferry optimize`` in the tuner's private repository.

A variant joins the search only when it passed the accuracy gate: ``ferry optimize`` refuses an
INT8 model below its agreement threshold, and the tuner holds FP16 to the same threshold where
the report has an agreement figure (``ferry optimize`` writes FP16 without one).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import FerryError
from ..optimize.run import DEFAULT_MIN_AGREEMENT, AccuracyRefused, OptimizeOptions, optimize
from .runner import PrivateRepository

PRECISIONS = ("fp16", "int8")
#: Enough images/tensors to calibrate and to judge agreement without eating the time budget.
SAMPLES = 128


@dataclass(frozen=True)
class Variant:
    name: str  # the model name it is served under in the private repository
    precision: str


def build_variants(
    repository: PrivateRepository,
    precisions: tuple[str, ...],
    calibration_images: Path | None,
    calibration_tensors: Path | None,
    say: Callable[[str], None],
) -> tuple[list[Variant], list[str]]:
    """The variants that passed, and a note for each precision that was not tried or was refused."""
    variants: list[Variant] = []
    notes: list[str] = []
    for precision in precisions:
        if precision == "int8" and not (calibration_images or calibration_tensors):
            notes.append("INT8: not tried (give --calibration-images DIR or --calibration-tensors FILE.npy)")
            continue
        name = f"{repository.name}_{precision}"
        options = OptimizeOptions(
            model_dir=repository.model_dir,
            precision=precision,
            output_name=name,
            calibration_images=calibration_images,
            calibration_tensors=calibration_tensors,
            calibration_count=SAMPLES,
            eval_count=SAMPLES,
            show_progress=False,
        )
        say(f"building the {precision.upper()} variant with ferry optimize")
        try:
            result = optimize(options, say=lambda line: None)
        except AccuracyRefused as exc:
            notes.append(f"{precision.upper()}: refused by ferry optimize's accuracy gate ({exc})")
            continue
        except FerryError as exc:
            notes.append(f"{precision.upper()}: could not be built ({exc})")
            continue
        report = result.report
        agreement = report.agreement
        threshold = DEFAULT_MIN_AGREEMENT[report.task]
        if agreement is not None and agreement == agreement and agreement < threshold:
            shutil.rmtree(repository.root / name, ignore_errors=True)
            notes.append(f"{precision.upper()}: agreement with FP32 {agreement:.4f} < {threshold}; not tried")
            continue
        verdict = f"agreement with FP32 {agreement:.4f}" if agreement is not None else "no agreement figure"
        variants.append(Variant(name, precision.upper()))
        notes.append(f"{precision.upper()}: built by ferry optimize, passed its accuracy gate ({verdict})")
    return variants, notes
