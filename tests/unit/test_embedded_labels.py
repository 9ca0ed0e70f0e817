"""Class names read from a model file's metadata (Ultralytics' ``names``): literals only, indices 0..N-1."""

from __future__ import annotations

import pytest

from ferry.errors import ModelLoadError
from ferry.repository.embedded_labels import embedded_class_names


def test_ultralytics_names_in_class_order() -> None:
    names = embedded_class_names({"names": "{1: 'bicycle', 0: 'person', 2: \"it's\"}"}, "m")
    assert names == ["person", "bicycle", "it's"]
    assert embedded_class_names({"names": "['a', 'b']"}, "m") == ["a", "b"]
    assert embedded_class_names({"stride": "32"}, "m") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("__import__('os').system('touch /tmp/ferry-pwned')", "is not a Python literal"),
        ("{0: 'a', 2: 'c'}", "must map class indices 0..N-1"),
        ("{'0': 'a'}", "must map class indices 0..N-1"),
        ("{0: 1}", "must map class indices 0..N-1"),
        ("[" * 100_000 + "]" * 100_000, "is not a Python literal"),
        ("{}", "must map class indices 0..N-1"),
    ],
)
def test_anything_else_is_refused_without_running_it(text: str, message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        embedded_class_names({"names": text}, "m")
