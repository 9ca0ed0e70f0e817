"""Class names a model file carries itself, used when its config names no label file.

Ultralytics writes them into an exported ONNX file's ``metadata_props`` as ``names``: a Python dict
literal such as ``"{0: 'person', 1: 'bicycle'}"``. It is read with ``ast.literal_eval``, which
evaluates literals only, so a crafted model file cannot run code through it.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

from ..errors import ModelLoadError

#: Metadata keys that hold class names, as Ultralytics writes them.
NAMES_KEY = "names"


def embedded_class_names(metadata: Mapping[str, str], source: str) -> list[str] | None:
    """The class names in ``metadata`` in class-index order, or None when it has none.

    Refuses (naming the key) a ``names`` entry that is not a dict of class index -> name with indices
    0..N-1, since labels shifted against the model's classes would be silently wrong."""
    text = metadata.get(NAMES_KEY)
    if text is None:
        return None
    try:
        names = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise ModelLoadError(
            f"{source}: the model file's metadata '{NAMES_KEY}' is not a Python literal (Ultralytics writes "
            f"{{0: 'person', 1: 'bicycle'}}); give the output a label_filename instead"
        ) from None
    if isinstance(names, (list, tuple)):
        names = dict(enumerate(names))
    if (
        not isinstance(names, dict)
        or not names
        or not all(isinstance(key, int) and isinstance(value, str) for key, value in names.items())
        or sorted(names) != list(range(len(names)))
    ):
        raise ModelLoadError(
            f"{source}: the model file's metadata '{NAMES_KEY}' must map class indices 0..N-1 to names "
            f"(as Ultralytics writes {{0: 'person', 1: 'bicycle'}}); give the output a label_filename instead"
        )
    return [names[index] for index in range(len(names))]
