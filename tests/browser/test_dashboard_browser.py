"""The dashboard in a real browser against a real server: it lists the bundled models, its charts
move when requests arrive, an uploaded digit gets the right top-1, a detection scene gets boxes drawn
where the server found them, a 401 brings up the token prompt, and everything works by keyboard."""

from __future__ import annotations

import io
import json
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import httpx
import numpy as np
import pytest
from PIL import Image

from ferry.backends.registry import normalise_platform
from ferry.repository.config import parse_config_text

from .. import ocr_reference
from ..conftest import MODEL_REPO, ROOT, detector_module, start_server
from .conftest import PLAYWRIGHT_MISSING

sync_api = pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING)
expect = sync_api.expect

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
sys.path.insert(0, str(ROOT / "clients" / "examples"))  # make_images, for the sample text line


@pytest.fixture(scope="module")
def dashboard(browser, server) -> Iterator[dict]:
    """One page on the dashboard, with everything it requested and every console error recorded."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    record = {"page": page, "base": f"http://{server.http_url}/", "requests": [], "errors": []}
    page.on("request", lambda request: record["requests"].append(request.url))
    page.on("pageerror", lambda error: record["errors"].append(str(error)))
    page.on("console", lambda message: message.type == "error" and record["errors"].append(message.text))
    page.goto(record["base"])
    yield record
    context.close()


def bundled_models() -> dict[str, str]:
    """Name -> platform of every model in the default repository (all load with the default install)."""
    models = {}
    for path in sorted(MODEL_REPO.iterdir()):
        if path.is_dir() and not path.name.startswith((".", "_")):
            config = parse_config_text((path / "config.pbtxt").read_text(), path.name)
            models[path.name] = normalise_platform(config.platform, config.backend)
    return models


def test_page_lists_the_bundled_models(dashboard) -> None:
    page = dashboard["page"]
    for name, platform in bundled_models().items():
        row = page.locator(f'#model-rows tr[data-model="{name}"]')
        expect(row.locator("td.state")).to_have_text("v1 READY")
        expect(row.locator("td").nth(1)).to_have_text(platform)
    digits = page.locator('#model-rows tr[data-model="digits"]')
    expect(digits.locator("td").nth(2)).to_have_text("1 × CPU · cpu")
    expect(digits.locator("td").nth(3)).to_have_text("max 64 · dynamic, delay 500 µs")
    # explicit mode: the repository API is on
    expect(digits.get_by_role("button", name="Unload digits", exact=True)).to_be_visible()
    expect(page.locator("#server-state")).to_have_text("live")
    expect(page.locator("#host dt").first).to_have_text("CPU")


def test_rates_and_percentiles_follow_prometheus(dashboard) -> None:
    """stats.js in the browser's own engine: percentiles as the bucket bounds they fall under (never an
    interpolated value the buckets did not measure), the +Inf bucket, counter resets, and batch-size
    rows cut at max_batch_size."""
    results = dashboard["page"].evaluate("""async () => {
        const s = await import("./dashboard/static/stats.js");
        const h = { le: [1, 2, 4], buckets: [0, 2, 4], count: 4, sum: 9 };
        const tail = { le: [1, 2, 4], buckets: [0, 2, 4], count: 5, sum: 30 };
        const shown = (found) => s.formatBound(found?.bound ?? null, found?.beyond, String);
        return {
            q: [0.25, 0.5, 1].map((q) => shown(s.quantileBound(q, h))),
            inf: shown(s.quantileBound(0.99, tail)),
            empty: s.quantileBound(0.5, { le: [1], buckets: [0], count: 0, sum: 0 }),
            reset: [s.increase(3, 5), s.increase(5, 3)],
            window: s.histogramIncrease(tail, h),
            rows: s.batchSizeDistribution({ le: [1, 2, 4, 8, 16], buckets: [1, 1, 3, 3, 9], count: 9, sum: 0 }, 8),
        };
    }""")
    assert results["q"] == ["≤ 2", "≤ 2", "≤ 4"]
    assert results["inf"] == "> 4" and results["empty"] is None
    assert results["reset"] == [None, 2]
    assert results["window"] == {"le": [1, 2, 4], "buckets": [0, 0, 0], "count": 1, "sum": 21}
    assert results["rows"] == [
        {"label": "1", "count": 1},
        {"label": "2", "count": 0},
        {"label": "3–4", "count": 2},
        {"label": "5–8", "count": 0},
    ]


def send_digits(base: str, files: list[bytes], seconds: float, stop: threading.Event) -> None:
    """Classify digits for ``seconds``, a little faster each second: every fifth request carries four
    images (one execution of batch size 4), every tenth is a bad image (a failure)."""
    started = time.monotonic()
    with httpx.Client(base_url=base, timeout=30) as client:
        index = 0
        while time.monotonic() - started < seconds and not stop.is_set():
            if index % 5 == 4:
                client.post(
                    "v2/models/digits/classify",
                    files=[("images", (f"{i}.png", files[i], "image/png")) for i in range(4)],
                )
            else:
                client.post(
                    "v2/models/digits/classify",
                    content=files[index % len(files)],
                    headers={"Content-Type": "image/png"},
                )
            index += 1
            if index % 10 == 0:
                client.post("v2/models/digits/classify", content=b"not an image")  # a failure (OTHER)
            time.sleep(0.03 / (1 + time.monotonic() - started))


def test_charts_move_after_requests_by_keyboard(dashboard, digit_pngs) -> None:
    page = dashboard["page"]
    page.locator("body").focus()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to the model list"
    charts_button = page.get_by_role("button", name="Show charts for digits", exact=True)
    for _ in range(40):  # tab through the header and table to the digits row's Charts button
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.getAttribute('aria-label')") == "Show charts for digits":
            break
    else:
        pytest.fail("Tab never reached the Charts button of digits")
    page.keyboard.press("Enter")
    expect(charts_button).to_have_attribute("aria-pressed", "true")
    expect(page.locator("#details-title")).to_have_text("Charts: digits v1")
    throughput = page.locator("#chart-throughput canvas")
    before = throughput.screenshot()

    stop = threading.Event()
    sender = threading.Thread(target=send_digits, args=(dashboard["base"], digit_pngs[0], 6.0, stop))
    sender.start()
    try:
        page.wait_for_function(
            "() => Number(document.getElementById('details-summary').dataset.requestsPerSecond) > 1", timeout=15_000
        )
        legend = page.locator("#chart-throughput .u-legend .u-series").nth(1).locator(".u-value")
        expect(legend).not_to_have_text("–")
        assert float(legend.inner_text()) > 1
        rate = float(page.locator('#model-rows tr[data-model="digits"] td.throughput').inner_text())
        assert rate > 1
        page.wait_for_function("() => document.querySelector('#chart-failures .u-legend') !== null")
        expect(page.locator("#chart-failures .u-legend")).to_contain_text("OTHER")
        page.wait_for_function("() => !document.getElementById('details-summary').textContent.includes('p95 – ms')")
        # percentiles are shown as the bucket bounds they are, in the summary and the model table
        expect(page.locator("#details-summary")).to_contain_text(re.compile(r"p95 [≤>] [\d.]+ ms"))
        expect(page.locator('#model-rows tr[data-model="digits"] td.p95')).to_have_text(re.compile(r"^[≤>] [\d.]+$"))
        bars = page.locator("#batch-bars li")
        assert bars.count() == 7  # 1, 2, 3–4, ... 33–64 for max_batch_size 64
        expect(bars.nth(2).locator(".bar-label")).to_have_text("3–4")
        page.wait_for_function("() => Number(document.querySelectorAll('#batch-bars .bar-count')[2].textContent) > 0")
        sender.join()  # a few more seconds of traffic, so the screenshot shows a curve
    finally:
        stop.set()
        sender.join()
    assert throughput.screenshot() != before


def test_uploaded_digits_show_the_right_top1(dashboard, digit_pngs, tmp_path: Path) -> None:
    page = dashboard["page"]
    files, labels = digit_pngs
    page.select_option("#try-model", "digits")
    page.focus("#try-file")  # the file chooser is a real, focusable control (Enter opens it)
    assert page.evaluate("document.activeElement.id") == "try-file"
    for index in (0, 1, 2, 3):
        path = tmp_path / f"digit{index}.png"
        path.write_bytes(files[index])
        page.set_input_files("#try-file", str(path))
        first = page.locator("#try-result tbody tr").first
        expect(first.locator("td.label")).to_have_text(str(labels[index]))
        expect(page.locator("#try-result .latency")).to_contain_text("digits v1 answered in")
        expect(page.locator("#try-result tbody tr")).to_have_count(3)  # the config's top_k


def png_file(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def test_detection_scene_shows_boxes(dashboard, tmp_path: Path) -> None:
    page = dashboard["page"]
    scene = detector_module().held_out_scenes(count=2)[1]
    path = tmp_path / "scene.png"
    path.write_bytes(png_file(scene.image))
    expected = httpx.post(
        f"{dashboard['base']}v2/models/digit_detector/detect",
        content=path.read_bytes(),
        headers={"Content-Type": "image/png"},
    ).json()["results"][0]["detections"]
    assert {d["class_id"] for d in expected} == {int(c) for c in scene.classes}

    page.select_option("#try-model", "digit_detector")
    page.set_input_files("#try-file", str(path))
    expect(page.locator("#try-result tbody tr")).to_have_count(len(expected))
    expect(page.locator("#try-result canvas")).to_have_attribute(
        "aria-label",
        f"the uploaded image with "
        f"{len(expected)} boxes: " + ", ".join(f"{d['label']} ({d['score']:.2f})" for d in expected),
    )
    # Each box's left edge is drawn in its class colour on the canvas, where the server put the box.
    drawn = page.evaluate(
        """async (detections) => {
        const { PALETTE } = await import("./dashboard/static/charts.js");
        const canvas = document.querySelector("#try-result canvas");
        const scale = Number(canvas.dataset.scale);
        const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
        const rgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
        return detections.map((d) => {
            const colour = rgb(PALETTE[d.class_id % PALETTE.length]);
            const x = Math.round(d.box[0] * scale);
            const [top, bottom] = [d.box[1] * scale, d.box[3] * scale];
            let rows = 0, hits = 0;
            for (let y = Math.round(top + (bottom - top) * 0.3); y <= bottom - (bottom - top) * 0.3; y++) {
                rows++;
                for (let dx = -2; dx <= 2; dx++) {
                    const i = (y * canvas.width + x + dx) * 4;
                    if (colour.every((c, k) => Math.abs(pixels[i + k] - c) < 8)) { hits++; break; }
                }
            }
            return rows ? hits / rows : 0;
        });
    }""",
        expected,
    )
    assert len(drawn) == len(expected) and all(fraction >= 0.9 for fraction in drawn), drawn


def test_unload_and_load_buttons(dashboard) -> None:
    """The repository API through the page (explicit mode): unload a model, then load it back."""
    page = dashboard["page"]
    row = page.locator('#model-rows tr[data-model="identity_bf16"]')
    row.get_by_role("button", name="Unload identity_bf16").click()
    expect(page.locator("#action-status")).to_have_text("identity_bf16: unload done.")
    expect(row.locator("td.state")).to_contain_text("v1 UNAVAILABLE")
    expect(row.locator("td.state .reason")).to_have_text("v1: unloaded")
    expect(row.get_by_role("button", name="Show charts for identity_bf16")).to_have_count(0)
    row.get_by_role("button", name="Load identity_bf16").click()
    expect(page.locator("#action-status")).to_have_text("identity_bf16: load done.")
    expect(row.locator("td.state")).to_have_text("v1 READY")
    assert httpx.get(f"{dashboard['base']}v2/models/identity_bf16/ready").status_code == 200


def test_screenshot_and_only_same_origin_requests(dashboard, artifacts: Path) -> None:
    page = dashboard["page"]
    page.wait_for_timeout(1500)  # one more poll so the charts carry the latest points
    page.screenshot(path=str(artifacts / "dashboard.png"), full_page=True)
    origin = urlparse(dashboard["base"]).netloc
    foreign = [
        url
        for url in dashboard["requests"]
        if not url.startswith(("data:", "blob:")) and urlparse(url).netloc != origin
    ]
    assert not foreign, foreign
    assert not dashboard["errors"], dashboard["errors"]


TOKEN = "dashboard-test-token"


def test_token_prompt_on_401(browser, server) -> None:
    """Stand in for the server's bearer-token auth in front of the API and check the page's side:
    a 401 opens the token dialog, a rejected token asks again, the accepted one is kept for the tab
    and sent on every request; Escape leaves a banner that reopens the dialog."""
    context = browser.new_context()
    denied, allowed = [], []

    def guard(route) -> None:
        request = route.request
        path = urlparse(request.url).path
        if path == "/" or path.startswith("/dashboard/static/"):
            route.continue_()
        elif request.headers.get("authorization") == f"Bearer {TOKEN}":
            allowed.append(path)
            route.continue_()
        else:
            denied.append(path)
            route.fulfill(
                status=401,
                content_type="application/json",
                headers={"WWW-Authenticate": "Bearer"},
                body=json.dumps({"error": "missing or invalid bearer token"}),
            )

    context.route(f"http://{server.http_url}/**", guard)
    try:
        page = context.new_page()
        page.goto(f"http://{server.http_url}/")
        dialog = page.locator("#token-dialog")
        expect(dialog).to_have_attribute("open", "")
        expect(page.locator("#token-input")).to_be_focused()
        page.keyboard.type("wrong-token")
        page.keyboard.press("Enter")
        expect(page.locator("#token-message")).to_contain_text("did not accept")
        page.locator("#token-input").fill(TOKEN)
        page.keyboard.press("Enter")
        expect(dialog).not_to_have_attribute("open", "")
        expect(page.locator('#model-rows tr[data-model="digits"] td.state')).to_have_text("v1 READY")
        page.wait_for_function("() => document.getElementById('server-state').textContent === 'live'")
        assert page.evaluate("sessionStorage.getItem('ferry.dashboard.token')") == TOKEN
        assert {"/v2", "/dashboard/api/models", "/dashboard/api/metrics"} <= set(allowed)
        denied_before = len(denied)
        page.wait_for_timeout(2500)
        assert len(denied) == denied_before  # every later poll carried the token
        expect(page.locator("#token-button")).to_be_visible()

        second = context.new_page()  # a new tab has its own sessionStorage: asked again
        second.goto(f"http://{server.http_url}/")
        expect(second.locator("#token-dialog")).to_have_attribute("open", "")
        second.keyboard.press("Escape")
        expect(second.locator("#banner")).to_contain_text("needs a bearer token")
        second.get_by_role("button", name="Enter token").click()
        expect(second.locator("#token-dialog")).to_have_attribute("open", "")
    finally:
        context.close()


def test_with_the_servers_own_bearer_auth(browser, tmp_path: Path) -> None:
    """Against a server started with real token auth: the page shell loads without a token, its data
    needs one, and once the token is entered the models appear."""
    repo = tmp_path / "models"
    repo.mkdir()
    shutil.copytree(MODEL_REPO / "digits", repo / "digits")
    token = "real-server-token"
    server = start_server(
        repo,
        tmp_path / "server.log",
        env={"FERRY_AUTH_TOKENS": token},
        probe_headers={"Authorization": f"Bearer {token}"},
    )
    context = browser.new_context()
    try:
        base = f"http://{server.http_url}"
        assert httpx.get(f"{base}/dashboard/api/models").status_code == 401
        page = context.new_page()
        page.goto(f"{base}/")
        expect(page.locator("#token-dialog")).to_have_attribute("open", "")
        page.locator("#token-input").fill(token)
        page.keyboard.press("Enter")
        expect(page.locator('#model-rows tr[data-model="digits"] td.state')).to_have_text("v1 READY")
    finally:
        context.close()
        server.stop()


def test_face_keypoints_are_drawn(dashboard, tmp_path: Path) -> None:
    """face_detector returns six landmarks per face: each is a dot in the box's colour on the canvas."""
    from skimage import data

    path = tmp_path / "astronaut.png"
    path.write_bytes(png_file(data.astronaut()))
    expected = httpx.post(
        f"{dashboard['base']}v2/models/face_detector/detect",
        content=path.read_bytes(),
        headers={"Content-Type": "image/png"},
    ).json()["results"][0]["detections"]
    assert len(expected) == 1 and len(expected[0]["keypoints"]) == 6
    page = dashboard["page"]
    page.select_option("#try-model", "face_detector")
    page.set_input_files("#try-file", str(path))
    expect(page.locator("#try-result canvas")).to_have_attribute(
        "aria-label", f"the uploaded image with 1 boxes: face ({expected[0]['score']:.2f}, 6 keypoints)"
    )
    drawn = page.evaluate(
        """async (detection) => {
        const { PALETTE } = await import("./dashboard/static/charts.js");
        const canvas = document.querySelector("#try-result canvas");
        const scale = Number(canvas.dataset.scale);
        const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
        const colour = [1, 3, 5].map((i) => parseInt(PALETTE[detection.class_id % PALETTE.length].slice(i, i + 2), 16));
        return detection.keypoints.map(([x, y]) => {
            const i = (Math.round(y * scale) * canvas.width + Math.round(x * scale)) * 4;
            return colour.every((c, k) => Math.abs(pixels[i + k] - c) < 8);
        });
    }""",
        expected[0],
    )
    assert drawn == [True] * 6, drawn


def test_every_model_kind_is_offered_by_its_task(dashboard) -> None:
    """Embedding, recogniser and OCR models are offered under their own task, not as classifiers."""
    options = dashboard["page"].locator("#try-model option")
    expect(options.filter(has_text="digit_embedder")).to_have_text("digit_embedder (embedding)")
    expect(options.filter(has_text="text_recognizer")).to_have_text("text_recognizer (text recognition)")
    expect(options.filter(has_text="ocr")).to_have_text("ocr (OCR)")
    expect(options.filter(has_text="digit_detector")).to_have_text("digit_detector (detection)")
    expect(options.filter(has_text="digits (")).to_have_text("digits (classification)")


def test_embedding_shows_dimension_norm_and_plot(dashboard, digit_pngs, tmp_path: Path) -> None:
    path = tmp_path / "digit.png"
    path.write_bytes(digit_pngs[0][0])
    vector = httpx.post(
        f"{dashboard['base']}v2/models/digit_embedder/embed",
        content=path.read_bytes(),
        headers={"Content-Type": "image/png"},
    ).json()["results"][0]["embedding"]
    page = dashboard["page"]
    page.select_option("#try-model", "digit_embedder")
    page.set_input_files("#try-file", str(path))
    summary = page.locator("#try-result .result-summary dd")
    expect(summary.nth(0)).to_have_text(str(len(vector)))
    expect(summary.nth(1)).to_have_text(f"{float(np.linalg.norm(vector)):.4f}")
    plot = page.locator("#try-result canvas.embedding-plot")
    expect(plot).to_have_attribute("aria-label", re.compile(rf"^bar plot of the {len(vector)} values, from "))
    # the tallest bar (the largest |value|) reaches from the zero line to the plot's edge
    column = page.evaluate(
        """([index, length]) => {
        const canvas = document.querySelector("#try-result canvas.embedding-plot");
        const step = canvas.width / length;
        const x = Math.floor(index * step);
        const pixels = canvas.getContext("2d").getImageData(x, 0, 1, canvas.height).data;
        let painted = 0;
        for (let y = 0; y < canvas.height; y++) if (pixels[y * 4 + 3] > 0) painted++;
        return painted / canvas.height;
    }""",
        [int(np.argmax(np.abs(vector))), len(vector)],
    )
    assert column >= 0.45, column
    expect(page.locator("#try-result .latency")).to_contain_text("digit_embedder v1 answered in")


def test_recognised_text_is_shown(dashboard, tmp_path: Path) -> None:
    from make_images import LINE, text_line

    path = tmp_path / "line.png"
    path.write_bytes(png_file(text_line()))
    page = dashboard["page"]
    page.select_option("#try-model", "text_recognizer")
    page.set_input_files("#try-file", str(path))
    expect(page.locator("#try-result .recognised-text")).to_have_text(LINE)
    expect(page.locator("#try-result .result-summary dt")).to_have_text("confidence")


def test_ocr_lines_are_drawn_with_their_text(dashboard, tmp_path: Path) -> None:
    lines = ["Ferry serves OCR models", "Invoice 2024-117: 42.50 EUR"]
    page_pixels = ocr_reference.reference_module().rendered(lines, 28, ((255, 255, 255), (20, 20, 20)))
    path = tmp_path / "page.png"
    path.write_bytes(png_file(page_pixels))
    expected = httpx.post(
        f"{dashboard['base']}v2/models/ocr/ocr",
        content=path.read_bytes(),
        headers={"Content-Type": "image/png"},
        timeout=60,
    ).json()["results"][0]["lines"]
    texts = [line["text"] for line in expected]  # the model reads "OcR" and drops the spaces around digits
    assert len(texts) == 2 and texts[0].startswith("Ferry serves"), texts
    page = dashboard["page"]
    page.select_option("#try-model", "ocr")
    page.set_input_files("#try-file", str(path))
    expect(page.locator("#try-result tbody td.text")).to_have_text(texts, timeout=60_000)  # a page takes seconds
    expect(page.locator("#try-result canvas.ocr-lines")).to_have_attribute(
        "aria-label", f"the uploaded page with 2 lines: {texts[0]} | {texts[1]}"
    )
    # Each line's right edge is drawn in its colour on the canvas, where the server read the line.
    drawn = page.evaluate(
        """async (lines) => {
        const { PALETTE } = await import("./dashboard/static/charts.js");
        const canvas = document.querySelector("#try-result canvas.ocr-lines");
        const scale = Number(canvas.dataset.scale);
        const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
        const rgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
        return lines.map((line, index) => {
            const colour = rgb(PALETTE[index % PALETTE.length]);
            const [[, top], [right], [, bottom]] = line.box.slice(0, 3).map((p) => p.map((v) => v * scale));
            let rows = 0, hits = 0;
            for (let y = Math.round(top + (bottom - top) * 0.3); y <= bottom - (bottom - top) * 0.3; y++) {
                rows++;
                for (let dx = -2; dx <= 2; dx++) {
                    const i = (y * canvas.width + Math.round(right) + dx) * 4;
                    if (colour.every((c, k) => Math.abs(pixels[i + k] - c) < 8)) { hits++; break; }
                }
            }
            return rows ? hits / rows : 0;
        });
    }""",
        expected,
    )
    assert len(drawn) == 2 and all(fraction >= 0.9 for fraction in drawn), drawn
