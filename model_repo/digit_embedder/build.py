"""Build the ``digit_embedder`` example model: the ``digits`` classifier cut before its last layer.

The 84 activations that feed ``digits``' final layer describe a digit's shape; served with
``embedding { l2_normalize: true }`` they are a unit vector per image (``/embed``,
``client.embed("digit_embedder", "digit.png")``), and two images of one digit point the same way
more than images of different digits. The graph is ``model_repo/digits/1/model.onnx`` up to that
tensor (``onnx.utils.Extractor``; no training), renamed ``embedding``, so rebuilding is
deterministic and follows ``digits`` when that model is retrained.

Run from the repository root::

    python model_repo/digit_embedder/build.py

It writes ``1/model.onnx`` next to this script and checks, with onnxruntime on ``digits``' held-out
images, that each image's nearest neighbour (cosine) is mostly of its own class.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, utils

HERE = Path(__file__).resolve().parent
DIGITS = HERE.parent / "digits"
FEATURES = "/10/Relu_output_0"  # the ReLU after the second fully connected layer (84 wide)
WIDTH = 84


def build_model() -> onnx.ModelProto:
    """``digits`` from its input to ``FEATURES``, whose output is renamed ``embedding``."""
    source = onnx.shape_inference.infer_shapes(onnx.load(DIGITS / "1" / "model.onnx"))
    model = utils.Extractor(source).extract_model(["input"], [FEATURES])
    for node in model.graph.node:
        node.output[:] = ["embedding" if name == FEATURES else name for name in node.output]
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("embedding", onnx.TensorProto.FLOAT, ["batch", WIDTH]))
    model.graph.name = "digit_embedder"
    onnx.checker.check_model(model)
    return model


def nearest_neighbour_accuracy(path: Path) -> float:
    """Share of held-out digits whose most similar other held-out digit (cosine) has the same label."""
    import onnxruntime as ort
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    indices = np.load(DIGITS / "test_split.npz")["test_indices"]
    images = [Image.fromarray(np.round(digits.images[i] * 255 / 16).astype(np.uint8)) for i in indices]
    batch = np.stack([np.asarray(im.resize((28, 28), Image.BILINEAR), np.float32)[None] / 255 for im in images])
    vectors = ort.InferenceSession(str(path)).run(["embedding"], {"input": batch})[0]
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    similarity = vectors @ vectors.T
    np.fill_diagonal(similarity, -np.inf)
    labels = digits.target[indices]
    return float(np.mean(labels[similarity.argmax(axis=1)] == labels))


def main() -> None:
    path = HERE / "1" / "model.onnx"
    path.parent.mkdir(exist_ok=True)
    onnx.save(build_model(), path)
    accuracy = nearest_neighbour_accuracy(path)
    assert accuracy > 0.9, accuracy
    print(f"wrote {path} ({path.stat().st_size} bytes); nearest held-out neighbour of the same digit: {accuracy:.1%}")


if __name__ == "__main__":
    main()
