"""Ferry: an inference server for computer-vision models."""

__version__ = "0.1.0"
