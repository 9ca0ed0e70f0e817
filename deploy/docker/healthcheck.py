"""Container health check: exit 0 when Ferry answers 200 on /v2/health/ready, 1 otherwise.

Used by the images' HEALTHCHECK (the slim and CUDA images have no curl). Reads the port from
FERRY_HTTP_PORT like the server does, and speaks HTTPS when FERRY_TLS_CERT is set (without checking
the certificate: it only talks to its own container). With bearer-token auth, start the server with
FERRY_AUTH_PUBLIC_HEALTH=true. Standard library only, one short line on failure.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.error
import urllib.request


def main() -> int:
    port = os.environ.get("FERRY_HTTP_PORT", "8000").strip() or "8000"
    context = None
    if os.environ.get("FERRY_TLS_CERT"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    url = f"{'https' if context else 'http'}://127.0.0.1:{port}/v2/health/ready"
    timeout = float(os.environ.get("FERRY_HEALTHCHECK_TIMEOUT", "3"))
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as reply:
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
