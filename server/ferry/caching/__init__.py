"""The response cache: model outputs remembered by request content (Triton's ``response_cache``)."""

from .keys import images_key, request_key
from .response_cache import CacheCounters, ResponseCache

__all__ = ["CacheCounters", "ResponseCache", "images_key", "request_key"]
