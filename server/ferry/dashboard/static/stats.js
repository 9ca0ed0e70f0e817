// Rates and percentiles from two cumulative snapshots of /dashboard/api/metrics: rates the way
// Prometheus' rate() computes them (counter resets, a reloaded version, give no value rather than a
// negative one), percentiles as the histogram bucket bounds they fall under ("p95 ≤ 50 ms").

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
 * Where the q-quantile of a histogram lies, as much as its buckets can say: the upper bound of the
 * first bucket whose cumulative count reaches q of the `count` observations (so at least q of them
 * took at most that long), or, when the rank falls in the +Inf bucket, the highest finite bound with
 * `beyond` set (the quantile is above it). Null without observations. A bound, not a measurement:
 * histogram_quantile()'s interpolation inside the bucket would invent a value the buckets never saw.
 */
export function quantileBound(q, histogram) {
  if (!histogram || histogram.count <= 0) return null;
  const rank = q * histogram.count;
  const index = histogram.buckets.findIndex((cumulative) => cumulative >= rank);
  if (index >= 0) return { bound: histogram.le[index], beyond: false };
  return { bound: histogram.le[histogram.le.length - 1], beyond: true };
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

/** A percentile's bound as text: "≤ 50" (ms), "> 1000" past the last bucket, "–" when unknown. */
export function formatBound(value, beyond, format) {
  if (value === null || value === undefined) return "–";
  return `${beyond ? ">" : "≤"} ${format(value)}`;
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
  const bounds = Object.fromEntries([["p50", 0.5], ["p95", 0.95], ["p99", 0.99]].map(([name, q]) => {
    const found = quantileBound(q, latency);
    return [name, found && { ms: found.bound / 1000, beyond: found.beyond }];
  }));
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
    p50: bounds.p50?.ms ?? null, // bucket bounds in ms (charted); pNNBeyond: the quantile is past the last bound
    p95: bounds.p95?.ms ?? null,
    p99: bounds.p99?.ms ?? null,
    p50Beyond: bounds.p50?.beyond ?? false,
    p95Beyond: bounds.p95?.beyond ?? false,
    p99Beyond: bounds.p99?.beyond ?? false,
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
