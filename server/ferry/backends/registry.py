"""Which backend serves a model: from the config's platform/backend, or from the model file name."""

from __future__ import annotations

from pathlib import Path

from ..cli_errors import install_hint
from ..errors import ModelLoadError
from .base import Backend

_PLATFORM_BY_FILENAME = {
    "model.onnx": "onnxruntime_onnx",
    "model.plan": "tensorrt_plan",
    "model.pt": "pytorch_libtorch",
    # as Triton: a folder with only 1/model.py is a Python model (still refused unless allowed)
    "model.py": "python",
}
_PLATFORM_BY_BACKEND = {
    "onnxruntime": "onnxruntime_onnx",
    "tensorrt": "tensorrt_plan",
    "pytorch": "pytorch_libtorch",
    "ferry_vision": "ferry_vision",
    "python": "python",
}
_SUPPORTED = ("onnxruntime_onnx", "tensorrt_plan", "pytorch_libtorch", "ensemble", "ferry_vision", "python")


def platform_for_file(version_dir: Path) -> str | None:
    """Guess the platform from the default model file present in a version directory."""
    for filename, platform in _PLATFORM_BY_FILENAME.items():
        if (version_dir / filename).exists():
            return platform
    return None


def normalise_platform(platform: str, backend: str) -> str:
    """Triton accepts either ``platform`` or ``backend``; reduce both to one platform name (when
    both are given they must name the same engine, as Triton requires)."""
    if platform and backend and _PLATFORM_BY_BACKEND.get(backend) != platform:
        raise ModelLoadError(f"unexpected 'platform' and 'backend' pair, got: {platform}, {backend}")
    if platform:
        return platform
    if backend:
        try:
            return _PLATFORM_BY_BACKEND[backend]
        except KeyError:
            raise ModelLoadError(
                f"backend '{backend}' is not supported; supported: {', '.join(_PLATFORM_BY_BACKEND)}"
            ) from None
    return ""


def backend_for(platform: str) -> Backend:
    """The backend for a platform, imported only when a model needs it."""
    if platform == "onnxruntime_onnx":
        from .onnxruntime import OnnxRuntimeBackend

        return OnnxRuntimeBackend()
    if platform == "tensorrt_plan":
        from .tensorrt import TensorRTBackend  # imports nothing from TensorRT until an instance loads

        return TensorRTBackend()
    if platform == "pytorch_libtorch":
        try:
            from .pytorch import PyTorchBackend
        except ImportError as exc:
            raise ModelLoadError(
                f"platform 'pytorch_libtorch' needs torch, which could not be imported ({exc}); "
                f"install the extra: {install_hint('torch')}"
            ) from None
        return PyTorchBackend()
    if platform == "ferry_vision":
        from .vision_steps.backend import VisionStepBackend

        return VisionStepBackend()
    if platform == "python":
        from .python_backend import PythonBackend  # refuses every model unless the server allows them

        return PythonBackend()
    raise ModelLoadError(f"platform '{platform}' is not supported by this server; supported: {', '.join(_SUPPORTED)}")
