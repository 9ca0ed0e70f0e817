"""Reference detections for ``face_detector``: MediaPipe's own face-detection pipeline.

``photos`` builds the test photos from images that ship in scikit-image (the astronaut
portrait as is, mirrored, turned, resized to a non-integer scale and cropped to non-square shapes,
crops that cut her face at the left, top, right and bottom borders, grids of 2 and 9 faces, and
photos with no face); ``main`` runs ``mediapipe.solutions.face_detection`` (short range, its default
0.5 confidence) on each and writes ``reference.json``: per photo its size and every
detection's score, box (x1, y1, x2, y2) and 6 keypoints in pixels.

mediapipe 0.10.14 pins ``protobuf < 5``, which conflicts with Ferry's, so run it in a
separate environment (``photos`` needs only scikit-image, numpy and Pillow, so the tests
import it)::

    python3.11 -m venv /work/refvenv
    /work/refvenv/bin/pip install mediapipe==0.10.14 scikit-image
    /work/refvenv/bin/python model_repo/face_detector/reference.py
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # model_repo/, for packaged.py
from packaged import png  # noqa: E402

HERE = Path(__file__).resolve().parent


def photos() -> dict[str, bytes]:
    """Encoded test photos by name (PNG, so every decoder sees the same pixels): whole, cropped to
    non-square shapes, mirrored, turned, scaled to non-integer sizes, faces cut by each border, a
    grid of faces, and photos without a face."""
    from skimage import data

    astronaut = data.astronaut()
    face = astronaut[50:210, 140:310]
    mirrored = face[:, ::-1]
    small = np.asarray(Image.fromarray(face).resize((85, 80), Image.BILINEAR))
    return {
        "astronaut": png(astronaut),
        "astronaut_crop": png(np.ascontiguousarray(astronaut[40:340, 60:460])),
        "two_faces": png(np.concatenate([face, mirrored], axis=1)),
        "coffee": png(data.coffee()),
        "rocket": png(data.rocket()),
        "astronaut_mirrored": png(np.ascontiguousarray(astronaut[:, ::-1])),
        "astronaut_turned_90": png(np.ascontiguousarray(np.rot90(astronaut, k=-1))),
        "astronaut_451x451": png(np.asarray(Image.fromarray(astronaut).resize((451, 451), Image.BILINEAR))),
        "astronaut_tall": png(np.ascontiguousarray(astronaut[0:512, 110:350])),
        "face_cut_left": png(np.ascontiguousarray(astronaut[20:300, 205:460])),
        "face_cut_top": png(np.ascontiguousarray(astronaut[110:400, 90:400])),
        "face_cut_right_bottom": png(np.ascontiguousarray(astronaut[0:160, 0:250])),
        "face_grid_2x2": png(
            np.concatenate([np.concatenate([face, mirrored], axis=1), np.concatenate([mirrored, face], axis=1)])
        ),
        "face_grid_3x3": png(np.concatenate([np.concatenate([small] * 3, axis=1)] * 3, axis=0)),
        "chelsea": png(data.chelsea()),
    }


def main() -> None:
    import mediapipe as mp

    results = {}
    with mp.solutions.face_detection.FaceDetection(model_selection=0, min_detection_confidence=0.5) as detector:
        for name, encoded in photos().items():
            rgb = np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB"))
            height, width = rgb.shape[:2]
            found = detector.process(rgb).detections or []
            detections = []
            for detection in found:
                box = detection.location_data.relative_bounding_box
                points = detection.location_data.relative_keypoints
                detections.append(
                    {
                        "score": float(detection.score[0]),
                        "box": [
                            box.xmin * width,
                            box.ymin * height,
                            (box.xmin + box.width) * width,
                            (box.ymin + box.height) * height,
                        ],
                        "keypoints": [[p.x * width, p.y * height] for p in points],
                    }
                )
            results[name] = {"width": width, "height": height, "detections": detections}
    (HERE / "reference.json").write_text(json.dumps(results, indent=1) + "\n")
    print({name: len(r["detections"]) for name, r in results.items()})


if __name__ == "__main__":
    main()
