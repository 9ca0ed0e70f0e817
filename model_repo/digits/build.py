"""Train and export the ``digits`` model: a LeNet-5-style CNN for handwritten digits.

This is the bundled image-classification example. It is trained on
scikit-learn's bundled ``load_digits`` dataset (1,797 grayscale 8x8 images,
pixel values 0..16, classes 0..9), so no download is needed.

Model contract (see ``config.pbtxt``):

* input ``input``: FP32 ``[batch, 1, 28, 28]``, grayscale, pixel values in
  0..1 with ink bright on a dark background (like MNIST). An image pipeline
  feeds 28x28 grayscale images scaled by 1/255.
* output ``logits``: FP32 ``[batch, 10]``, unnormalised class scores; class
  ``i`` is the digit ``i`` (``labels.txt`` lists "0".."9").

Preprocessing of the 8x8 dataset images (``to_model_input``): divide by 16,
then resize 8x8 -> 28x28 with bilinear interpolation using half-pixel
centres (the same as ``torch.nn.functional.interpolate(mode="bilinear",
align_corners=False)``, checked below). It is written in numpy and this
module imports torch only inside the training/export functions, so a test
can import ``to_model_input`` and ``load_test_set`` without torch.

Data split: stratified 80/20 train/test split with
``sklearn.model_selection.train_test_split(random_state=SPLIT_SEED)``; the
held-out indices into ``load_digits()`` are saved in ``test_split.npz``
(``test_indices``, ``test_labels``).

Training: Adam, cross-entropy, random shifts of up to +-2 pixels as
augmentation, fixed seeds and single-threaded torch for repeatability. The
exported graph (ONNX opset 17, IR version <= 9, dynamic batch axis) is
compared with the torch model on the test set and the test accuracy is
measured through onnxruntime; both numbers are written to ``README.md``.

Run from the repository root (needs torch; ``pip install torch==2.13.0``)::

    python model_repo/digits/build.py
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

if TYPE_CHECKING:
    import torch

HERE = Path(__file__).resolve().parent
OPSET = 17
MAX_IR_VERSION = 9
SPLIT_SEED = 20240607
TORCH_SEED = 0
TEST_FRACTION = 0.2
SIZE = 28
EPOCHS = 40
BATCH_SIZE = 32
LEARNING_RATE = 1e-3
MAX_SHIFT = 2


def _resize_weights(src_size: int, dst_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (low index, high index, high weight) per output pixel, half-pixel centres."""
    scale = src_size / dst_size
    centres = (np.arange(dst_size, dtype=np.float64) + 0.5) * scale - 0.5
    centres = np.clip(centres, 0.0, src_size - 1)
    low = np.floor(centres).astype(np.int64)
    high = np.minimum(low + 1, src_size - 1)
    return low, high, centres - low


def to_model_input(images: np.ndarray) -> np.ndarray:
    """Turn ``load_digits`` images ``[n, 8, 8]`` (0..16) into model input ``[n, 1, 28, 28]``."""
    scaled = np.asarray(images, dtype=np.float64) / 16.0
    low, high, weight = _resize_weights(scaled.shape[-1], SIZE)
    # Interpolate along rows, then along columns.
    rows = scaled[:, low, :] * (1 - weight)[None, :, None] + scaled[:, high, :] * weight[None, :, None]
    full = rows[:, :, low] * (1 - weight)[None, None, :] + rows[:, :, high] * weight[None, None, :]
    return full[:, None, :, :].astype(np.float32)


def split_indices() -> tuple[np.ndarray, np.ndarray]:
    """Return (train indices, test indices) into ``load_digits()``: stratified, fixed seed."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    labels = load_digits().target
    train_idx, test_idx = train_test_split(
        np.arange(len(labels)), test_size=TEST_FRACTION, stratify=labels, random_state=SPLIT_SEED
    )
    return np.sort(train_idx), np.sort(test_idx)


def load_test_set(split_file: Path = HERE / "test_split.npz") -> tuple[np.ndarray, np.ndarray]:
    """Return the held-out test set as (model inputs ``[n, 1, 28, 28]``, labels ``[n]``)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    with np.load(split_file) as split:
        indices = split["test_indices"]
    return to_model_input(digits.images[indices]), digits.target[indices].astype(np.int64)


def build_network() -> torch.nn.Module:
    """Return the LeNet-5-style network (ReLU and max pooling instead of tanh/avg pooling)."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 6, kernel_size=5, padding=2),  # 6 x 28 x 28
        nn.ReLU(),
        nn.MaxPool2d(2),  # 6 x 14 x 14
        nn.Conv2d(6, 16, kernel_size=5),  # 16 x 10 x 10
        nn.ReLU(),
        nn.MaxPool2d(2),  # 16 x 5 x 5
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, 10),
    )


def random_shift(batch: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Shift each image by up to MAX_SHIFT pixels in x and y, filling with zeros."""
    import torch
    from torch.nn import functional as F

    n = batch.shape[0]
    padded = F.pad(batch, (MAX_SHIFT,) * 4)
    offsets = torch.randint(0, 2 * MAX_SHIFT + 1, (n, 2), generator=generator)
    out = torch.empty_like(batch)
    for i in range(n):
        dy, dx = int(offsets[i, 0]), int(offsets[i, 1])
        out[i] = padded[i, :, dy : dy + SIZE, dx : dx + SIZE]
    return out


def train(x_train: np.ndarray, y_train: np.ndarray) -> torch.nn.Module:
    """Train the network on the given inputs and labels and return it in eval mode."""
    import torch
    from torch import nn

    torch.manual_seed(TORCH_SEED)
    generator = torch.Generator().manual_seed(TORCH_SEED)
    model = build_network()
    optimiser = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=EPOCHS)
    loss_fn = nn.CrossEntropyLoss()
    inputs = torch.from_numpy(x_train)
    targets = torch.from_numpy(y_train)
    for epoch in range(EPOCHS):
        model.train()
        order = torch.randperm(len(inputs), generator=generator)
        total = 0.0
        for start in range(0, len(order), BATCH_SIZE):
            idx = order[start : start + BATCH_SIZE]
            batch = random_shift(inputs[idx], generator)
            optimiser.zero_grad()
            loss = loss_fn(model(batch), targets[idx])
            loss.backward()
            optimiser.step()
            total += loss.item() * len(idx)
        scheduler.step()
        if epoch % 10 == 9 or epoch == EPOCHS - 1:
            print(f"epoch {epoch + 1:3d}: train loss {total / len(inputs):.4f}")
    model.eval()
    return model


def export(model: torch.nn.Module, path: Path) -> None:
    """Export to ONNX (opset 17, dynamic batch axis) and cap the IR version."""
    import torch

    dummy = torch.zeros(1, 1, SIZE, SIZE)
    with warnings.catch_warnings():
        # The TorchScript exporter is deprecated upstream but still works for this graph.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model,
            (dummy,),
            str(path),
            dynamo=False,  # the TorchScript exporter needs no onnxscript and gives a compact graph
            input_names=["input"],
            output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
            opset_version=OPSET,
            do_constant_folding=True,
        )
    proto = onnx.load(str(path))
    if proto.ir_version > MAX_IR_VERSION:
        proto.ir_version = MAX_IR_VERSION
    proto.producer_name = "ferry-model-repo (torch.onnx.export)"
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, str(path))


def write_readme(results: dict[str, str]) -> None:
    """Write README.md describing the model and the measured results."""
    text = f"""# digits

LeNet-5-style CNN classifying handwritten digits 0-9, trained on scikit-learn's
bundled `load_digits` dataset. Built by `build.py` in this directory.

## Contract

| tensor | datatype | shape | meaning |
|---|---|---|---|
| `input` | FP32 | `[batch, 1, 28, 28]` | grayscale, 0..1, bright ink on dark background |
| `logits` | FP32 | `[batch, 10]` | unnormalised scores; labels in `labels.txt` ("0".."9") |

`max_batch_size: 64`, dynamic batching with `max_queue_delay_microseconds: 500`,
one CPU instance. A client sending a 28x28 8-bit grayscale image scales it by 1/255.

## Architecture

Conv 5x5 (1->6, pad 2) - ReLU - MaxPool 2 - Conv 5x5 (6->16) - ReLU - MaxPool 2 -
Flatten (400) - Linear 120 - ReLU - Linear 84 - ReLU - Linear 10
({results["params"]} parameters). LeNet-5 with ReLU and max pooling.

## Data

- Dataset: `sklearn.datasets.load_digits()` (1,797 images of 8x8, values 0..16).
- Preprocessing: value / 16, then bilinear resize 8x8 -> 28x28 with half-pixel centres
  (equal to `torch.nn.functional.interpolate(mode="bilinear", align_corners=False)`;
  numpy version: `to_model_input` in `build.py`).
- Split: stratified 80/20 with `train_test_split(random_state={SPLIT_SEED})`:
  {results["n_train"]} training and {results["n_test"]} test images. The test indices
  into `load_digits()` (and their labels) are in `test_split.npz` (`test_indices`,
  `test_labels`); `build.load_test_set()` rebuilds the test inputs without torch.
- Training: {EPOCHS} epochs, Adam (lr {LEARNING_RATE}, cosine schedule), batch {BATCH_SIZE},
  random shifts of up to +-{MAX_SHIFT} pixels, seeds fixed, torch single-threaded.

## Results

- Test accuracy through onnxruntime {results["ort_version"]} (CPU) on `1/model.onnx`:
  **{results["ort_accuracy"]}** ({results["ort_correct"]}/{results["n_test"]}).
- Test accuracy of the torch model: {results["torch_accuracy"]}.
- Max abs difference between torch and onnxruntime logits on the test set:
  {results["max_abs_diff"]}.
- Test accuracy through onnxruntime when the test images are first quantised to
  8-bit (round(x * 255) / 255, as an image client would send them): {results["u8_accuracy"]}.
- ONNX: opset {OPSET}, IR version {results["ir_version"]}, {results["size"]} bytes.

Produced with torch {results["torch_version"]}, onnx {onnx.__version__}, numpy
{np.__version__}, Python {results["python"]}, by running from the repository root:

```
python model_repo/digits/build.py
```

Retraining gives the same split and normally the same weights on the same
software stack; floating point results of training may differ slightly across
CPUs or library versions.
"""
    (HERE / "README.md").write_text(text, encoding="utf-8")


def main() -> None:
    import onnxruntime as ort
    import torch
    from sklearn.datasets import load_digits

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    started = time.time()

    digits = load_digits()
    all_inputs = to_model_input(digits.images)
    labels = digits.target.astype(np.int64)

    # The numpy resize must agree with torch's bilinear interpolation.
    reference = torch.nn.functional.interpolate(
        torch.from_numpy((digits.images[:50] / 16.0).astype(np.float32))[:, None],
        size=(SIZE, SIZE),
        mode="bilinear",
        align_corners=False,
    ).numpy()
    resize_diff = float(np.abs(reference - all_inputs[:50]).max())
    assert resize_diff < 1e-6, resize_diff

    train_idx, test_idx = split_indices()
    np.savez_compressed(
        HERE / "test_split.npz",
        test_indices=test_idx.astype(np.int32),
        test_labels=labels[test_idx].astype(np.int8),
    )
    model = train(all_inputs[train_idx], labels[train_idx])

    path = HERE / "1" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    export(model, path)
    (HERE / "labels.txt").write_text("".join(f"{i}\n" for i in range(10)), encoding="utf-8")

    x_test, y_test = load_test_set()
    assert np.array_equal(y_test, labels[test_idx])
    with torch.no_grad():
        torch_logits = model(torch.from_numpy(x_test)).numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (ort_logits,) = session.run(["logits"], {"input": x_test})
    max_abs_diff = float(np.abs(torch_logits - ort_logits).max())
    assert max_abs_diff < 1e-4, max_abs_diff
    ort_correct = int((ort_logits.argmax(axis=1) == y_test).sum())
    torch_correct = int((torch_logits.argmax(axis=1) == y_test).sum())
    (u8_logits,) = session.run(["logits"], {"input": np.round(x_test * 255).astype(np.float32) / 255})
    u8_correct = int((u8_logits.argmax(axis=1) == y_test).sum())
    n_test = len(y_test)
    proto = onnx.load(str(path))

    results = {
        "params": f"{sum(p.numel() for p in model.parameters()):,}",
        "n_train": str(len(train_idx)),
        "n_test": str(n_test),
        "ort_version": ort.__version__,
        "ort_accuracy": f"{ort_correct / n_test:.2%}",
        "ort_correct": str(ort_correct),
        "torch_accuracy": f"{torch_correct / n_test:.2%}",
        "u8_accuracy": f"{u8_correct / n_test:.2%}",
        "max_abs_diff": f"{max_abs_diff:.2e}",
        "ir_version": str(proto.ir_version),
        "size": f"{path.stat().st_size:,}",
        "torch_version": torch.__version__,
        "python": sys.version.split()[0],
    }
    write_readme(results)
    print(
        f"test accuracy (onnxruntime): {results['ort_accuracy']} ({ort_correct}/{n_test}); "
        f"torch: {results['torch_accuracy']}; 8-bit inputs: {results['u8_accuracy']}; "
        f"max abs diff torch vs ort: {results['max_abs_diff']}; "
        f"wrote {path} ({results['size']} bytes) in {time.time() - started:.0f}s"
    )
    if ort_correct / n_test < 0.97:
        raise SystemExit("test accuracy is below the 97% target")


if __name__ == "__main__":
    main()
