"""CTC greedy decoding, as PaddleOCR's ``CTCLabelDecode``: the best class per time step, repeats
merged, the blank (index 0) dropped; confidence is the mean probability of the kept steps (0
when none is kept).

The dictionary is the model's ``character`` metadata (one character per line) with the blank
prepended and a space appended, so class ``i`` is ``characters[i]``.
"""

from __future__ import annotations

import numpy as np

BLANK = 0


def ctc_characters(dictionary: list[str]) -> list[str]:
    """Class index to character: blank first, the dictionary, then the space PaddleOCR appends."""
    return ["blank", *dictionary, " "]


def ctc_greedy(probabilities: np.ndarray, characters: list[str]) -> list[tuple[str, float]]:
    """(text, confidence) for each line of a (N, T, classes) probability batch."""
    best = probabilities.argmax(axis=2)
    best_probability = probabilities.max(axis=2)
    results = []
    for indices, probability in zip(best, best_probability, strict=True):
        keep = np.ones(len(indices), dtype=bool)
        keep[1:] = indices[1:] != indices[:-1]
        keep &= indices != BLANK
        kept = probability[keep]
        text = "".join(characters[i] for i in indices[keep])
        results.append((text, float(np.mean(kept.astype(np.float64))) if kept.size else 0.0))
    return results
