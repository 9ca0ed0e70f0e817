"""Vision steps: small in-process models that an ensemble chains with engine models.

Each is a model like any other (``backend: "ferry_vision"`` in ``config.pbtxt``, its own
scheduler, statistics and metrics), chosen by ``parameters { key: "step" ... }``, and each is a
thin adapter over the public functions of ``ferry.pipelines``:

- ``decode_preprocess``: encoded images ``IMAGE`` -> model tensor ``TENSOR`` and ``TRANSFORM``
  (how original pixels map to tensor pixels);
- ``detection``: a detector's raw outputs + ``TRANSFORM`` -> ``num_detections``,
  ``detection_boxes`` (original pixels), ``detection_scores``, ``detection_classes``;
- ``crop``: ``IMAGE`` + ``detection_boxes`` + ``num_detections`` -> ``CROPS`` (every detection of
  every image, resized for a second model, one flat batch) and ``CROP_IMAGE_INDEX``;
- ``classification``: ``LOGITS`` -> top-k ``CLASS_IDS`` and ``SCORES``.
"""

from __future__ import annotations

STEP_PARAMETER = "step"
