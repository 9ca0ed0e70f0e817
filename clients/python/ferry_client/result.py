"""The decoded answer to an inference call, the same object whichever protocol carried it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from .codec import bf16_to_float32

__all__ = ["InferResult"]


class InferResult:
    """Outputs of one inference as numpy arrays, plus the response's identity and parameters.

    BF16 outputs are widened to float32 values here, because numpy has no bfloat16 and callers
    want numbers, not bit patterns; ``datatypes`` still tells what the server sent. Fixed-size
    outputs may be read-only views of the response buffer (no copy); copy them to modify.
    """

    __slots__ = ("datatypes", "id", "model_name", "model_version", "outputs", "parameters")

    def __init__(
        self,
        model_name: str,
        model_version: str,
        outputs: Mapping[str, np.ndarray],
        datatypes: Mapping[str, str] | None = None,
        id: str = "",  # the V2 field is called "id"
        parameters: Mapping[str, Any] | None = None,
    ) -> None:
        self.model_name = model_name
        self.model_version = model_version
        self.id = id
        self.parameters: dict[str, Any] = dict(parameters or {})
        self.datatypes: dict[str, str] = dict(datatypes or {})
        self.outputs: dict[str, np.ndarray] = {
            name: bf16_to_float32(array) if self.datatypes.get(name) == "BF16" else array
            for name, array in outputs.items()
        }

    def __getitem__(self, name: str) -> np.ndarray:
        """The output called ``name``; a KeyError lists the outputs that do exist."""
        try:
            return self.outputs[name]
        except KeyError:
            raise KeyError(f"no output '{name}' in the response; it has {sorted(self.outputs)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self.outputs

    def __iter__(self) -> Iterator[str]:
        return iter(self.outputs)

    def __len__(self) -> int:
        return len(self.outputs)

    def as_numpy(self, name: str) -> np.ndarray | None:
        """The output called ``name``, or None when absent (tritonclient's behaviour)."""
        return self.outputs.get(name)

    def __repr__(self) -> str:
        shapes = ", ".join(
            f"{name}: {self.datatypes.get(name, '?')}{list(array.shape)}" for name, array in self.outputs.items()
        )
        return f"InferResult(model={self.model_name!r}, version={self.model_version!r}, outputs={{{shapes}}})"
