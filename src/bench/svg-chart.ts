// A latency-versus-throughput chart as a standalone SVG: one point per concurrency of a
// sweep (labelled with it), p50 and p99 as two lines, latency on a log scale.

export interface SweepPoint {
  readonly concurrency: number;
  readonly requestsPerSecond: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
}

const WIDTH = 720;
const HEIGHT = 440;
const LEFT = 70;
const RIGHT = 20;
const TOP = 40;
const BOTTOM = 50;

const n = (v: number) => String(Math.round(v * 10) / 10);
const escapeXml = (text: string) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;");

export function latencyThroughputSvg(title: string, sweep: readonly SweepPoint[]): string {
  // A concurrency at which nothing was answered has no latency to draw (NaN percentiles).
  const points = sweep.filter((p) => Number.isFinite(p.p50Ms) && Number.isFinite(p.p99Ms));
  const maxX = Math.max(1, ...points.map((p) => p.requestsPerSecond)) * 1.1;
  const latencies = points.flatMap((p) => [p.p50Ms, p.p99Ms]).filter((v) => v > 0);
  const minY = Math.max(0.01, Math.min(...latencies, 1) / 2);
  const maxY = Math.max(...latencies, 1) * 2;
  const x = (v: number) => n(LEFT + (v / maxX) * (WIDTH - LEFT - RIGHT));
  const y = (v: number) =>
    n(
      TOP +
        (1 - (Math.log10(Math.max(v, minY)) - Math.log10(minY)) / (Math.log10(maxY) - Math.log10(minY))) *
          (HEIGHT - TOP - BOTTOM),
    );
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" font-family="sans-serif" font-size="12">`,
    // Read out by screen readers (and shown by some viewers) in place of the drawing.
    `<title>${escapeXml(`${title}: latency versus throughput`)}</title>`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${WIDTH / 2}" y="22" text-anchor="middle" font-size="14">${escapeXml(title)}</text>`,
    `<line x1="${LEFT}" y1="${HEIGHT - BOTTOM}" x2="${WIDTH - RIGHT}" y2="${HEIGHT - BOTTOM}" stroke="black"/>`,
    `<line x1="${LEFT}" y1="${TOP}" x2="${LEFT}" y2="${HEIGHT - BOTTOM}" stroke="black"/>`,
    `<text x="${WIDTH / 2}" y="${HEIGHT - 12}" text-anchor="middle">requests per second</text>`,
    `<text x="16" y="${HEIGHT / 2}" text-anchor="middle" transform="rotate(-90 16 ${HEIGHT / 2})">latency (ms, log scale)</text>`,
  ];
  for (let i = 0; i <= 5; i++) {
    const v = (maxX / 5) * i;
    parts.push(`<text x="${x(v)}" y="${HEIGHT - BOTTOM + 16}" text-anchor="middle">${Math.round(v)}</text>`);
  }
  for (let e = Math.floor(Math.log10(minY)); e <= Math.ceil(Math.log10(maxY)); e++) {
    const v = 10 ** e;
    if (v < minY || v > maxY) continue;
    parts.push(
      `<line x1="${LEFT}" y1="${y(v)}" x2="${WIDTH - RIGHT}" y2="${y(v)}" stroke="#ddd"/>`,
      `<text x="${LEFT - 6}" y="${Number(y(v)) + 4}" text-anchor="end">${v}</text>`,
    );
  }
  const sorted = [...points].sort((a, b) => a.concurrency - b.concurrency);
  for (const [key, color, label] of [
    ["p50Ms", "#1f77b4", "p50"],
    ["p99Ms", "#d62728", "p99"],
  ] as const) {
    const path = sorted.map((p) => `${x(p.requestsPerSecond)},${y(p[key])}`).join(" ");
    parts.push(`<polyline points="${path}" fill="none" stroke="${color}" stroke-width="2"/>`);
    for (const p of sorted) {
      parts.push(`<circle cx="${x(p.requestsPerSecond)}" cy="${y(p[key])}" r="3" fill="${color}"/>`);
      if (key === "p99Ms") {
        parts.push(
          `<text x="${Number(x(p.requestsPerSecond)) + 5}" y="${Number(y(p[key])) - 5}" fill="#555">${p.concurrency}</text>`,
        );
      }
    }
    const legendY = key === "p50Ms" ? TOP + 10 : TOP + 26;
    parts.push(
      `<line x1="${WIDTH - 120}" y1="${legendY}" x2="${WIDTH - 100}" y2="${legendY}" stroke="${color}" stroke-width="2"/>`,
      `<text x="${WIDTH - 95}" y="${legendY + 4}">${label}</text>`,
    );
  }
  parts.push(`<text x="${WIDTH - 120}" y="${TOP + 44}" fill="#555">labels: concurrency</text>`, "</svg>");
  return `${parts.join("\n")}\n`;
}
