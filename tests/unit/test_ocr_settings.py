"""An OCR model's ``parameters``: RapidOCR's defaults where left out, overrides parsed by type,
and a load error naming the key for anything unknown or malformed."""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from ferry.errors import ModelLoadError
from ferry.ocr.settings import ocr_settings
from ferry.pipelines.text.reading import CropWarp, ReadingOrder
from ferry.pipelines.text.sizes import LimitType
from ferry_client.protocol import model_config_pb2 as mc


def config(**parameters: str) -> mc.ModelConfig:
    text = 'name: "ocr" platform: "ferry_ocr"\n' + "\n".join(
        f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}' for key, value in parameters.items()
    )
    return text_format.Parse(text, mc.ModelConfig())


def test_left_out_parameters_take_rapidocr_defaults() -> None:
    settings = ocr_settings(config(), "ocr/config.pbtxt")
    assert (settings.detector, settings.angle_classifier, settings.recognizer) == (
        "text_detector",
        "text_angle",
        "text_recognizer",
    )
    assert (settings.limit_side_len, settings.limit_type) == (736, LimitType.MIN)
    assert (settings.db.binarize_threshold, settings.db.box_threshold, settings.db.unclip_ratio) == (0.3, 0.5, 1.6)
    assert settings.db.dilate and not settings.db.slow_score
    assert settings.reading_order == ReadingOrder.NEIGHBOUR_SWAP  # 1.4.4's RapidOCR.sorted_boxes
    assert settings.crop_warp == CropWarp.OPENCV  # the installed (pinned) OpenCV's warpPerspective
    assert (settings.page.text_score, settings.page.angle_threshold, settings.page.recognition_batch) == (0.5, 0.9, 6)


def test_overrides_are_parsed_by_type() -> None:
    settings = ocr_settings(
        config(
            recognizer="my_rec",
            limit_type="max",
            limit_side_len="960",
            dilate="false",
            unclip_ratio="2",
            reading_order="line_groups",
            crop_warp="opencv_4_10",
        ),
        "ocr/config.pbtxt",
    )
    assert settings.recognizer == "my_rec"
    assert settings.reading_order == ReadingOrder.LINE_GROUPS
    assert settings.crop_warp == CropWarp.OPENCV_4_10
    assert (settings.limit_side_len, settings.limit_type) == (960, LimitType.MAX)
    assert settings.db.dilate is False and settings.db.unclip_ratio == 2.0


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"unclip": "1.6"}, "does not know parameters unclip"),
        ({"box_threshold": "high"}, "'box_threshold' must be a float, got 'high'"),
        ({"dilate": "yes"}, "'dilate' must be a bool"),
        ({"limit_type": "long"}, "'limit_type' must be min or max"),
        ({"reading_order": "lines"}, "'reading_order' must be one of contour_order, neighbour_swap, line_groups"),
        ({"crop_warp": "numpy"}, "'crop_warp' must be one of opencv, opencv_4_10"),
        ({"recognition_batch": "0"}, "must be within 1..256"),
    ],
)
def test_unknown_or_malformed_parameters_fail_the_load(parameters: dict[str, str], message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        ocr_settings(config(**parameters), "ocr/config.pbtxt")


def test_a_pages_bounds_default_to_the_page_size_and_are_checked() -> None:
    settings = ocr_settings(config(), "ocr/config.pbtxt")
    assert (settings.page.max_detector_pixels, settings.page.max_text_boxes) == (8_000_000, 500)
    smaller = ocr_settings(config(max_side="1000", max_text_boxes="20"), "ocr/config.pbtxt")
    assert (smaller.page.max_detector_pixels, smaller.page.max_text_boxes) == (2_000_000, 20)
    for key, value in (("max_text_boxes", "0"), ("max_detector_pixels", "-1")):
        with pytest.raises(ModelLoadError, match=key):
            ocr_settings(config(**{key: value}), "ocr/config.pbtxt")
