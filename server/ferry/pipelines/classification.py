"""Classifier outputs to ranked classes: softmax, top-k and Triton's classification strings."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax along the last axis, shifted by the row maximum so large logits cannot overflow.

    Float inputs keep their precision (FP16 is computed and returned as FP32); others become FP32.
    """
    values = np.asarray(logits)
    if values.dtype not in (np.float32, np.float64):
        values = values.astype(np.float32)
    exps = np.exp(values - values.max(axis=-1, keepdims=True))
    exps /= exps.sum(axis=-1, keepdims=True)
    return exps


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best entries of each row (last axis): (indices, values), best first.

    Equal scores rank by lower index, so results are deterministic.  NaN ranks last.  ``k`` is
    capped at the row length.
    """
    values = np.asarray(scores)
    if values.ndim == 0:
        raise ValueError("top_k needs at least one dimension")
    n = values.shape[-1]
    k = max(0, min(int(k), n))
    rows = values.reshape(-1, n)
    indices = np.empty((rows.shape[0], k), dtype=np.int64)
    for r, row in enumerate(rows):
        indices[r] = _top_k_row(row, k)
    shaped = indices.reshape(values.shape[:-1] + (k,))
    return shaped, np.take_along_axis(values, shaped, axis=-1)


def _top_k_row(row: np.ndarray, k: int) -> np.ndarray:
    """argpartition finds the k-th best score in O(n); every index reaching it (ties included) is
    then sorted stably, which a bare argpartition would not guarantee for ties at the boundary."""
    key = row.astype(np.float64)
    key[np.isnan(key)] = -np.inf
    n = key.shape[0]
    if k == 0:
        return np.empty(0, dtype=np.int64)
    if k < n:
        kth_best = key[np.argpartition(key, n - k)[n - k]]
        candidates = np.flatnonzero(key >= kth_best)
    else:
        candidates = np.arange(n)
    order = np.argsort(-key[candidates], kind="stable")[:k]
    return candidates[order]


def classification_strings(scores_row: np.ndarray, k: int, labels: Sequence[str] | None) -> list[bytes]:
    """Triton's classification extension for one batch entry: b"score:index:label", best first.

    The whole entry is ranked (it is flattened, as Triton does).  Scores are printed as C++
    ``std::to_string`` does: six decimals for floats (``0.912345``), plain digits for integers.
    The label part is left out when there is no label for the index.
    """
    row = np.asarray(scores_row).ravel()
    indices, values = top_k(row, k)
    integral = row.dtype.kind in "iub"
    result: list[bytes] = []
    for index, value in zip(indices.tolist(), values.tolist(), strict=True):
        text = f"{int(value)}:{index}" if integral else f"{float(value):f}:{index}"
        if labels is not None and index < len(labels) and labels[index]:
            text += f":{labels[index]}"
        result.append(text.encode("utf-8"))
    return result
