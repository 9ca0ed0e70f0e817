"""TensorRT optimization profiles from a model config (pure logic, no GPU library needed).

An engine with a dynamic batch dimension serves only the batch sizes inside its profile's
[min, max] range and runs fastest at ``opt``. Ferry derives them from the config the scheduler
obeys: min 1, max ``max_batch_size``, opt the largest ``preferred_batch_size`` (the size dynamic
batching aims for) or ``max_batch_size`` when none is given. Used to build engines
(``ferry optimize``), for the ONNX Runtime TensorRT provider's profile options, and to check
that a config fits an engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ferry_client.protocol import model_config_pb2 as mc

from ..errors import InvalidArgument, ModelLoadError

Shape = tuple[int, ...]


@dataclass(frozen=True)
class ShapeRange:
    """min / opt / max shape of one input (batch dimension included when batching)."""

    min: Shape
    opt: Shape
    max: Shape

    def contains(self, shape: Sequence[int]) -> bool:
        return len(shape) == len(self.min) and all(
            lo <= s <= hi for lo, s, hi in zip(self.min, shape, self.max, strict=True)
        )


def optimal_batch(config: mc.ModelConfig) -> int:
    preferred = list(config.dynamic_batching.preferred_batch_size) if config.HasField("dynamic_batching") else []
    return max(preferred) if preferred else config.max_batch_size


def batch_profile(config: mc.ModelConfig, input_dims: Mapping[str, Sequence[int]]) -> dict[str, ShapeRange]:
    """One profile for every input; ``input_dims`` exclude the batch dimension.

    A non-batch dimension of -1 has no size to optimise for, so it is an error (the config must
    give it, or the engine must be built by hand with its own profiles).
    """
    profile: dict[str, ShapeRange] = {}
    for name, dims in input_dims.items():
        if any(d < 0 for d in dims):
            raise ModelLoadError(
                f"input '{name}' has variable dims {list(dims)} besides the batch dimension; a TensorRT "
                "profile needs fixed sizes (declare them in config.pbtxt)"
            )
        fixed = tuple(int(d) for d in dims)
        if config.max_batch_size > 0:
            profile[name] = ShapeRange((1, *fixed), (optimal_batch(config), *fixed), (config.max_batch_size, *fixed))
        else:
            profile[name] = ShapeRange(fixed, fixed, fixed)
    return profile


def profile_option_strings(profile: Mapping[str, ShapeRange]) -> dict[str, str]:
    """ONNX Runtime TensorRT provider options ``trt_profile_{min,opt,max}_shapes``."""

    def text(pick: Callable[[ShapeRange], Shape]) -> str:
        return ",".join(f"{name}:{'x'.join(str(d) for d in pick(r))}" for name, r in profile.items())

    return {
        "trt_profile_min_shapes": text(lambda r: r.min),
        "trt_profile_opt_shapes": text(lambda r: r.opt),
        "trt_profile_max_shapes": text(lambda r: r.max),
    }


def choose_profile(profiles: Sequence[Mapping[str, ShapeRange]], shapes: Mapping[str, Sequence[int]]) -> int:
    """Index of the profile that accepts every input shape; among several, the one whose ``opt``
    batch is closest to the request's (TensorRT picks kernels per profile)."""
    fitting = [
        i
        for i, profile in enumerate(profiles)
        if all(name in profile and profile[name].contains(shape) for name, shape in shapes.items())
    ]
    if not fitting:
        ranges = "; ".join(
            ", ".join(f"{name} {list(r.min)}..{list(r.max)}" for name, r in profile.items()) for profile in profiles
        )
        given = ", ".join(f"{name} {list(shape)}" for name, shape in shapes.items())
        raise InvalidArgument(f"input shapes {given} are outside the engine's optimization profiles ({ranges})")

    def distance(index: int) -> int:
        name, shape = next(iter(shapes.items()))
        opt = profiles[index][name].opt
        return abs(opt[0] - shape[0]) if shape else 0

    return min(fitting, key=distance)


def check_config_against_profiles(
    config: mc.ModelConfig, profiles: Sequence[Mapping[str, ShapeRange]], source: str
) -> None:
    """A config whose max_batch_size some profile cannot run would fail at request time: refuse at load."""
    if not profiles:
        return
    if config.max_batch_size <= 0:
        return
    best = max(min(r.max[0] if r.max else 0 for r in profile.values()) for profile in profiles)
    lowest = min(min(r.min[0] if r.min else 0 for r in profile.values()) for profile in profiles)
    if best < config.max_batch_size:
        raise ModelLoadError(
            f"{source}: max_batch_size {config.max_batch_size} exceeds the engine's largest profile batch {best}; "
            f"lower max_batch_size or rebuild the engine"
        )
    if lowest > 1:
        raise ModelLoadError(f"{source}: the engine's profiles start at batch {lowest}, so batch 1 cannot run")
