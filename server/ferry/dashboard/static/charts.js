// Live time-series charts on uPlot (vendored from npm; see vendor/VENDOR.md): one x axis of
// snapshot times and one or more series, resized with their container.

export const PALETTE = ["#2f6fdf", "#e0662c", "#1f9d6b", "#b8439b", "#8a6d1f", "#5a5fd6", "#c0392b", "#138d90"];

function cssVar(name, fallback) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
}

function formatNumber(value, digits = 2) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (Math.abs(value) >= 1000) return value.toFixed(0);
  return value.toFixed(digits);
}

const TIME_STEPS_S = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600];

/** Tick labels with as many decimals as the tick spacing needs. */
function formatTicks(ticks, unit) {
  const step = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) : 1;
  let digits = 0;
  while (digits < 3 && Math.abs(step * 10 ** digits - Math.round(step * 10 ** digits)) > 1e-6) digits++;
  return ticks.map((t) => t.toFixed(digits) + unit);
}

export class LineChart {
  /**
   * `element` receives the chart; `series` is [{label, unit}], drawn in PALETTE order.
   * `yRange` fixes the y axis (e.g. [0, 100] for percentages), otherwise it starts at zero.
   */
  constructor(element, series, { unit = "", yRange = null } = {}) {
    this.element = element;
    this.unit = unit;
    const axisColour = cssVar("--muted", "#666");
    const gridColour = cssVar("--grid", "#ddd");
    const axis = { stroke: axisColour, grid: { stroke: gridColour, width: 1 }, ticks: { stroke: gridColour } };
    const clock = (t) => new Date(t * 1000).toLocaleTimeString([], { hour12: false });
    this.plot = new uPlot({
      width: this.width(),
      height: 180,
      cursor: { drag: { x: false, y: false } },
      legend: { live: true },
      scales: {
        x: { time: true },
        y: { range: yRange ? () => yRange : (_, min, max) => [0, max > 0 ? max * 1.1 : 1] },
      },
      axes: [
        { ...axis, space: 80, incrs: TIME_STEPS_S, values: (_, ticks) => ticks.map(clock) },
        { ...axis, size: 72, values: (_, ticks) => formatTicks(ticks, unit) },
      ],
      series: [
        { label: "time", value: (_, t) => (t === null || t === undefined ? "–" : clock(t)) },
        ...series.map((s, i) => ({
          label: s.label,
          stroke: PALETTE[i % PALETTE.length],
          width: 2,
          spanGaps: false,
          value: (_, v) => (v === null || v === undefined ? "–" : formatNumber(v) + unit),
        })),
      ],
    }, [[], ...series.map(() => [])], element);
    this.seriesCount = series.length;
    this.observer = new ResizeObserver(() => this.plot.setSize({ width: this.width(), height: 180 }));
    this.observer.observe(element);
  }

  destroy() {
    this.observer.disconnect();
    this.plot.destroy();
  }

  width() {
    return Math.max(240, this.element.clientWidth || 320);
  }

  /** Replace the data: `times` in seconds since the epoch, one array per series. */
  update(times, columns) {
    this.plot.setData([times, ...columns.slice(0, this.seriesCount)]);
    if (this.plot.cursor.left < 0 && times.length) this.plot.setLegend({ idx: times.length - 1 }); // latest values
  }
}

/** A chart whose series change (e.g. failure reasons, GPUs): rebuilt when the labels change. */
export class DynamicLineChart {
  constructor(element, options = {}) {
    this.element = element;
    this.options = options;
    this.labels = null;
    this.chart = null;
  }

  update(times, labelled) {
    const labels = labelled.map((s) => s.label);
    if (!this.chart || labels.join("\n") !== this.labels.join("\n")) {
      this.chart?.destroy();
      this.element.replaceChildren();
      this.chart = new LineChart(this.element, labelled, this.options);
      this.labels = labels;
    }
    this.chart.update(times, labelled.map((s) => s.values));
  }
}

export { formatNumber };
