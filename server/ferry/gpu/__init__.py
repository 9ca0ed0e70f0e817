"""GPU telemetry sources other than NVML (which lives in ``ferry.metrics.GpuCollector``), and the lock
that keeps GPU model set-up apart from CUDA graph captures (``setup_lock``)."""
