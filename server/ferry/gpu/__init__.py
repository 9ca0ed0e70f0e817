"""GPU telemetry sources other than NVML (which lives in ``ferry.metrics.GpuCollector``)."""
