"""Ferry client: KServe V2 / Triton-compatible HTTP and gRPC clients and the tensor codec."""

__version__ = "0.1.0"
