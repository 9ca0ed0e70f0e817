// Rates and percentiles from two cumulative snapshots of /dashboard/api/metrics, computed the way
// Prometheus' rate() and histogram_quantile() would: counter resets (a reloaded version) give no
// value rather than a negative one, and a quantile interpolates linearly inside its bucket.

const REQUEST_HIST = "nv_inference_request_duration_histogram_us";
const BATCH_HIST = "nv_inference_batch_size";
const COMPUTE_COUNTERS = [
  "nv_inference_compute_input_duration_us",
  "nv_inference_compute_infer_duration_us",
  "nv_inference_compute_output_duration_us",
];

/** Increase of a cumulative value, or null when it went down (the counter was reset). */
export function increase(current, previous) {
  if (current === undefined || previous === undefined) return null;
  const delta = current - previous;
  return delta < 0 ? null : delta;
}

/** The histogram observed between two snapshots, or null after a reset. */
export function histogramIncrease(current, previous) {
  if (!current) return null;
  if (!previous) return current;
  const count = increase(current.count, previous.count);
  if (count === null || current.buckets.length !== previous.buckets.length) return null;
  const buckets = current.buckets.map((value, i) => value - previous.buckets[i]);
  if (buckets.some((value) => value < 0)) return null;
  return { le: current.le, buckets, count, sum: current.sum - previous.sum };
}

/**
 * The q-quantile of a histogram with cumulative finite `buckets` under bounds `le` and `count`
 * observations in all (the +Inf bucket). Like histogram_quantile(): null without observations,
 * the highest finite bound when the rank falls in the +Inf bucket.
 */
export function histogramQuantile(q, histogram) {
  if (!histogram || histogram.count <= 0) return null;
  const rank = q * histogram.count;
  let lowerBound = 0;
  let below = 0;
  for (let i = 0; i < histogram.le.length; i++) {
    const cumulative = histogram.buckets[i];
    if (cumulative >= rank) {
      const inBucket = cumulative - below;
      if (inBucket <= 0) return histogram.le[i];
      return lowerBound + (histogram.le[i] - lowerBound) * ((rank - below) / inBucket);
    }
    lowerBound = histogram.le[i];
    below = cumulative;
  }
  return histogram.le[histogram.le.length - 1];
}

/** Executions per batch-size bucket ("1", "2", "3–4", ...) up to the model's max batch size. */
export function batchSizeDistribution(histogram, maxBatchSize) {
  if (!histogram) return [];
  const limit = Math.max(1, maxBatchSize || 1);
  const rows = [];
  let lower = 0;
  let below = 0;
  for (let i = 0; i < histogram.le.length; i++) {
    const upper = histogram.le[i];
    const count = histogram.buckets[i] - below;
    if (lower < limit) {
      const from = lower + 1;
      const to = Math.min(upper, limit);
      rows.push({ label: from === to ? `${to}` : `${from}–${to}`, count });
    }
    lower = upper;
    below = histogram.buckets[i];
  }
  return rows;
}

function sum(values) {
  return values.reduce((total, value) => (value === null || total === null ? null : total + value), 0);
}

/**
 * One chart point for one model version: `previous` is the last snapshot (rates), `windowStart`
 * an older one (percentiles, so a quiet second does not empty the latency chart). Each entry is
 * the model's part of a snapshot; `seconds` and `windowSeconds` are the times between them.
 */
export function derivePoint(current, previous, seconds, windowStart) {
  const counter = (entry, name) => entry?.counters?.[name];
  const rate = (name) => {
    const delta = increase(counter(current, name), counter(previous, name));
    return delta === null || seconds <= 0 ? null : delta / seconds;
  };
  const requests = increase(counter(current, "nv_inference_request_success"),
                            counter(previous, "nv_inference_request_success"));
  const perRequestMs = (names) => {
    const total = sum(names.map((name) => increase(counter(current, name), counter(previous, name))));
    return total === null || !requests ? null : total / requests / 1000;
  };
  const latency = histogramIncrease(current.histograms?.[REQUEST_HIST], windowStart?.histograms?.[REQUEST_HIST]);
  const quantileMs = (q) => {
    const value = histogramQuantile(q, latency);
    return value === null ? null : value / 1000;
  };
  const failures = {};
  const currentFailures = counter(current, "nv_inference_request_failure") || {};
  const previousFailures = counter(previous, "nv_inference_request_failure") || {};
  for (const reason of Object.keys(currentFailures)) {
    const delta = increase(currentFailures[reason], previousFailures[reason] ?? 0);
    failures[reason] = delta === null || seconds <= 0 ? null : delta / seconds;
  }
  return {
    requestsPerSecond: rate("nv_inference_request_success"),
    inferencesPerSecond: rate("nv_inference_count"),
    p50: quantileMs(0.5),
    p95: quantileMs(0.95),
    p99: quantileMs(0.99),
    queueMs: perRequestMs(["nv_inference_queue_duration_us"]),
    computeMs: perRequestMs(COMPUTE_COUNTERS),
    endToEndMs: perRequestMs(["nv_inference_request_duration_us"]),
    failures,
  };
}

/** Batch-size rows observed since `windowStart` (the whole history when it is missing). */
export function recentBatchSizes(current, windowStart, maxBatchSize) {
  const histogram = histogramIncrease(current?.histograms?.[BATCH_HIST], windowStart?.histograms?.[BATCH_HIST]);
  return batchSizeDistribution(histogram, maxBatchSize);
}
