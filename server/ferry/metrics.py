"""Prometheus metrics with Triton's names, so existing Triton dashboards work against Ferry.

Cumulative counters are read from each model version's ModelStats at scrape time (one source of
truth with the statistics API); latency and batch-size histograms are observed as requests finish,
so p50/p95/p99 can be aggregated across replicas with ``histogram_quantile``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from types import ModuleType

import psutil
from prometheus_client import CollectorRegistry, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .gpu.tegrastats import TegrastatsCollector
from .histograms import HistogramFamily
from .repository.model import ModelVersion
from .statistics import Histograms

log = logging.getLogger(__name__)

LATENCY_BUCKETS_US = (
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
_LABELS = ("model", "version")


class CounterMetricFamily(Metric):
    """A cumulative counter under its exact Triton name.

    prometheus_client appends ``_total`` to counters, which would break Triton dashboards; Triton
    itself exposes e.g. ``nv_inference_request_success``. Exposed untyped, rate() works the same.
    """

    def __init__(self, name: str, documentation: str, labels: Iterable[str]) -> None:
        super().__init__(name, documentation + " (cumulative)", "unknown")
        self._labelnames = tuple(labels)

    def add_metric(self, labels: Iterable[str], value: float) -> None:
        self.add_sample(self.name, dict(zip(self._labelnames, labels, strict=True)), value)


class ModelCollector(Collector):
    """Triton's per-model counters and gauges, computed from the loaded versions at scrape time."""

    def __init__(self, models: Callable[[], Iterable[ModelVersion]]) -> None:
        self._models = models

    def collect(self) -> Iterable[Metric]:
        success = CounterMetricFamily(
            "nv_inference_request_success", "Number of successful inference requests", labels=_LABELS
        )
        failure = CounterMetricFamily(
            "nv_inference_request_failure", "Number of failed inference requests", labels=(*_LABELS, "reason")
        )
        count = CounterMetricFamily(
            "nv_inference_count", "Number of inferences performed (batch items)", labels=_LABELS
        )
        exec_count = CounterMetricFamily(
            "nv_inference_exec_count", "Number of model executions (batches)", labels=_LABELS
        )
        pending = GaugeMetricFamily(
            "nv_inference_pending_request_count", "Requests queued or executing for the model", labels=_LABELS
        )
        load = GaugeMetricFamily("nv_model_load_duration_secs", "Time taken to load the model", labels=_LABELS)
        durations = {
            "success": CounterMetricFamily(
                "nv_inference_request_duration_us", "Cumulative end-to-end inference request time (us)", labels=_LABELS
            ),
            "queue": CounterMetricFamily(
                "nv_inference_queue_duration_us", "Cumulative time requests spent queued (us)", labels=_LABELS
            ),
            "compute_input": CounterMetricFamily(
                "nv_inference_compute_input_duration_us", "Cumulative time assembling inputs (us)", labels=_LABELS
            ),
            "compute_infer": CounterMetricFamily(
                "nv_inference_compute_infer_duration_us", "Cumulative model execution time (us)", labels=_LABELS
            ),
            "compute_output": CounterMetricFamily(
                "nv_inference_compute_output_duration_us", "Cumulative time splitting outputs (us)", labels=_LABELS
            ),
        }
        image_durations = {
            "decode": CounterMetricFamily(
                "ferry_image_decode_duration_us", "Cumulative image decoding time (us)", labels=_LABELS
            ),
            "preprocess": CounterMetricFamily(
                "ferry_image_preprocess_duration_us", "Cumulative image pre-processing time (us)", labels=_LABELS
            ),
        }
        images = CounterMetricFamily("ferry_image_count", "Images decoded by the image pipeline", labels=_LABELS)
        responses = CounterMetricFamily(
            "ferry_inference_response_count",
            "Responses sent by decoupled models, by outcome (success, fail, empty_response, cancel)",
            labels=(*_LABELS, "outcome"),
        )
        for model in self._models():
            labels = [model.name, str(model.version)]
            snap = model.stats.snapshot()
            success.add_metric(labels, snap["success"])
            for reason in FAILURE_REASONS:
                failure.add_metric([*labels, reason], snap["failures"].get(reason, 0))
            count.add_metric(labels, snap["inference_count"])
            exec_count.add_metric(labels, snap["execution_count"])
            pending.add_metric(labels, model.scheduler.in_flight if model.scheduler else 0)
            load.add_metric(labels, model.load_seconds)
            if model.decoupled:
                for outcome, total in snap["responses"].items():
                    responses.add_metric([*labels, outcome], total)
            for key, family in durations.items():
                family.add_metric(labels, snap["durations_ns"][key] / 1000)
            if model.pipeline is not None:
                images.add_metric(labels, snap["images"]["decode"]["count"])
                for key, family in image_durations.items():
                    family.add_metric(labels, snap["images"][key]["ns"] / 1000)
        yield from (
            success,
            failure,
            count,
            exec_count,
            pending,
            load,
            *durations.values(),
            images,
            *image_durations.values(),
            responses,
        )


class HostCollector(Collector):
    """CPU and memory of the machine (Triton's nv_cpu_* names) and of this process."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        psutil.cpu_percent(None)  # prime the utilisation counter

    def collect(self) -> Iterable[Metric]:
        memory = psutil.virtual_memory()
        yield GaugeMetricFamily(
            "nv_cpu_utilization", "CPU utilisation since the last scrape (0..1)", value=psutil.cpu_percent(None) / 100
        )
        yield GaugeMetricFamily("nv_cpu_memory_total_bytes", "Total host memory", value=memory.total)
        yield GaugeMetricFamily("nv_cpu_memory_used_bytes", "Used host memory", value=memory.total - memory.available)
        yield GaugeMetricFamily(
            "ferry_process_resident_memory_bytes",
            "Resident memory of the server process",
            value=self._process.memory_info().rss,
        )


class GpuCollector(Collector):
    """GPU utilisation, memory and power through NVML; absent when there is no NVIDIA GPU."""

    def __init__(self, nvml: ModuleType) -> None:
        self._nvml = nvml
        self._handles = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(nvml.nvmlDeviceGetCount())]

    @classmethod
    def create(cls) -> GpuCollector | None:
        try:
            import pynvml

            pynvml.nvmlInit()
            if pynvml.nvmlDeviceGetCount() == 0:
                return None
            return cls(pynvml)
        except Exception as exc:  # no library, no driver or no device: GPU metrics are simply absent
            log.debug("GPU metrics disabled: %s", exc)
            return None

    def collect(self) -> Iterable[Metric]:
        nvml = self._nvml
        util = GaugeMetricFamily("nv_gpu_utilization", "GPU utilisation (0..1)", labels=["gpu"])
        total = GaugeMetricFamily("nv_gpu_memory_total_bytes", "GPU memory total", labels=["gpu"])
        used = GaugeMetricFamily("nv_gpu_memory_used_bytes", "GPU memory used", labels=["gpu"])
        power = GaugeMetricFamily("nv_gpu_power_usage", "GPU power draw (watts)", labels=["gpu"])
        for index, handle in self._handles:
            label = [str(index)]
            try:
                util.add_metric(label, nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                total.add_metric(label, memory.total)
                used.add_metric(label, memory.used)
                power.add_metric(label, nvml.nvmlDeviceGetPowerUsage(handle) / 1000)
            except Exception as exc:  # one unreadable value must not break the scrape
                log.debug("NVML read failed for GPU %d: %s", index, exc)
        yield from (util, total, used, power)


class Metrics:
    """The server's registry: collectors plus the histograms each model version observes into."""

    def __init__(self, models: Callable[[], Iterable[ModelVersion]]) -> None:
        disable_created_metrics()  # *_created series only add noise to every histogram
        self.registry = CollectorRegistry()
        self.registry.register(ModelCollector(models))
        self.registry.register(HostCollector())
        # NVML first; on Jetson, where NVML has no GPU, the tegrastats reader.
        self._gpu = GpuCollector.create() or TegrastatsCollector.create()
        if self._gpu is not None:
            self.registry.register(self._gpu)

        def histogram(name: str, text: str, buckets: tuple[float, ...]) -> HistogramFamily:
            family = HistogramFamily(name, text, _LABELS, buckets)
            self.registry.register(family)
            return family

        self._request = histogram(
            "nv_inference_request_duration_histogram_us", "End-to-end request duration (us)", LATENCY_BUCKETS_US
        )
        self._queue = histogram("nv_inference_queue_duration_histogram_us", "Queue duration (us)", LATENCY_BUCKETS_US)
        self._input = histogram(
            "nv_inference_compute_input_duration_histogram_us",
            "Input assembly duration per execution (us)",
            LATENCY_BUCKETS_US,
        )
        self._infer = histogram(
            "nv_inference_compute_infer_duration_histogram_us",
            "Model execution duration per execution (us)",
            LATENCY_BUCKETS_US,
        )
        self._output = histogram(
            "nv_inference_compute_output_duration_histogram_us",
            "Output split duration per execution (us)",
            LATENCY_BUCKETS_US,
        )
        self._batch = histogram("nv_inference_batch_size", "Items per model execution", BATCH_BUCKETS)

    def close(self) -> None:
        """Stop the tegrastats subprocess, if one was started."""
        if isinstance(self._gpu, TegrastatsCollector):
            self._gpu.close()

    def attach(self, model: ModelVersion) -> None:
        """Give a newly loaded version its histogram children."""
        model.stats.histograms = self.histograms_for(model.name, str(model.version))

    def histograms_for(self, name: str, version: str) -> Histograms:
        """Fresh histogram children for a load of (name, version): a reloaded version starts from
        zero, as its counters (its new statistics) do."""
        labels = (name, version)
        for family in (self._request, self._queue, self._input, self._infer, self._output, self._batch):
            with contextlib.suppress(KeyError):
                family.remove(*labels)
        return Histograms(
            request_us=self._request.labels(*labels),
            queue_us=self._queue.labels(*labels),
            compute_input_us=self._input.labels(*labels),
            compute_infer_us=self._infer.labels(*labels),
            compute_output_us=self._output.labels(*labels),
            batch_size=self._batch.labels(*labels),
        )
