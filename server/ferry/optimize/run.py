"""``ferry optimize``: one ONNX model version in, an FP16 / INT8 / TensorRT model out, with a report
of how far its answers moved from the FP32 original.

Both models are loaded through the server's own loader (``load_version``), so the reference is
exactly what serving computes and the written config is proven loadable before it is installed.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ferry_client.protocol import model_config_pb2 as mc

from ..backends.registry import normalise_platform, platform_for_file
from ..paths import check_model_name
from ..repository.config import CONFIG_FILENAME, read_config_file
from ..repository.model import ModelVersion, load_version
from ..repository.versions import versions_on_disk
from .accuracy import AccuracyReport, EvalBatch, compare, read_annotations
from .calibration import (
    OptimizeError,
    PipelineCalibrationReader,
    TensorCalibrationReader,
    image_batches,
    image_files,
)
from .cpu import Int8Scheme, choose_int8_scheme, read_cpu_features
from .writer import (
    Target,
    config_text,
    default_output_name,
    derived_config,
    install_model,
    install_version,
    stage_model,
)

PRECISIONS = ("fp16", "int8")
ENGINES = ("onnxruntime", "tensorrt")
#: Below these, an INT8 model is not written without --force: top-1 agreement for classifiers,
#: mAP@0.5 against the FP32 model's detections for detectors.
DEFAULT_MIN_AGREEMENT = {"classify": 0.98, "tensor": 0.98, "detect": 0.90}
#: Detectors also keep each FP32 detection's score and box: for the detections found again, the 95th
#: percentile of the score change and the mean box IoU (mAP only ranks scores, so it misses scores that
#: all moved, even above 1).
#: Fewer inputs compared (detectors: FP32 detections) than this, and a 100% agreement says nothing
#: (3 pages, 2 faces): the INT8 gate refuses to judge, whatever the agreement (--min-compared).
DEFAULT_MIN_COMPARED = 50
MAX_SCORE_CHANGE_P95 = 0.1
MIN_MEAN_BOX_IOU = 0.9
RANDOM_EVAL_SAMPLES = 32


class AccuracyRefused(OptimizeError):
    """The INT8 model moved too far from FP32; nothing was written."""

    def __init__(self, message: str, report: AccuracyReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass
class OptimizeOptions:
    model_dir: Path
    precision: str
    engine: str = "onnxruntime"
    version: int | None = None  # source version; default the latest
    output_name: str | None = None  # default <model>_<precision>
    as_version: int | None = None  # write a new version of the source model instead
    calibration_images: Path | None = None
    calibration_tensors: Path | None = None  # .npy of ready input tensors (models without ferry_image)
    calibration_count: int = 512
    calibration_method: str = "minmax"
    eval_images: Path | None = None  # default: the calibration images
    eval_count: int = 512
    eval_annotations: Path | None = None
    min_agreement: float | None = None
    min_compared: int = DEFAULT_MIN_COMPARED
    force: bool = False
    overwrite: bool = False
    batch_size: int = 16
    int8_scheme: str = "auto"
    reduce_range: bool | None = None
    fp16_io: bool = False
    device_id: int = 0
    workspace_bytes: int | None = None
    show_progress: bool = True
    quantize_outputs: bool = False  # also quantize the output heads (float_output_nodes); off by default


@dataclass
class Produced:
    """The optimized model file, with how it was made."""

    path: Path
    scheme: Int8Scheme | None = None
    compute_capability: str | None = None  # TensorRT engines only


@dataclass
class OptimizeResult:
    model_dir: Path
    version: int
    model_file: Path
    report: AccuracyReport
    scheme: Int8Scheme | None = None
    notes: list[str] = field(default_factory=list)


def _single_instance(config: mc.ModelConfig, kind: int) -> mc.ModelConfig:
    """A copy that loads one instance of ``kind`` and no warm-up: enough to compare outputs."""
    copy = mc.ModelConfig.FromString(config.SerializeToString())
    copy.ClearField("instance_group")
    copy.instance_group.add(kind=kind, count=1)
    copy.ClearField("model_warmup")
    return copy


def _source(options: OptimizeOptions) -> tuple[mc.ModelConfig, int, Path]:
    model_dir = options.model_dir
    if not model_dir.is_dir():
        raise OptimizeError(f"model directory {model_dir} does not exist")
    config = read_config_file(model_dir) or mc.ModelConfig()
    config.name = config.name or model_dir.name
    versions = versions_on_disk(model_dir)
    version = options.version if options.version is not None else (versions[-1] if versions else None)
    if version is None:
        raise OptimizeError(_no_versions(model_dir))
    if version not in versions:
        raise OptimizeError(f"{model_dir}: version {version} not found (versions on disk: {versions or 'none'})")
    platform = normalise_platform(config.platform, config.backend) or platform_for_file(model_dir / str(version))
    if platform != "onnxruntime_onnx":
        raise OptimizeError(f"{model_dir}: only ONNX models can be optimized (platform is {platform or 'unknown'})")
    model_file = model_dir / str(version) / (config.default_model_filename or "model.onnx")
    return config, version, model_file


def _no_versions(model_dir: Path) -> str:
    """Why a directory without numbered versions is not a model to optimize: often it is the whole repository."""
    models = sorted(
        child.name
        for child in model_dir.iterdir()
        if child.is_dir() and ((child / CONFIG_FILENAME).is_file() or versions_on_disk(child))
    )
    if models:
        listed = ", ".join(models[:5]) + (", ..." if len(models) > 5 else "")
        return (
            f"{model_dir} looks like a model repository (it holds {listed}); `ferry optimize` takes one model's "
            f"directory, e.g. {model_dir / models[0]}"
        )
    return f"{model_dir}: no version directories (1/, 2/, ... holding the model file) in this model directory"


def _check_options(options: OptimizeOptions) -> None:
    if options.precision not in PRECISIONS:
        raise OptimizeError(f"--precision must be one of {', '.join(PRECISIONS)}")
    if options.engine not in ENGINES:
        raise OptimizeError(f"--engine must be one of {', '.join(ENGINES)}")
    if options.precision == "int8" and not (options.calibration_images or options.calibration_tensors):
        raise OptimizeError("INT8 needs calibration data: --calibration-images DIR (or --calibration-tensors FILE)")
    if options.as_version is not None and (options.engine == "tensorrt" or options.fp16_io):
        raise OptimizeError(
            "--as-version keeps the model's config, so it cannot change the platform (TensorRT) "
            "or the input/output types (--fp16-io); write a new model instead"
        )
    if options.engine == "tensorrt":
        from .tensorrt_build import tensorrt_available

        why = tensorrt_available()
        if why:
            raise OptimizeError(f"cannot build a TensorRT engine here: {why}")


def _batch_size(options: OptimizeOptions, config: mc.ModelConfig) -> int:
    """Images per calibration and comparison step: up to --batch-size; a model without a batch
    dimension (``max_batch_size: 0``) is calibrated and compared one image per execution."""
    if config.max_batch_size <= 0:
        return 1
    return max(1, min(options.batch_size, config.max_batch_size))


def _tensors(path: Path, count: int, reference: ModelVersion) -> np.ndarray:
    if len(reference.inputs) != 1:
        raise OptimizeError(
            f"--calibration-tensors feeds one input, but model '{reference.name}' has "
            f"{len(reference.inputs)}: {', '.join(reference.inputs)}"
        )
    try:
        return np.load(path, allow_pickle=False)[:count]
    except (OSError, ValueError) as exc:
        raise OptimizeError(f"{path}: cannot read a .npy tensor file: {exc}") from None


def _eval_batches(
    options: OptimizeOptions, reference: ModelVersion, batch: int
) -> tuple[Callable[[], Iterator[EvalBatch]], str]:
    """What the comparison runs on (and its description): evaluation images, else the calibration
    data, else random inputs."""
    pipeline = reference.pipeline
    image_dir = options.eval_images or options.calibration_images
    input_name = next(iter(reference.inputs))
    if image_dir is not None:
        if pipeline is None:
            raise OptimizeError(
                f"model '{reference.name}' has no ferry_image pipeline to turn images into tensors; "
                "use --calibration-tensors"
            )
        files = image_files(image_dir, options.eval_count)

        def from_images() -> Iterator[EvalBatch]:
            names = iter([str(p.relative_to(image_dir)) for p in files])
            progress = "comparing" if options.show_progress else None
            for tensor, transforms in image_batches(pipeline, files, batch, progress):
                yield EvalBatch({pipeline.input_name: tensor}, transforms, [next(names) for _ in transforms])

        return from_images, f"images from {image_dir}"
    if options.calibration_tensors is not None:
        samples = _tensors(options.calibration_tensors, options.eval_count, reference)
        description = f"tensors from {options.calibration_tensors}"
    else:
        description = "random inputs (uniform 0..1; give --eval-images for a meaningful comparison)"
        spec = reference.inputs[input_name]
        if any(d < 0 for d in spec.dims):
            raise OptimizeError("give --eval-images: the input has variable dims, so no random sample can be made")
        samples = np.random.default_rng(0).random((RANDOM_EVAL_SAMPLES, *spec.dims)).astype(np.float32)

    def from_tensors() -> Iterator[EvalBatch]:
        for start in range(0, len(samples), batch):
            yield EvalBatch({input_name: samples[start : start + batch]})

    return from_tensors, description


def _produce(
    options: OptimizeOptions, source_file: Path, reference: ModelVersion, batch: int, work: Path, notes: list[str]
) -> Produced:
    """Write the optimized ONNX model (and the engine, for TensorRT) into ``work``."""
    onnx_out = work / "model.onnx"
    scheme = None
    if options.precision == "fp16":
        from .fp16 import convert_fp16

        convert_fp16(source_file, onnx_out, keep_io_types=not options.fp16_io)
        notes.append(
            "FP16 weights and activations"
            + (", FP16 inputs/outputs" if options.fp16_io else ", inputs/outputs kept FP32")
        )
    else:
        from onnxruntime.quantization import CalibrationDataReader

        from .int8 import quantize_int8

        features = read_cpu_features()
        scheme = choose_int8_scheme(
            features,
            for_tensorrt=options.engine == "tensorrt",
            override=options.int8_scheme,
            reduce_range=options.reduce_range,
        )
        reader: CalibrationDataReader
        if options.calibration_images is not None:
            if reference.pipeline is None:
                raise OptimizeError(
                    f"model '{reference.name}' has no ferry_image section, so images cannot be turned "
                    "into its input; add ferry_image to config.pbtxt or use --calibration-tensors"
                )
            files = image_files(options.calibration_images, options.calibration_count)
            reader = PipelineCalibrationReader(reference.pipeline, files, batch, options.show_progress)
            calibration = (
                f"{len(files)} images from {options.calibration_images} through the model's ferry_image pipeline"
            )
        else:
            assert options.calibration_tensors is not None
            samples = _tensors(options.calibration_tensors, options.calibration_count, reference)
            reader = TensorCalibrationReader(next(iter(reference.inputs)), samples, batch)
            calibration = f"{len(samples)} tensors from {options.calibration_tensors}"
        kept = quantize_int8(
            source_file, onnx_out, reader, scheme, options.calibration_method, quantize_outputs=options.quantize_outputs
        )
        notes.append(
            f"INT8 QDQ, per-channel weights, {scheme.name} ({scheme.reason}; CPU {features.describe()}), "
            f"{options.calibration_method} calibration on {calibration}"
        )
        if kept:
            notes.append(f"output heads kept in float: {len(kept)} node(s) after the last weighted layer")
    if options.engine != "tensorrt":
        return Produced(onnx_out, scheme)
    from .tensorrt_build import build_engine

    destination = options.model_dir.parent / (options.output_name or "")
    cache = work / "timing.cache"
    previous = destination / "trt_cache" / "timing.cache"
    if previous.is_file():
        shutil.copy2(previous, cache)
    built = build_engine(onnx_out, reference.config, work, cache, options.device_id, options.workspace_bytes)
    notes.append(
        f"TensorRT {built.tensorrt_version} engine for compute capability {built.compute_capability}, "
        f"built in {built.seconds:.0f} s (strongly typed from the {options.precision.upper()} ONNX model)"
    )
    return Produced(built.path, scheme, built.compute_capability)


def _check_agreement(options: OptimizeOptions, report: AccuracyReport) -> None:
    if options.precision != "int8" or options.force:
        return
    threshold = options.min_agreement if options.min_agreement is not None else DEFAULT_MIN_AGREEMENT[report.task]
    agreement = report.agreement
    if agreement is None or agreement != agreement:  # None or NaN: nothing to judge by
        raise AccuracyRefused(
            "the model has no classification or detection output to judge INT8 accuracy by; "
            "pass --force to write it anyway",
            report,
        )
    if report.compared < options.min_compared:
        what = "FP32 detections" if report.task == "detect" else "inputs"
        raise AccuracyRefused(
            f"INT8 accuracy compared on only {report.compared} {what}, fewer than --min-compared "
            f"{options.min_compared}: too few to judge by; not written (give more --eval-images, "
            "lower --min-compared, or --force)",
            report,
        )
    remedies = (
        "more or more representative calibration images, --calibration-method entropy or percentile, "
        "no --quantize-output-heads, or --force"
    )
    if agreement < threshold:
        what = "mAP@0.5 against FP32 detections" if report.task == "detect" else "top-1 agreement with FP32"
        raise AccuracyRefused(
            f"INT8 {what} is {agreement:.4f}, below --min-agreement {threshold}; not written ({remedies})",
            report,
        )
    if report.task == "detect":
        problem = _detection_drift(report)
        if problem:
            raise AccuracyRefused(f"INT8 {problem}; not written ({remedies})", report)


def _detection_drift(report: AccuracyReport) -> str:
    """Why the detections' scores or boxes moved too far from FP32 ("" when they did not)."""
    if report.scores_outside_unit > report.reference_scores_outside_unit:
        outside, reference = report.scores_outside_unit, report.reference_scores_outside_unit
        return f"{outside} detection scores are outside 0..1 (FP32: {reference})"
    if report.score_diff_p95 is not None and report.score_diff_p95 > MAX_SCORE_CHANGE_P95:
        return f"detection scores moved by {report.score_diff_p95:.4f} (p95), more than {MAX_SCORE_CHANGE_P95}"
    if report.box_iou_mean is not None and report.box_iou_mean < MIN_MEAN_BOX_IOU:
        overlap = report.box_iou_mean
        return f"detection boxes overlap their FP32 boxes by {overlap:.4f} (mean IoU), below {MIN_MEAN_BOX_IOU}"
    return ""


def optimize(options: OptimizeOptions, say: Callable[[str], None] = print) -> OptimizeResult:
    """Produce, check and install the optimized model; raise OptimizeError (nothing written) on failure."""
    _check_options(options)
    source_config, version, source_file = _source(options)
    name = source_config.name
    if options.as_version is None:
        options.output_name = check_model_name(
            options.output_name or default_output_name(name, Target(options.precision, options.engine))
        )
    target = Target(options.precision, options.engine, options.fp16_io)
    repo = options.model_dir.parent
    if options.as_version is not None and (options.model_dir / str(options.as_version)).exists():
        raise OptimizeError(f"{options.model_dir / str(options.as_version)} exists; choose another --as-version")
    new_model = options.output_name if options.as_version is None else None  # its name, settled above
    if new_model is not None and (repo / new_model).exists() and not options.overwrite:
        raise OptimizeError(f"{repo / new_model} exists; pass --overwrite or choose --output-name")
    gpu = mc.ModelInstanceGroup.KIND_GPU if options.engine == "tensorrt" else mc.ModelInstanceGroup.KIND_CPU
    reference = candidate = None
    staging = Path(tempfile.mkdtemp(prefix=".ferry-optimize-", dir=repo))  # "." hides it from the server
    try:
        say(f"loading {name} version {version} ({source_file})")
        reference = load_version(
            options.model_dir,
            version,
            _single_instance(source_config, mc.ModelInstanceGroup.KIND_CPU),
            str(source_file),
        )
        batch = _batch_size(options, reference.config)
        notes: list[str] = []
        work = staging / "work"
        work.mkdir()
        produced = _produce(options, source_file, reference, batch, work, notes)
        out_version = options.as_version if options.as_version is not None else 1
        if options.as_version is not None:
            config = source_config
        else:
            config = derived_config(
                source_config, options.output_name or "", target, produced.path.name, produced.compute_capability
            )
        header = [f"Written by `ferry optimize` from model '{name}' version {version}:", *notes]
        staged = stage_model(
            staging, options.model_dir, config, header, out_version, {produced.path.name: produced.path}
        )
        if (work / "timing.cache").is_file():
            (staged / "trt_cache").mkdir()
            shutil.move(str(work / "timing.cache"), staged / "trt_cache" / "timing.cache")
        say(f"checking {config.name} against the FP32 model")
        staged_config = read_config_file(staged)  # the repository's own parser must accept it
        assert staged_config is not None
        candidate = load_version(staged, out_version, _single_instance(staged_config, gpu), str(staged))
        annotations = read_annotations(options.eval_annotations) if options.eval_annotations else None
        batches, description = _eval_batches(options, reference, batch)
        report = compare(reference, candidate, batches(), annotations, description)
        if options.precision == "int8":
            report.minimum = options.min_compared
        _check_agreement(options, report)
        if options.as_version is None:  # the report goes into the new model's config as comments
            (staged / CONFIG_FILENAME).write_text(config_text(config, [*header, *report.lines()]))
        if options.as_version is not None:
            install_version(staged, out_version, options.model_dir)
            destination = options.model_dir
        else:
            destination = repo / config.name
            install_model(staged, destination, options.overwrite)
        return OptimizeResult(
            destination,
            out_version,
            destination / str(out_version) / produced.path.name,
            report,
            produced.scheme,
            notes,
        )
    finally:
        for model in (reference, candidate):
            if model is not None:
                model.close()
        shutil.rmtree(staging, ignore_errors=True)
