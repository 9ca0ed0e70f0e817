"""Detector families: each module turns one family's raw outputs into candidate boxes.

``registry.decoder_for`` picks the family from ``FerryDetection.format``; adding a family is one
module here, one line in the registry and its tests.
"""

from __future__ import annotations

from .base import Candidates, Decoder, InputSize
from .registry import decoder_for

__all__ = ["Candidates", "Decoder", "InputSize", "decoder_for"]
