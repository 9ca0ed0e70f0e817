"""The response cache: model outputs remembered by request content (Triton's ``response_cache``)."""

from .keys import images_key, request_key
from .response_cache import CacheCounters, ResponseCache
from .sizes import entry_size

__all__ = ["CacheCounters", "ResponseCache", "entry_size", "images_key", "request_key"]
