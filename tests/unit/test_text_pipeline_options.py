"""The text-model options of the ordinary image pipeline (``resize: LIMIT_SIDE``, ``resize:
TEXT_LINE``, ``detection { format: DBNET }``, ``text_recognition``): what a config may combine
(everything else refused at load, naming it), that the pipeline's tensors are the ones the OCR
model kind's ``pipelines.text.tensors`` builds, and how variable-size images split into executions.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from google.protobuf import text_format
from PIL import Image

from ferry.errors import InvalidArgument, ModelLoadError
from ferry.pipelines.runtime import ImagePipeline
from ferry.pipelines.text import reading, sizes, tensors
from ferry.pipelines.text_recognition import recognise, recognition_tensors
from ferry.types import TensorSpec
from ferry_client.protocol import model_config_pb2 as mc
from tests import ocr_reference as ocr

NORMALISE = "color_order: BGR mean: [0.5] std: [0.5]"
DETECTOR = f"preprocess {{ {NORMALISE} resize: LIMIT_SIDE limit_side_len: 736 }} detection {{ format: DBNET }}"
ANGLE = f"preprocess {{ {NORMALISE} resize: TEXT_LINE }} classification {{ softmax: false }}"
RECOGNIZER = f"preprocess {{ {NORMALISE} resize: TEXT_LINE }} text_recognition {{ }}"
MAP = {"map": [1, -1, -1]}
CLASSES = {"probabilities": [-1, 5]}
DICTIONARY = ["a", "b", "c"]  # blank + 3 + space = 5 classes


def pipeline(
    image: str,
    input_dims: tuple[int, ...],
    outputs: dict[str, list[int]],
    max_batch_size: int = 4,
    labels: list[str] | None = None,
) -> ImagePipeline:
    config = text_format.Parse(f"max_batch_size: {max_batch_size} ferry_image {{ {image} }}", mc.ModelConfig())
    built = ImagePipeline.from_config(
        config,
        {"x": TensorSpec("x", "FP32", input_dims)},
        {name: TensorSpec(name, "FP32", tuple(dims)) for name, dims in outputs.items()},
        {name: labels for name in outputs} if labels else {},
    )
    assert built is not None
    return built


def png(rgb: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("image", "input_dims", "outputs", "message"),
    [
        (f"preprocess {{ {NORMALISE} }}", (3, -1, -1), CLASSES, r"needs a fixed height and width.*LIMIT_SIDE"),
        (DETECTOR, (3, 640, 640), MAP, r"LIMIT_SIDE sizes each image by its rule.*must be -1"),
        (DETECTOR.replace("limit_side_len: 736", ""), (3, -1, -1), MAP, r"limit_side_len: LIMIT_SIDE needs"),
        (DETECTOR.replace("LIMIT_SIDE", "EXACT"), (3, 32, 32), MAP, r"limit_side_len: only applies to .*LIMIT_SIDE"),
        (DETECTOR.replace("format: DBNET", "format: DETR"), (3, -1, -1), {"b": [9, 4], "s": [9, 3]}, r"DETR needs a"),
        (DETECTOR.replace("format: DBNET", "format: YOLOX"), (3, -1, -1), {"o": [-1, 85]}, r"YOLOX needs a model"),
        (DETECTOR.replace("DBNET", "DBNET iou_threshold: 0.5"), (3, -1, -1), MAP, r"DBNET does not use iou_th"),
        (DETECTOR.replace("DBNET", "DBNET clip_boxes: NO_CLIP"), (3, -1, -1), MAP, r"does not use clip_boxes: NO"),
        (DETECTOR.replace("DBNET", "DBNET multi_label: true"), (3, -1, -1), MAP, r"does not use multi_label"),
        (DETECTOR.replace("DBNET", "YOLOV8 dbnet { }"), (3, -1, -1), {"o": [84, -1]}, r"dbnet: only applies to"),
        (DETECTOR.replace("DBNET", "DBNET dbnet { binarize_threshold: 2 }"), (3, -1, -1), MAP, r"within 0..1"),
        (DETECTOR.replace("resize", "device: GPU resize"), (3, -1, -1), MAP, r"device: not available with .*LIMIT"),
        (DETECTOR.replace("LIMIT_SIDE limit_side_len: 736", "LETTERBOX"), (3, 64, 64), MAP, r"DBNET .* not LETTERBOX"),
        (DETECTOR.replace("resize", "draft_decode: true resize"), (3, -1, -1), MAP, r"draft_decode: not available"),
        (ANGLE, (3, -1, 192), {"p": [2]}, r"TEXT_LINE needs a fixed input height"),
        (ANGLE.replace("resize", "pad_value: 114 resize"), (3, 48, 192), {"p": [2]}, r"pads with zeros after"),
        (ANGLE.replace("resize", "text_line_min_width: 64 resize"), (3, 48, 192), {"p": [2]}, r"dynamic width"),
        (RECOGNIZER.replace("resize", "text_line_max_width: 100 resize"), (3, 48, -1), CLASSES, r"below text_line"),
        (RECOGNIZER, (3, 48, -1), CLASSES, r"needs its dictionary as label_filename"),
        (RECOGNIZER, (3, 48, -1), {"probabilities": [-1, 7]}, r"has 7 classes, but blank \+ 3 dictionary"),
        (RECOGNIZER, (3, 48, -1), {"probabilities": [7]}, r"must be \[T, classes\] per line"),
        (RECOGNIZER.replace("text_recognition { }", "text_recognition { } embedding { }"), (3, 48, -1), CLASSES, "one"),
    ],
)
def test_unsupported_combinations_fail_the_load(
    image: str, input_dims: tuple[int, ...], outputs: dict[str, list[int]], message: str
) -> None:
    labels = DICTIONARY if "dictionary as label" not in message else None
    with pytest.raises(ModelLoadError, match=message):
        pipeline(image, input_dims, outputs, labels=labels)


def test_variable_size_steps_are_refused_in_ensembles() -> None:
    from ferry.backends.vision_steps.images import decode_preprocess_step

    config = text_format.Parse(
        """
        backend: "ferry_vision" max_batch_size: 4
        input [ { name: "IMAGE" data_type: TYPE_STRING dims: [ 1 ] } ]
        output [ { name: "TENSOR" data_type: TYPE_FP32 dims: [ 3, -1, -1 ] } ]
        parameters { key: "step" value { string_value: "decode_preprocess" } }
        parameters { key: "preprocess" value { string_value: "resize: LIMIT_SIDE limit_side_len: 736" } }
        """,
        mc.ModelConfig(),
    )
    with pytest.raises(ModelLoadError, match="LIMIT_SIDE gives tensors of varying size"):
        decode_preprocess_step(config)


@pytest.mark.parametrize("name", ["text", "page_wide_strip", "rendered_lines"])
def test_limit_side_tensor_is_the_ocr_detector_tensor(name: str) -> None:
    """Same size rule (``sizes.limit_side``) and pixels: the normalisation differs only in float32
    rounding ((p * 2/255) - 1 folded into one multiply-add, against (p / 255 - 0.5) / 0.5)."""
    encoded = ocr.photos()[name]
    prepared = pipeline(DETECTOR, (3, -1, -1), MAP).prepare([encoded])
    expected = tensors.detector_tensor(ocr.bgr(encoded), 736, sizes.LimitType.MIN)
    assert isinstance(prepared.batch, list) and expected is not None
    assert prepared.batch[0].shape == expected.shape
    np.testing.assert_allclose(prepared.batch[0], expected, rtol=0, atol=2e-7)
    transform = prepared.transforms[0]
    height, width = ocr.bgr(encoded).shape[:2]
    assert (transform.original_width, transform.original_height) == (width, height)
    assert (transform.input_width, transform.input_height) == (expected.shape[2], expected.shape[1])


def test_limit_side_refuses_an_image_that_rounds_to_nothing() -> None:
    tiny = pipeline(
        DETECTOR.replace("736", "8").replace("LIMIT_SIDE", "LIMIT_SIDE limit_type: LIMIT_MAX"), (3, -1, -1), MAP
    )
    with pytest.raises(InvalidArgument, match="a 10x10 image rounds to nothing under limit_side_len 8"):
        tiny.prepare([png(np.zeros((10, 10, 3), np.uint8))])


@pytest.mark.parametrize("size", [(13, 18), (17, 41), (58, 123), (20, 400), (48, 6000)])
def test_text_line_tensors_are_the_ocr_line_tensors(size: tuple[int, int]) -> None:
    """TEXT_LINE at a fixed width (the angle classifier's 192) and a dynamic one (the recogniser's:
    max(320, int(48 * w / h))), against ``tensors.text_line_tensor`` on the same line."""
    height, width = size
    rgb = np.random.default_rng(height * width).integers(0, 256, (height, width, 3), dtype=np.uint8)
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    angle = pipeline(ANGLE, (3, 48, 192), {"p": [2]}).prepare([png(rgb)])
    assert isinstance(angle.batch, np.ndarray)
    np.testing.assert_allclose(angle.batch[0], tensors.text_line_tensor(bgr, 48, 192), rtol=0, atol=2e-7)
    recognizer = pipeline(RECOGNIZER, (3, 48, -1), CLASSES, labels=DICTIONARY).prepare([png(rgb)])
    assert isinstance(recognizer.batch, list)
    expected_width = min(sizes.recognition_width([width / height], 48, 320), 4096)
    expected = tensors.text_line_tensor(bgr, 48, expected_width)
    assert recognizer.batch[0].shape == (3, 48, expected_width)
    np.testing.assert_allclose(recognizer.batch[0], expected, rtol=0, atol=2e-7)


def test_images_of_different_sizes_never_share_an_execution() -> None:
    detector = pipeline(DETECTOR, (3, -1, -1), MAP, max_batch_size=2)
    small, large = np.zeros((3, 32, 64), np.float32), np.zeros((3, 64, 32), np.float32)
    runs = detector.executions([small, small, small, large, small])
    assert [(r.start, r.stop, t.shape) for r, t in runs] == [
        (0, 2, (2, 3, 32, 64)),
        (2, 3, (1, 3, 32, 64)),
        (3, 4, (1, 3, 64, 32)),
        (4, 5, (1, 3, 32, 64)),
    ]
    unbatched = pipeline(DETECTOR, (1, 3, -1, -1), {"map": [1, 1, -1, -1]}, max_batch_size=0)
    assert [t.shape for _, t in unbatched.executions([small, small])] == [(1, 3, 32, 64), (1, 3, 32, 64)]


def test_recognition_decodes_ctc_into_text_tensors() -> None:
    recognizer = pipeline(RECOGNIZER, (3, 48, -1), CLASSES, labels=DICTIONARY)
    steps = np.zeros((2, 6, 5), np.float32)
    # line 0: a a blank b space c -> "ab c"; line 1: only blanks -> "" with confidence 0
    for t, c in enumerate([1, 1, 0, 2, 4, 3]):
        steps[0, t, c] = 0.9
    steps[1, :, 0] = 1.0
    lines = recognizer.recognize({"probabilities": steps})
    assert lines == [("ab c", pytest.approx(0.9)), ("", 0.0)]
    decoded = recognition_tensors(lines)
    assert decoded["TEXT"].tolist() == [b"ab c", b""] and decoded["TEXT_SCORE"].dtype == np.float32
    assert recognise(steps, recognizer.characters or []) == lines
    assert set(recognizer.decoded_outputs) == {"TEXT", "TEXT_SCORE"} and recognizer.task == "recognize"


def test_dbnet_detections_carry_quadrilaterals_in_original_pixels() -> None:
    """A hand-made map with two text blocks (the upper one surer), decoded through the pipeline:
    quadrilaterals inside the 64x32 original, their boxes bounding them, scores from the map."""
    detector = pipeline(DETECTOR, (3, -1, -1), MAP)
    probability = np.zeros((1, 1, 64, 128), np.float32)
    probability[0, 0, 8:20, 10:60] = 0.9
    probability[0, 0, 40:52, 70:120] = 0.8
    prepared = detector.prepare([png(np.zeros((32, 64, 3), np.uint8))])  # mapped back at half size
    found = detector.detect({"map": probability}, prepared.transforms)[0]
    assert len(found) == 2
    for detection in found:
        assert detection.polygon is not None and len(detection.polygon) == 4
        xs, ys = [x for x, _ in detection.polygon], [y for _, y in detection.polygon]
        assert detection.box == (min(xs), min(ys), max(xs), max(ys))
        assert min(xs) >= 0 and max(xs) <= 63 and min(ys) >= 0 and max(ys) <= 31
    order = reading.reading_order(np.array([d.polygon for d in found]))
    upper, lower = (found[i] for i in order)
    assert 0.9 >= upper.score > lower.score > 0.5  # the mean over the rectangle, its border included
    tensors_out = detector.detection_tensors({"map": probability}, prepared.transforms)
    assert tensors_out["num_detections"].tolist() == [[2]]
    assert tensors_out["detection_polygons"].shape == (1, 1000, 4, 2)
    with pytest.raises(InvalidArgument, match="applies no NMS"):
        detector.detect({"map": probability}, prepared.transforms, iou_threshold=0.5)


def test_calibration_batches_of_a_variable_size_input_keep_one_size_each(tmp_path) -> None:
    """``ferry optimize`` calibrates on pre-processed batches: a variable-size input gives one per
    run of one size (never stacks tensors of different sizes)."""
    from ferry.optimize.calibration import image_batches

    files = []
    for index, (height, width) in enumerate([(40, 60), (40, 60), (70, 30)]):
        path = tmp_path / f"{index}.png"
        path.write_bytes(png(np.full((height, width, 3), 200, np.uint8)))
        files.append(path)
    detector = pipeline(DETECTOR.replace("736", "64"), (3, -1, -1), MAP)
    batches = list(image_batches(detector, files, batch_size=3))
    assert [(batch.shape, len(transforms)) for batch, transforms in batches] == [
        ((2, 3, 64, 96), 2),
        ((1, 3, 160, 64), 1),
    ]


def test_pad_to_batch_pads_right_and_bottom_and_dbnet_reads_each_images_region() -> None:
    detector = pipeline(DETECTOR.replace("LIMIT_SIDE", "LIMIT_SIDE pad_to_batch: true"), (3, -1, -1), MAP)
    small, tall = np.ones((3, 32, 64), np.float32), np.full((3, 64, 32), 2.0, np.float32)
    [(images, batch)] = detector.executions([small, tall])
    assert (images.start, images.stop) == (0, 2) and batch.shape == (2, 3, 64, 64)
    pad = -1.0  # pad_value 0 normalised: (0 - 0.5) / 0.5
    assert np.all(batch[0, :, :32, :64] == 1.0) and np.all(batch[0, :, 32:, :] == pad)
    assert np.all(batch[1, :, :, :32] == 2.0) and np.all(batch[1, :, :, 32:] == pad)
    # the map of a padded image: text only in its own region, noise in the padding is not read
    probability = np.zeros((1, 1, 64, 128), np.float32)
    probability[0, 0, 8:20, 10:60] = 0.9
    prepared = detector.prepare([png(np.zeros((32, 64, 3), np.uint8))])
    alone = detector.detect({"map": probability}, prepared.transforms)[0]
    transform = prepared.transforms[0]
    padded = np.zeros((1, 1, transform.input_height + 40, transform.input_width + 50), np.float32)
    padded[0, 0, : transform.input_height, : transform.input_width] = np.asarray(
        __import__("cv2").resize(probability[0, 0], (transform.input_width, transform.input_height))
    )
    padded[0, 0, transform.input_height :, :] = 0.95  # would be text if it were read
    unpadded = padded[:, :, : transform.input_height, : transform.input_width]
    assert (
        detector.detect({"map": padded}, prepared.transforms)[0]
        == detector.detect({"map": unpadded}, prepared.transforms)[0]
    )
    assert len(alone) == 1
    angle_refused = ANGLE.replace("resize", "pad_to_batch: true resize")
    with pytest.raises(ModelLoadError, match="pad_to_batch: only applies to a variable-size input"):
        pipeline(angle_refused, (3, 48, 192), {"p": [2]})
