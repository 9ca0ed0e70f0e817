"""A loaded model version: its spec (completed config, tensor specs, labels, pipeline) and its
executor (instances and scheduler)."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import numpy as np

from ferry_client.codec import datatype_from_config, numpy_dtype
from ferry_client.protocol import model_config_pb2 as mc

from ..backends import InstanceSpec, backend_for
from ..backends.base import Backend, Instance, RequestBatchInstance
from ..backends.registry import normalise_platform, platform_for_file
from ..config_ranges import WORKING_MEMORY_RANGE
from ..cores import engine_threads
from ..errors import FerryError, ModelLoadError
from ..paths import inside
from ..pipelines.runtime import ImagePipeline
from ..scheduling.interface import ModelScheduler
from ..scheduling.policy import SchedulingPolicy
from ..scheduling.request_batches import RequestBatchScheduler
from ..scheduling.scheduler import Scheduler
from ..statistics import ModelStats
from .autocomplete import complete_config
from .config import TensorSpec, output_labels, tensor_specs, validate_config
from .embedded_labels import embedded_class_names

log = logging.getLogger(__name__)

#: Load generations: every ModelVersion built in this process gets the next one.
_load_generations = itertools.count(1)


@dataclass(frozen=True)
class ModelSpec:
    """What a loaded model is, as validation and the stages read it: its identity, completed
    config, tensor specs, labels and image pipeline, nothing that executes. A ``ModelVersion`` is
    one with its executor (scheduler, instances, statistics)."""

    name: str
    version: int
    config: mc.ModelConfig
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    labels: dict[str, list[str]]
    pipeline: ImagePipeline | None = field(default=None, repr=False)
    # Ensembles: the models the version runs.
    composing_models: tuple[str, ...] = ()
    #: The config's ``max_variable_elements`` parameter: elements per batch item of an input with
    #: -1 dims (0: the server's ``--max-variable-input-elements``).
    max_variable_elements: int = 0
    #: The config's ``working_memory_factor`` parameter: bytes its engine holds while it runs, per
    #: byte of an execution's inputs, counted on the request's ticket before it runs (0: not counted).
    working_memory_factor: float = 0.0
    #: Which load this is: a file replaced under the same version and reloaded is a new generation.
    load_generation: int = field(default_factory=lambda: next(_load_generations))

    @property
    def identity(self) -> str:
        """This loaded model among all others: name, version and load generation (cache keys use it)."""
        return f"{self.name}\x00{self.version}\x00{self.load_generation}"

    @property
    def max_batch_size(self) -> int:
        return self.config.max_batch_size

    @property
    def platform(self) -> str:
        return self.config.platform

    @property
    def decoupled(self) -> bool:
        """Whether requests get any number of responses (``model_transaction_policy { decoupled }``;
        an ensemble is decoupled when one of its steps is)."""
        return self.config.model_transaction_policy.decoupled


@dataclass(frozen=True, kw_only=True)
class ModelVersion(ModelSpec):
    """Everything needed to serve one version: its spec and its executor (the scheduler, the port
    executions are submitted to, with the instances it feeds and the statistics); immutable (built
    by ``new_version`` when loaded)."""

    instances: list[Instance]
    load_seconds: float
    model_dir: Path
    scheduler: ModelScheduler = field(repr=False)
    stats: ModelStats = field(repr=False)

    def unready_reason(self) -> str:
        """Why the loaded version cannot serve now ("" when it can: an ensemble needs its steps)."""
        return self.scheduler.unready_reason()

    def close(self) -> None:
        for instance in self.instances:
            instance.close()
        self.instances.clear()


def new_version(
    config: mc.ModelConfig,
    version: int,
    model_dir: Path,
    started: float,
    scheduler: Callable[[ModelStats], ModelScheduler],
    source: str,
    instances: list[Instance] | None = None,
    pipeline: ImagePipeline | None = None,
    composing_models: tuple[str, ...] = (),
    inherited_labels: dict[str, list[str]] | None = None,
    seen_from: tuple[dict[str, list[str]], ModelStats, int] | None = None,
) -> ModelVersion:
    """The one place a version is built, for every model kind: its tensors and labels from the
    completed config, its statistics, and the scheduler made for them. ``started``: when its
    load began (``time.perf_counter()``). ``inherited_labels``: an ensemble's, from the composing
    outputs that write its outputs (its own ``label_filename`` wins). ``seen_from``: a version
    another process loaded, as an intake process sees it (``intake.model_views``): its labels as
    loaded there (not read again from files that may have changed), the statistics that report
    there, and its load generation there."""
    inputs, outputs = config_tensors(config, source)
    if seen_from is not None:
        labels, stats, generation = seen_from
        extra: dict[str, int] = {"load_generation": generation}
    else:
        labels = {**(inherited_labels or {}), **output_labels(model_dir, outputs)}
        stats = ModelStats(config.name, str(version))
        extra = {}
    return ModelVersion(
        name=config.name,
        version=version,
        config=config,
        max_variable_elements=_variable_elements(config, source),
        working_memory_factor=_working_memory_factor(config, source),
        inputs=inputs,
        outputs=outputs,
        labels=labels,
        instances=instances or [],
        load_seconds=time.perf_counter() - started,
        model_dir=model_dir,
        scheduler=scheduler(stats),
        stats=stats,
        pipeline=pipeline,
        composing_models=composing_models,
        **extra,
    )


def config_tensors(config: mc.ModelConfig, source: str) -> tuple[dict[str, TensorSpec], dict[str, TensorSpec]]:
    """The inputs and outputs a (completed) config declares, by name."""
    inputs = {s.name: s for s in tensor_specs(config.input, "input", source)}
    outputs = {s.name: s for s in tensor_specs(config.output, "output", source)}
    return inputs, outputs


def instance_specs(config: mc.ModelConfig, gpu_available: bool) -> list[InstanceSpec]:
    """Expand instance_group into one spec per instance (``count`` per listed GPU, as Triton)."""
    groups = list(config.instance_group) or [mc.ModelInstanceGroup(kind=mc.ModelInstanceGroup.KIND_AUTO)]
    specs: list[InstanceSpec] = []
    for index, group in enumerate(groups):
        count = group.count if group.count > 0 else 1
        kind = group.kind
        if kind == mc.ModelInstanceGroup.KIND_AUTO:
            kind = mc.ModelInstanceGroup.KIND_GPU if gpu_available else mc.ModelInstanceGroup.KIND_CPU
        group_name = group.name or f"{config.name}_{index}"
        if kind == mc.ModelInstanceGroup.KIND_GPU:
            for gpu in list(group.gpus) or [0]:
                specs.extend(
                    InstanceSpec(name=f"{group_name}_{gpu}_{i}", kind="GPU", device_id=gpu) for i in range(count)
                )
        elif kind in (mc.ModelInstanceGroup.KIND_CPU, mc.ModelInstanceGroup.KIND_MODEL):
            # KIND_MODEL: the model places itself (a Python model picks its device in its own
            # code); the server schedules its instances as CPU instances, as Triton does without a GPU
            specs.extend(InstanceSpec(name=f"{group_name}_{i}", kind="CPU") for i in range(count))
        else:
            raise ModelLoadError(
                f"instance_group[{index}]: kind {mc.ModelInstanceGroup.Kind.Name(kind)} is not supported"
            )
    cpu_instances = sum(1 for spec in specs if spec.kind == "CPU")
    threads = engine_threads(cpu_instances)  # the usable cores (affinity, cgroup quota), not os.cpu_count()
    return [
        InstanceSpec(name=s.name, kind=s.kind, device_id=s.device_id, threads=threads if s.kind == "CPU" else 0)
        for s in specs
    ]


def _model_file(model_dir: Path, version: int, config: mc.ModelConfig, filename: str) -> Path:
    """The version's model file (the backend's choice); with ``cc_model_filenames`` the backend picks
    the file for its GPU, so that file may be absent as long as one of those exists. A backend that
    needs no file (an empty name: Ferry's vision steps) gets the version directory."""
    if not filename:
        return inside(model_dir, Path(str(version)), "version directory")
    path = inside(model_dir, Path(str(version)) / filename, "default_model_filename")
    per_capability = [
        inside(model_dir, Path(str(version)) / name, "cc_model_filenames")
        for name in config.cc_model_filenames.values()
    ]
    if not path.is_file() and not any(p.is_file() for p in per_capability):
        raise ModelLoadError(f"model file {path} does not exist")
    return path


def load_version(model_dir: Path, version: int, config: mc.ModelConfig, source: str) -> ModelVersion:
    """Create every instance of one version, complete and check its config, and run warm-up.

    Blocking (engines load synchronously): call it from a worker thread.
    """
    started = time.perf_counter()
    config = mc.ModelConfig.FromString(config.SerializeToString())  # each version owns its copy
    if not config.name:
        config.name = model_dir.name
    platform = normalise_platform(config.platform, config.backend) or platform_for_file(model_dir / str(version))
    if not platform:
        raise ModelLoadError(
            f"{source}: no platform/backend given and no model.onnx, model.plan, model.pt or model.py in "
            f"{model_dir / str(version)}"
        )
    config.platform = platform
    backend = backend_for(platform)
    model_file = _model_file(model_dir, version, config, backend.model_filename(config))
    specs = instance_specs(config, backend.gpu_available())
    instances: list[Instance] = []
    try:
        first = backend.create_instance(model_file, config, specs[0])
        instances.append(first)
        complete_config(config, first.io, source)
        validate_config(config, source)
        instances.extend(backend.create_instance(model_file, config, spec) for spec in specs[1:])
        if not config.backend:
            config.backend = backend.name
        inputs, outputs = config_tensors(config, source)
        first_gpu = next((spec.device_id for spec in specs if spec.kind == "GPU"), 0)
        labels = _labels(model_dir, outputs, config, first.io.metadata, source)
        pipeline = ImagePipeline.from_config(config, inputs, outputs, labels, gpu=first_gpu)
        warm_up(config, instances, list(outputs), model_dir)
        policy = SchedulingPolicy.from_config(config)
        name = f"{config.name}:{version}"
        return new_version(
            config,
            version,
            model_dir,
            started,
            lambda stats: _batcher(backend, name, instances, stats, policy),
            source,
            instances,
            pipeline,
            inherited_labels=labels,
        )
    except BaseException:
        for instance in instances:
            instance.close()
        raise


def _labels(
    model_dir: Path, outputs: dict[str, TensorSpec], config: mc.ModelConfig, metadata: dict[str, str], source: str
) -> dict[str, list[str]]:
    """The outputs' label files; without any, the class names the model file carries (an Ultralytics
    export's ``names``) label its first output."""
    labels = output_labels(model_dir, outputs)
    if labels or not config.output:
        return labels
    names = embedded_class_names(metadata, source)
    return {config.output[0].name: names} if names is not None else {}


def _batcher(
    backend: Backend, name: str, instances: list[Instance], stats: ModelStats, policy: SchedulingPolicy
) -> ModelScheduler:
    """The dynamic batcher, or the Python-model runner for a backend whose instances answer a
    batch's requests one by one (the backend declares it: ``Backend.request_batches``)."""
    if backend.request_batches:
        return RequestBatchScheduler(name, cast(list[RequestBatchInstance], instances), stats, policy)
    return Scheduler(name, instances, stats, policy)


def _warmup_input(name: str, spec: mc.ModelWarmup.Input, batch: int, model_dir: Path) -> np.ndarray:
    datatype = datatype_from_config(mc.DataType.Name(spec.data_type))
    shape = [batch, *spec.dims] if batch else list(spec.dims)
    dtype = numpy_dtype(datatype)
    choice = spec.WhichOneof("input_data_type")
    if datatype == "BYTES":
        array = np.empty(int(np.prod(shape)), dtype=object)
        array[:] = b"0"
        return array.reshape(shape)
    if choice == "random_data":
        rng = np.random.default_rng(0)
        return rng.random(shape).astype(dtype) if dtype.kind == "f" else rng.integers(0, 2, shape).astype(dtype)
    if choice == "input_data_file":
        path = inside(model_dir, Path("warmup") / spec.input_data_file, f"warmup input '{name}': input_data_file")
        return np.fromfile(path, dtype=dtype).reshape(shape)
    return np.zeros(shape, dtype=dtype)


def warm_up(config: mc.ModelConfig, instances: list[Instance], outputs: list[str], model_dir: Path) -> None:
    """Run the config's ``model_warmup`` samples on every instance before the version is READY."""
    if not config.model_warmup:
        return
    for sample in config.model_warmup:
        batch = sample.batch_size if config.max_batch_size > 0 else 0
        inputs = {
            name: _warmup_input(name, spec, max(batch, 1) if batch else 0, model_dir)
            for name, spec in sample.inputs.items()
        }
        for instance in instances:
            for _ in range(max(1, sample.count)):
                try:
                    instance.compute(inputs, outputs)
                except FerryError:
                    raise
                except Exception as exc:
                    raise ModelLoadError(f"warmup sample '{sample.name}' failed: {exc}") from None


#: The config parameter bounding inputs of variable size (see ``inference.validation``).
VARIABLE_ELEMENTS = "max_variable_elements"


def _variable_elements(config: mc.ModelConfig, source: str) -> int:
    """The ``max_variable_elements`` parameter (0 when absent); a value that is not a positive
    whole number fails the load."""
    if VARIABLE_ELEMENTS not in config.parameters:
        return 0
    text = config.parameters[VARIABLE_ELEMENTS].string_value.strip()
    if not text.isdigit() or int(text) <= 0:
        raise ModelLoadError(
            f"{source}: parameters '{VARIABLE_ELEMENTS}' must be a positive whole number of elements, got {text!r}"
        )
    return int(text)


#: The config parameter saying what the engine holds while it runs (see ``inference.working_memory``).
WORKING_MEMORY_FACTOR = "working_memory_factor"


def _working_memory_factor(config: mc.ModelConfig, source: str) -> float:
    """The ``working_memory_factor`` parameter (0 when absent); a value that is not a number in
    ``config_ranges.WORKING_MEMORY_RANGE`` fails the load, naming the range."""
    if WORKING_MEMORY_FACTOR not in config.parameters:
        return 0.0
    text = config.parameters[WORKING_MEMORY_FACTOR].string_value.strip()
    try:
        factor = float(text)
    except ValueError:
        raise ModelLoadError(
            f"{source}: parameters '{WORKING_MEMORY_FACTOR}' must be a number of bytes per input byte, got {text!r}"
        ) from None
    WORKING_MEMORY_RANGE.check(factor, f"parameters '{WORKING_MEMORY_FACTOR}'", source)
    return factor
