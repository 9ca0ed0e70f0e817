"""Each detector family's decoder against an independent, loop-by-loop numpy reference written
here, MediaPipe's weighted NMS against a literal re-statement, and load-time refusal of outputs
that do not fit the configured family."""

from __future__ import annotations

import math

import numpy as np
import pytest
from google.protobuf import text_format

from ferry.errors import FerryError, ModelLoadError
from ferry.pipelines.decoders import InputSize, decoder_for
from ferry.pipelines.decoders.ssd_anchors import ssd_anchors
from ferry.pipelines.detection import decode_detections
from ferry.pipelines.nms import weighted_nms
from ferry.pipelines.preprocess import ImageTransform
from ferry.pipelines.runtime import ImagePipeline
from ferry.types import TensorSpec
from ferry_client.protocol import model_config_pb2 as mc

D = mc.FerryDetection


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def identity(width: int, height: int) -> ImageTransform:
    return ImageTransform(1.0, 1.0, 0.0, 0.0, width, height, width, height)


def spec(text: str) -> mc.FerryDetection:
    return text_format.Parse(text, D())


# ---- YOLOX ---------------------------------------------------------------------------------------


def yolox_reference(raw: np.ndarray, width: int, height: int, strides: list[int]) -> list[tuple]:
    """(x1, y1, x2, y2, score, class) per row, cell by cell."""
    rows, index = [], 0
    for stride in strides:
        for gy in range(math.ceil(height / stride)):
            for gx in range(math.ceil(width / stride)):
                r = raw[index]
                cx, cy = (r[0] + gx) * stride, (r[1] + gy) * stride
                w, h = math.exp(r[2]) * stride, math.exp(r[3]) * stride
                scores = [r[4] * p for p in r[5:]]
                best = int(np.argmax(scores))
                rows.append((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, scores[best], best))
                index += 1
    assert index == len(raw)
    return rows


@pytest.mark.parametrize(("width", "height", "strides"), [(64, 64, []), (96, 64, [8, 16, 32]), (48, 80, [4, 16])])
def test_yolox_decodes_the_raw_grid(width: int, height: int, strides: list[int]) -> None:
    levels = strides or [8, 16, 32]
    anchors = sum(math.ceil(height / s) * math.ceil(width / s) for s in levels)
    rng = np.random.default_rng(3)
    raw = np.concatenate([rng.normal(0, 1, (1, anchors, 4)), rng.uniform(0, 1, (1, anchors, 1 + 3))], axis=2).astype(
        np.float32
    )
    decoder = decoder_for(D(format=D.YOLOX, strides=strides), InputSize(width, height))
    [found] = decoder.decode([raw], 0.0)
    expected = np.array(yolox_reference(raw[0].astype(np.float64), width, height, levels))
    np.testing.assert_allclose(found.boxes, expected[:, :4], rtol=1e-6, atol=1e-4)
    np.testing.assert_allclose(found.scores, expected[:, 4], rtol=1e-6)
    assert found.classes.tolist() == expected[:, 5].astype(int).tolist()


def test_yolox_end_to_end_finds_the_planted_box() -> None:
    anchors = 8 * 8 + 4 * 4 + 2 * 2
    raw = np.zeros((1, anchors, 7), dtype=np.float32)
    cell = 8 * 8 + 4 * 2 + 1  # stride 16, row 2, column 1
    raw[0, cell] = [0.5, 0.25, math.log(2.0), math.log(1.0), 0.9, 0.1, 0.8]
    [found] = decode_detections({"o": raw}, D(format=D.YOLOX, score_threshold=0.5), ["o"], [identity(64, 64)], None)
    assert [(d.class_id, round(d.score, 4)) for d in found] == [(1, 0.72)]
    # centre ((1 + 0.5) * 16, (2 + 0.25) * 16) = (24, 36), size 32 x 16
    assert found[0].box == pytest.approx((8.0, 28.0, 40.0, 44.0))


# ---- SSD anchors and box coder -------------------------------------------------------------------

BLAZEFACE_ANCHORS = """
num_layers: 4 min_scale: 0.1484375 max_scale: 0.75 strides: [8, 16, 16, 16]
aspect_ratios: [1.0] fixed_anchor_size: true
"""


def test_blazeface_anchors_are_two_per_cell_at_stride_8_and_six_at_16() -> None:
    options = text_format.Parse(BLAZEFACE_ANCHORS, mc.FerryDetection.SsdAnchors())
    anchors = ssd_anchors(options, InputSize(128, 128))
    expected = []
    for cells, per_cell in ((16, 2), (8, 6)):
        for y in range(cells):
            for x in range(cells):
                expected += [((x + 0.5) / cells, (y + 0.5) / cells, 1.0, 1.0)] * per_cell
    np.testing.assert_allclose(anchors, np.array(expected))
    assert anchors.shape == (896, 4)


def test_ssd_anchor_scales_ratios_and_interpolation() -> None:
    options = mc.FerryDetection.SsdAnchors(
        num_layers=3, min_scale=0.2, max_scale=0.8, strides=[16, 32, 64], aspect_ratios=[1.0, 2.0]
    )
    anchors = ssd_anchors(options, InputSize(64, 64))
    scales = [0.2, 0.5, 0.8]
    expected = []
    for layer, stride in enumerate([16, 32, 64]):
        cells = 64 // stride
        following = scales[layer + 1] if layer + 1 < 3 else 1.0
        shapes = [
            (scales[layer], scales[layer]),
            (scales[layer] * math.sqrt(2), scales[layer] / math.sqrt(2)),
            (math.sqrt(scales[layer] * following),) * 2,
        ]
        for y in range(cells):
            for x in range(cells):
                expected += [((x + 0.5) / cells, (y + 0.5) / cells, w, h) for w, h in shapes]
    np.testing.assert_allclose(anchors, np.array(expected), rtol=1e-6)  # float32 options


def blazeface_spec(**fields: object) -> mc.FerryDetection:
    return (
        spec(
            f"""format: SSD anchors {{ {BLAZEFACE_ANCHORS} }}
        box_coder {{ x_scale: 128 y_scale: 128 w_scale: 128 h_scale: 128 }}
        num_keypoints: 6 score_activation: SIGMOID suppression: WEIGHTED_NMS
        score_threshold: 0.5 iou_threshold: 0.3"""
        )
        if not fields
        else D(**fields)
    )


def test_ssd_mediapipe_coder_decodes_boxes_and_keypoints() -> None:
    rng = np.random.default_rng(5)
    regressions = rng.normal(0, 20, (1, 896, 16)).astype(np.float32)
    logits = rng.normal(0, 3, (1, 896, 1)).astype(np.float32)
    decoder = decoder_for(blazeface_spec(), InputSize(128, 128))
    [found] = decoder.decode([regressions, logits], 0.0)
    anchors = ssd_anchors(text_format.Parse(BLAZEFACE_ANCHORS, mc.FerryDetection.SsdAnchors()), InputSize(128, 128))
    for row in (0, 137, 600, 895):
        r, (ax, ay, aw, ah) = regressions[0, row].astype(np.float64), anchors[row]
        cx, cy = r[0] / 128 * aw + ax, r[1] / 128 * ah + ay
        w, h = r[2] / 128 * aw, r[3] / 128 * ah
        box = np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]) * 128
        np.testing.assert_allclose(found.boxes[row], box, atol=1e-6)
        points = [((r[4 + 2 * k] / 128 * aw + ax) * 128, (r[5 + 2 * k] / 128 * ah + ay) * 128) for k in range(6)]
        np.testing.assert_allclose(found.keypoints[row], np.array(points), atol=1e-6)
        assert found.scores[row] == pytest.approx(sigmoid(float(logits[0, row, 0])), rel=1e-6)


def test_ssd_tf_object_detection_coder_with_variances() -> None:
    """TF-OD / torchvision: rows y, x, h, w; variances 0.1, 0.2 (scales 10, 5); log sizes."""
    detection = spec(
        """format: SSD anchors { num_layers: 1 min_scale: 0.3 max_scale: 0.3 strides: [32] }
        box_coder { x_scale: 10 y_scale: 10 w_scale: 5 h_scale: 5 exp_size: true yx_order: true }"""
    )
    decoder = decoder_for(detection, InputSize(64, 32))
    anchors = decoder.anchors  # 2 x 1 cells, 2 anchors each (ratio 1 and the interpolated one)
    assert anchors.shape == (4, 4)
    raw = np.array([[[0.5, -1.0, 0.3, 0.2], [0.0, 0.0, 0.0, 0.0], [1, 1, -1, -1], [-0.2, 0.4, 0.1, 0.0]]], np.float32)
    [found] = decoder.decode([raw, np.full((1, 4, 2), 0.7, np.float32)], 0.0)
    for row in range(4):
        ty, tx, th, tw = raw[0, row].astype(np.float64)
        ax, ay, aw, ah = anchors[row]
        cx, cy = tx * 0.1 * aw + ax, ty * 0.1 * ah + ay
        w, h = math.exp(tw * 0.2) * aw, math.exp(th * 0.2) * ah
        np.testing.assert_allclose(
            found.boxes[row], [(cx - w / 2) * 64, (cy - h / 2) * 32, (cx + w / 2) * 64, (cy + h / 2) * 32]
        )


# ---- weighted NMS --------------------------------------------------------------------------------


def mediapipe_weighted_nms(boxes: list, scores: list, points: list, threshold: float) -> list[tuple]:
    """A literal statement of MediaPipe's WeightedNonMaxSuppression (IoU overlap)."""

    def iou(a: list, b: list) -> float:
        w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
        return w * h / union if union > 0 else 0.0

    remained = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    out = []
    while remained:
        first = remained[0]
        candidates = [i for i in remained if iou(boxes[i], boxes[first]) > threshold]
        rest = [i for i in remained if iou(boxes[i], boxes[first]) <= threshold]
        total = sum(scores[i] for i in candidates)
        box = [sum(boxes[i][c] * scores[i] for i in candidates) / total for c in range(4)]
        kps = [[sum(points[i][k][c] * scores[i] for i in candidates) / total for c in range(2)] for k in range(2)]
        out.append((first, box, kps))
        remained = rest
    return out


def test_weighted_nms_matches_mediapipe() -> None:
    rng = np.random.default_rng(11)
    corners = rng.uniform(0, 60, (40, 2))
    boxes = np.hstack([corners, corners + rng.uniform(10, 40, (40, 2))])
    scores = rng.uniform(0.5, 1.0, 40)
    points = rng.uniform(0, 100, (40, 2, 2))
    kept, blended, blended_points = weighted_nms(boxes, scores, points, 0.3, None)
    expected = mediapipe_weighted_nms(boxes.tolist(), scores.tolist(), points.tolist(), 0.3)
    assert kept.tolist() == [first for first, _, _ in expected]
    assert len(expected) < 40  # some boxes were merged
    for first, box, kps in expected:
        np.testing.assert_allclose(blended[first], box, rtol=1e-12)
        np.testing.assert_allclose(blended_points[first], kps, rtol=1e-12)


def test_ssd_detections_carry_keypoints_in_original_pixels() -> None:
    regressions = np.zeros((1, 896, 16), dtype=np.float32)
    logits = np.full((1, 896, 1), -10.0, dtype=np.float32)
    # Two anchors of the same stride-8 cell (x 4, y 6) predict nearly the same face.
    for row, shift, logit in ((2 * (6 * 16 + 4), 0.0, 3.0), (2 * (6 * 16 + 4) + 1, 2.0, 1.0)):
        regressions[0, row, :4] = [shift, 0.0, 40.0, 30.0]
        regressions[0, row, 4:6] = [-5.0 + shift, -3.0]
        logits[0, row, 0] = logit
    half = ImageTransform(0.5, 0.5, 0.0, 0.0, 256, 256, 128, 128)
    [found] = decode_detections({"r": regressions, "c": logits}, blazeface_spec(), ["r", "c"], [half], ["face"])
    assert len(found) == 1 and found[0].label == "face"
    s1, s2 = sigmoid(3.0), sigmoid(1.0)
    centre_x = (4.5 / 16) * 128 + (2.0 * s2) / (s1 + s2)  # the blended shift
    assert found[0].score == pytest.approx(s1)
    assert found[0].box == pytest.approx(
        ((centre_x - 20) * 2, (6.5 * 8 - 15) * 2, (centre_x + 20) * 2, (6.5 * 8 + 15) * 2)
    )
    assert found[0].keypoints[0] == pytest.approx(((centre_x - 5) * 2, (6.5 * 8 - 3) * 2))


# ---- DFL (PicoDet / GFL / NanoDet) ---------------------------------------------------------------


def dfl_reference(scores: list, boxes: list, width: int, height: int, strides: list[int], top_k: int) -> list[tuple]:
    """PicoDet's post-process, level by level: softmax expectation, top-k by best class score."""
    rows = []
    for stride, level_scores, level_boxes in zip(strides, scores, boxes, strict=True):
        columns = math.ceil(width / stride)
        bins = level_boxes.shape[1] // 4
        best = level_scores.max(axis=1)
        order = sorted(range(len(best)), key=lambda i: -best[i])[:top_k]
        for cell in order:
            cx, cy = (cell % columns + 0.5) * stride, (cell // columns + 0.5) * stride
            edges = []
            for edge in range(4):
                logits = level_boxes[cell, edge * bins : (edge + 1) * bins]
                weights = np.exp(logits - logits.max())
                edges.append(float((weights / weights.sum()) @ np.arange(bins)) * stride)
            klass = int(np.argmax(level_scores[cell]))
            rows.append(
                (cx - edges[0], cy - edges[1], cx + edges[2], cy + edges[3], float(level_scores[cell, klass]), klass)
            )
    return rows


def test_dfl_decodes_every_level() -> None:
    width, height, strides, classes, bins = 64, 40, [8, 16, 32], 3, 8
    rng = np.random.default_rng(7)
    cells = [math.ceil(height / s) * math.ceil(width / s) for s in strides]
    scores = [rng.uniform(0, 1, (1, n, classes)).astype(np.float32) for n in cells]
    boxes = [rng.normal(0, 2, (1, n, 4 * bins)).astype(np.float32) for n in cells]
    detection = D(format=D.DFL, strides=strides, top_k_per_level=7)
    [found] = decoder_for(detection, InputSize(width, height)).decode(scores + boxes, 0.0)
    expected = np.array(dfl_reference([s[0] for s in scores], [b[0] for b in boxes], width, height, strides, top_k=7))
    assert len(found.boxes) == sum(min(n, 7) for n in cells)
    np.testing.assert_allclose(found.boxes, expected[:, :4], atol=1e-5)
    np.testing.assert_allclose(found.scores, expected[:, 4], rtol=1e-6)
    assert found.classes.tolist() == expected[:, 5].astype(int).tolist()


def test_dfl_multi_label_keeps_every_class_above_the_threshold() -> None:
    scores = [np.zeros((1, 4, 2), np.float32), np.zeros((1, 1, 2), np.float32)]
    scores[0][0, 1] = [0.6, 0.7]  # one cell, two classes
    boxes = [np.zeros((1, 4, 8), np.float32), np.zeros((1, 1, 8), np.float32)]
    detection = D(format=D.DFL, strides=[8, 16], multi_label=True, score_threshold=0.5, iou_threshold=0.5)
    [found] = decode_detections(
        dict(zip("abcd", scores + boxes, strict=True)), detection, list("abcd"), [identity(16, 16)], None
    )
    assert sorted((d.class_id, round(d.score, 4)) for d in found) == [(0, 0.6), (1, 0.7)]
    single = D(format=D.DFL, strides=[8, 16], score_threshold=0.5)
    [found] = decode_detections(
        dict(zip("abcd", scores + boxes, strict=True)), single, list("abcd"), [identity(16, 16)], None
    )
    assert [(d.class_id, round(d.score, 4)) for d in found] == [(1, 0.7)]


# ---- DETR / end-to-end ---------------------------------------------------------------------------


def test_detr_softmax_drops_no_object_and_skips_nms() -> None:
    boxes = np.array([[[0.5, 0.5, 0.2, 0.4], [0.51, 0.5, 0.2, 0.4], [0.1, 0.1, 0.1, 0.1]]], np.float32)
    logits = np.array([[[4.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 5.0]]], np.float32)  # last = no object
    detection = D(format=D.DETR, score_activation=D.SOFTMAX, score_threshold=0.5)
    [found] = decode_detections({"b": boxes, "l": logits}, detection, ["b", "l"], [identity(200, 100)], None)
    softmax = np.exp(logits[0]) / np.exp(logits[0]).sum(axis=1, keepdims=True)
    assert [(d.class_id, d.score) for d in found] == [
        (0, pytest.approx(softmax[0, 0])),
        (1, pytest.approx(softmax[1, 1])),
    ]  # overlapping, but a set predictor is not suppressed; the no-object query is gone
    assert found[0].box == pytest.approx((80.0, 30.0, 120.0, 70.0))


def test_detr_sigmoid_multi_label() -> None:
    boxes = np.array([[[0.5, 0.5, 0.5, 0.5]]], np.float32)
    logits = np.array([[[2.0, 1.0, -3.0]]], np.float32)
    detection = D(format=D.DETR, score_activation=D.SIGMOID, multi_label=True, score_threshold=0.5)
    [found] = decode_detections({"b": boxes, "l": logits}, detection, ["b", "l"], [identity(10, 10)], None)
    assert [(d.class_id, d.score) for d in found] == [
        (0, pytest.approx(sigmoid(2.0))),
        (1, pytest.approx(sigmoid(1.0))),
    ]


def test_end_to_end_rows_are_final() -> None:
    rows = np.array([[[10, 10, 50, 50, 0.9, 2], [12, 10, 52, 50, 0.8, 2], [0, 0, 0, 0, 0.0, 0]]], np.float32)
    [found] = decode_detections({"o": rows}, D(format=D.END_TO_END), ["o"], [identity(64, 64)], ["a", "b", "c"])
    assert [(d.label, round(d.score, 4), d.box) for d in found] == [
        ("c", 0.9, (10, 10, 50, 50)),
        ("c", 0.8, (12, 10, 52, 50)),
    ]
    [found] = decode_detections({"o": rows}, D(format=D.END_TO_END), ["o"], [identity(64, 64)], None, iou_threshold=0.5)
    assert len(found) == 1  # suppressed only when asked


# ---- load-time shape checks ----------------------------------------------------------------------


def pipeline_for(detection: str, outputs: dict[str, list[int]], size: int = 640, batched: bool = True) -> None:
    config = text_format.Parse(
        f"max_batch_size: {8 if batched else 0} ferry_image {{ detection {{ {detection} }} }}", mc.ModelConfig()
    )
    input_dims = (3, size, size)
    ImagePipeline.from_config(
        config,
        {"images": TensorSpec("images", "FP32", input_dims)},
        {name: TensorSpec(name, "FP32", tuple(dims)) for name, dims in outputs.items()},
        {},
    )


@pytest.mark.parametrize(
    ("detection", "outputs", "message"),
    [
        (
            "format: YOLOV5",
            {"o": [8400, 85]},
            r"YOLOV5 needs output 'o' .*\[\*, 25200, 85\], the model's is \[-1, 8400, 85\]",
        ),
        ("format: YOLOX", {"o": [25200, 85]}, r"YOLOX needs output 'o' .*\[\*, 8400, 85\]"),
        ("format: YOLOX", {"o": [84, 8400]}, r"YOLOX needs output 'o'"),
        ("format: YOLOV8 strides: [8, 16, 32]", {"o": [84, 8000]}, r"\[\*, 84, 8400\]"),
        ("format: END_TO_END", {"o": [300, 7]}, r"END_TO_END needs output 'o' .*\[\*, \*, 6\]"),
        ("format: DETR", {"b": [300, 4], "s": [100, 91]}, r"DETR needs output 's' .*\[\*, 300, \*\]"),
        ("format: DFL", {"a": [6400, 10], "b": [1600, 10]}, r"DFL reads 8 output\(s\).*only 2 named"),
        ("format: BOXES_SCORES_CLASSES", {"b": [100, 4], "s": [100], "c": [99]}, r"output 'c' .*\[\*, 100\]"),
        (f"format: SSD anchors {{ {BLAZEFACE_ANCHORS} }}", {"r": [896, 16], "c": [896, 1]}, r"SSD needs output 'r'"),
        ("format: SSD", {"r": [896, 16], "c": [896, 1]}, r"SSD needs an `anchors"),
    ],
)
def test_wrong_family_fails_the_load(detection: str, outputs: dict[str, list[int]], message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        pipeline_for(detection, outputs)


def test_matching_families_load() -> None:
    pipeline_for("format: YOLOV5", {"o": [25200, 85]})
    pipeline_for("format: YOLOX", {"o": [8400, 85]})
    pipeline_for("format: YOLOX", {"o": [-1, 85]})  # dynamic dims are not held against the model
    pipeline_for("format: DETR", {"b": [300, 4], "s": [300, 92]})
    blazeface = f"format: SSD num_keypoints: 6 anchors {{ {BLAZEFACE_ANCHORS} }}"
    pipeline_for(blazeface, {"r": [1, 896, 16], "c": [1, 896, 1]}, size=128, batched=False)
    cells = {f"s{s}": [math.ceil(800 / s) * math.ceil(608 / s), 10] for s in (8, 16, 32, 64)}
    config = text_format.Parse("max_batch_size: 0 ferry_image { detection { format: DFL } }", mc.ModelConfig())
    outputs = {name: TensorSpec(name, "FP32", (1, *dims)) for name, dims in cells.items()}
    outputs |= {f"d{name}": TensorSpec(f"d{name}", "FP32", (1, dims[0], 32)) for name, dims in cells.items()}
    pipeline = ImagePipeline.from_config(config, {"image": TensorSpec("image", "FP32", (3, 800, 608))}, outputs, {})
    assert pipeline is not None and pipeline.decoder is not None


@pytest.mark.parametrize("family", ["format: YOLOX", "format: DFL", f"format: SSD anchors {{ {BLAZEFACE_ANCHORS} }}"])
def test_grid_families_refuse_an_input_without_a_size(family: str) -> None:
    """The image pipeline already insists on a fixed input size; the decoders do not rely on it."""
    with pytest.raises(FerryError, match="needs a model input of fixed height and width"):
        decoder_for(spec(family), InputSize(0, 0))


def test_wrong_keypoint_count_is_named() -> None:
    blazeface = f"format: SSD num_keypoints: 5 anchors {{ {BLAZEFACE_ANCHORS} }}"
    with pytest.raises(ModelLoadError, match=r"\[\*, 896, 14\], the model's is \[1, 896, 16\]"):
        pipeline_for(blazeface, {"r": [1, 896, 16], "c": [1, 896, 1]}, size=128, batched=False)


def test_served_outputs_are_checked_too() -> None:
    decoder_spec = D(format=D.YOLOX)
    with pytest.raises(FerryError, match="YOLOX needs output 'o'"):
        decode_detections({"o": np.zeros((1, 80, 7))}, decoder_spec, ["o"], [identity(64, 64)], None)
