// The top frames of V8 CPU profiles (node --cpu-prof): self time by function, for the
// notes that compare a change's profile before and after.
//
//   node --import tsx bench/profile-top.ts <file.cpuprofile>... [--top 25]
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { top: { type: "string", default: "25" } },
});
for (const file of positionals) {
  const profile = JSON.parse(readFileSync(file, "utf8")) as {
    nodes: Node[];
    samples: number[];
    timeDeltas: number[];
  };
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<string, number>();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const us = profile.timeDeltas[i] ?? 0;
    total += us;
    const frame = byId.get(id)!.callFrame;
    const where =
      frame.url === ""
        ? ""
        : ` ${frame.url.replace(/^.*\/(node_modules\/|src\/)/, "$1")}:${frame.lineNumber + 1}`;
    const key = `${frame.functionName || "(anonymous)"}${where}`;
    self.set(key, (self.get(key) ?? 0) + us);
  });
  const idle = self.get("(idle)") ?? 0;
  process.stdout.write(
    `${file}: ${(total / 1e6).toFixed(2)} s sampled, ${((100 * idle) / total).toFixed(1)} % idle\n`,
  );
  for (const [key, us] of [...self].sort((a, b) => b[1] - a[1]).slice(0, Number(values.top))) {
    process.stdout.write(`  ${((100 * us) / total).toFixed(1).padStart(5)} %  ${key}\n`);
  }
}
