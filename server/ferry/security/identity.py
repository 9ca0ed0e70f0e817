"""Who a caller is, for what the server keeps on a caller's behalf (shared memory regions).

With bearer tokens the identity is a digest of the caller's token, so two token holders never see
each other's regions and the token itself is never stored; without auth every caller is the same
anonymous client (nothing tells them apart). Front doors compute it from the Authorization header
or metadata after the auth check let the call through, so only valid tokens reach here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from ..types import ANONYMOUS
from .tokens import bearer_token

#: ``Authorization`` value (or None) -> the caller's identity.
Identify = Callable[[str | bytes | None], str]


def anonymous(_authorization: str | bytes | None) -> str:
    """Every caller is the same client: the server runs without auth."""
    return ANONYMOUS


def token_identity(authorization: str | bytes | None) -> str:
    """``token:`` and a digest of the bearer token; a call without one is anonymous."""
    token = bearer_token(authorization)
    if token is None:
        return ANONYMOUS
    return "token:" + hashlib.sha256(token).hexdigest()[:32]
