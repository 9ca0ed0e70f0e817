"""Reading a running server's Prometheus metrics, and waiting until one reaches a value.

Tests wait on these instead of sleeping: a state the server reports is a state that exists."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request


def scrape(server, headers: dict[str, str] | None = None) -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{server.metrics_port}/metrics", headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode()


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample (``name`` with exactly ``labels``) in a scrape."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.match(rf"^{name}(?:\{{(.*)\}})? (\S+)$", line)
        if match and ",".join(sorted((match.group(1) or "").split(","))).strip(",") == wanted:
            return float(match.group(2))
    raise AssertionError(f"{name}{{{wanted}}} not in /metrics")


async def wait_for_metric(
    server,
    name: str,
    target: float,
    timeout: float = 60,
    headers: dict[str, str] | None = None,
    at_most: bool = False,
    **labels: str,
) -> float:
    """Poll /metrics until ``name`` reaches ``target`` (or falls to it, ``at_most``); fail (never
    pass) when it does not in time."""
    deadline = time.monotonic() + timeout
    while True:
        value = metric(await asyncio.to_thread(scrape, server, headers), name, **labels)
        if (value <= target) if at_most else (value >= target):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}{labels} stayed at {value}, not reaching {target}, for {timeout} s")
        await asyncio.sleep(0.05)
