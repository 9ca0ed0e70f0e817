"""Bearer tokens: read from a file and/or the environment, checked in constant time.

The file is re-read when it changes (at most once a second), so a rotated Kubernetes secret takes
effect without a restart. A token file that becomes unreadable keeps the last good tokens: auth
never silently turns off.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from .errors import SecurityConfigError

log = logging.getLogger(__name__)

#: RFC 6750 ``b64token``: what may follow ``Bearer `` in an Authorization header.
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_RECHECK_SECONDS = 1.0


class TokenError(SecurityConfigError):
    """A token source that cannot be used (unreadable file, malformed token, no tokens at all)."""


def parse_tokens(text: str, source: str) -> list[str]:
    """Tokens separated by newlines, commas or spaces; ``#`` starts a comment."""
    tokens = []
    for number, line in enumerate(text.splitlines(), 1):
        for token in re.split(r"[\s,]+", line.split("#", 1)[0]):
            if not token:
                continue
            if not _B64TOKEN.fullmatch(token):
                raise TokenError(
                    f"{source}:{number}: a token may only hold letters, digits and -._~+/ "
                    "(and trailing =), as RFC 6750 allows in a bearer token"
                )
            tokens.append(token)
    return tokens


def _digest(token: str | bytes) -> bytes:
    """Compare digests, not tokens, so the comparison time does not depend on the token length."""
    return hashlib.sha256(token.encode() if isinstance(token, str) else token).digest()


class TokenStore:
    """The set of accepted tokens. ``check`` compares against every token without stopping early."""

    def __init__(self, tokens: Iterable[str] = (), token_file: Path | None = None) -> None:
        self._fixed = [_digest(t) for t in tokens]
        self._file = token_file
        self._file_digests: list[bytes] = []
        self._file_stamp: tuple[int, int] | None = None
        self._next_check = 0.0
        self._lock = threading.Lock()
        if token_file is not None:
            self._file_digests = self._read_file()
        if not self._fixed and not self._file_digests:
            where = f"the token file {token_file}" if token_file else "FERRY_AUTH_TOKENS"
            raise TokenError(f"authentication is enabled but {where} holds no token")

    @classmethod
    def from_options(cls, token_file: Path | None, env_tokens: str | None) -> TokenStore | None:
        """The store for the server options, or None when no token source is configured (auth off)."""
        if token_file is None and not env_tokens:
            return None
        return cls(parse_tokens(env_tokens or "", "FERRY_AUTH_TOKENS"), token_file)

    def _read_file(self) -> list[bytes]:
        assert self._file is not None
        try:
            stat = self._file.stat()
            text = self._file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenError(f"cannot read the token file {self._file}: {exc}") from None
        self._file_stamp = (stat.st_mtime_ns, stat.st_size)
        return [_digest(t) for t in parse_tokens(text, str(self._file))]

    def _refresh(self) -> None:
        """Re-read the token file if it changed since the last look (cheap: one stat a second)."""
        now = time.monotonic()
        if self._file is None or now < self._next_check:
            return
        with self._lock:
            self._next_check = now + _RECHECK_SECONDS
            try:
                stat = self._file.stat()
                if (stat.st_mtime_ns, stat.st_size) == self._file_stamp:
                    return
                self._file_digests = self._read_file()
                log.info("reloaded %d bearer token(s) from %s", len(self._file_digests), self._file)
            except (OSError, TokenError) as exc:
                log.error("keeping the previous bearer tokens: %s", exc)

    def check(self, presented: str | bytes) -> bool:
        """Whether ``presented`` is one of the tokens; takes the same time whichever token (if any) matches."""
        self._refresh()
        candidate = _digest(presented)
        matched = False
        for digest in (*self._fixed, *self._file_digests):
            matched |= hmac.compare_digest(candidate, digest)
        return matched


def bearer_token(authorization: str | bytes | None) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` value (scheme case-insensitive), else None."""
    if not authorization:
        return None
    value = authorization.encode("utf-8", "replace") if isinstance(authorization, str) else authorization
    scheme, _, token = value.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    token = token.strip()
    return token or None
