"""Container health check: exit 0 when Ferry answers 200 on /v2/health/ready, 1 otherwise.

Used by the images' HEALTHCHECK (the slim and CUDA images have no curl). Reads the port from
FERRY_HTTP_PORT like the server does; standard library only, one short line on failure.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def main() -> int:
    port = os.environ.get("FERRY_HTTP_PORT", "8000").strip() or "8000"
    url = f"http://127.0.0.1:{port}/v2/health/ready"
    try:
        with urllib.request.urlopen(url, timeout=float(os.environ.get("FERRY_HEALTHCHECK_TIMEOUT", "3"))) as reply:
            ok = reply.status == 200
    except urllib.error.HTTPError as exc:
        print(f"{url}: HTTP {exc.code}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"{url}: {exc}", file=sys.stderr)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
