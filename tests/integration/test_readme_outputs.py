"""The README's example outputs are what the current server answers, and the sample images it names
can be made (clients/examples/make_images.py, readme_outputs.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import ModuleType

import pytest

from ..conftest import ROOT, RunningServer

EXAMPLES = ROOT / "clients" / "examples"


@pytest.fixture(scope="module")
def readme_outputs() -> Iterator[ModuleType]:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import readme_outputs

        yield readme_outputs
    finally:
        sys.path.remove(str(EXAMPLES))


def test_readme_shows_what_the_server_answers(server: RunningServer, readme_outputs: ModuleType) -> None:
    shown = readme_outputs.current_block(readme_outputs.README.read_text())
    assert shown, "README.md lost the readme_outputs.py markers"
    generated = readme_outputs.block(server.http_url)
    assert shown == generated, (
        "README.md's example outputs are stale: run python clients/examples/readme_outputs.py HOST:PORT --write"
    )


def test_every_sample_image_the_docs_name_is_made(readme_outputs: ModuleType) -> None:
    from make_images import example_images

    made = example_images()
    docs = (ROOT / "README.md").read_text() + (EXAMPLES / "README.md").read_text()
    for name in ("digit.png", "seven.png", "scene.png", "photo.jpg", "scan.png", "line.png"):
        assert name in docs and made[name][:4] in (b"\x89PNG", b"\xff\xd8\xff\xe0"), name
