"""``/docs`` works without internet access: every script, stylesheet and icon the Swagger UI page
loads comes from the server itself and answers 200, and so does the OpenAPI document it reads."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from html.parser import HTMLParser

from ..conftest import RunningServer


class _AssetLinks(HTMLParser):
    """Every URL the page loads by itself: script src, link href, img src."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = {"script": "src", "link": "href", "img": "src"}.get(tag)
        for name, value in attrs:
            if name == wanted and value:
                self.urls.append(value)


def _get(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=30) as reply:
        return reply.status, reply.headers.get("content-type", ""), reply.read()


def test_docs_page_loads_only_local_assets(server: RunningServer) -> None:
    status, kind, body = _get(f"http://{server.http_url}/docs")
    assert status == 200 and kind.startswith("text/html")
    page = body.decode()
    links = _AssetLinks()
    links.feed(page)
    assert {u.rsplit("/", 1)[-1] for u in links.urls} >= {"swagger-ui-bundle.js", "swagger-ui.css"}, links.urls
    spec_urls = re.findall(r"url: '([^']+)'", page)
    assert spec_urls == ["/openapi.json"], spec_urls
    for url in [*links.urls, *spec_urls]:
        assert url.startswith("/") and not url.startswith("//"), f"{url} is not served by Ferry"
        status, _, content = _get(f"http://{server.http_url}{url}")
        assert status == 200 and content, url
    assert "cdn" not in page.lower()


def test_redoc_is_not_offered_from_a_cdn(server: RunningServer) -> None:
    try:
        status = _get(f"http://{server.http_url}/redoc")[0]
    except urllib.error.HTTPError as exc:
        status = exc.code
    assert status == 404
