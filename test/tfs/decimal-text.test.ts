import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { test } from "node:test";
import { decimalText, formatG } from "../../src/frontends/tfs/decimal-text.ts";
import { restTensorText } from "../../src/frontends/tfs/rest-json.ts";

// TF-Serving's REST API (and so OVMS's) writes floats with printf's "%g", or with all the
// digits the type needs when six do not read back the same, and ".0" on whole numbers, so
// that numpy reads 1.0 as a float where KServe's 1 reads as an integer.

test("floats as TF-Serving writes them: '%g', full digits when six do not read back, '.0' on whole numbers", () => {
  const float = (x: number) => decimalText(Math.fround(x), true);
  assert.deepEqual(
    [1, 100, 1.5, 0.2, 0.044262707233428955, 9000000, 0.00003, 1234565, -0, 1e-7, 3.4028234663852886e38].map(
      float,
    ),
    [
      "1.0",
      "100.0",
      "1.5",
      "0.2",
      "0.0442627072",
      "9e+06",
      "3e-05",
      "1234565.0",
      "-0.0",
      "1e-07",
      "3.40282347e+38",
    ],
  );
  assert.deepEqual(
    [0.1, 1 / 3, 2, 1e21, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY].map((x) =>
      decimalText(x, false),
    ),
    ["0.1", "0.33333333333333331", "2.0", "1e+21", "NaN", "Infinity", "-Infinity"],
  );
});

test("formatG writes what C's printf writes, on values of every magnitude", (t) => {
  // Exact ties among them: C rounds those to the even digit.
  const values: number[] = [
    0, 1, -1, 0.5, 2.5, 0.125, -350283556894923.6, 999999.5, 1e100, 1e-300, 123456, 1234567, 0.0001, 0.00001,
  ];
  for (let i = 0; i < 1000; i++)
    values.push((Math.random() - 0.5) * 10 ** Math.floor(Math.random() * 80 - 40));
  let printf: string[];
  try {
    const format = values.map(() => "%.6g\\n%.9g\\n%.17g\\n").join("");
    // 100 digits: read back (as a long double, by printf) as exactly this double.
    const args = values.flatMap((v) => [v, v, v].map((x) => x.toPrecision(100)));
    printf = execFileSync("printf", [format, ...args], { encoding: "utf8" }).split("\n");
  } catch {
    t.skip("no printf to compare with");
    return;
  }
  const ours = values.flatMap((v) => [formatG(v, 6), formatG(v, 9), formatG(v, 17)]);
  assert.deepEqual(ours, printf.slice(0, ours.length));
});

test("an OVMS REST answer's floats read back as floats", () => {
  const text = restTensorText("y", {
    datatype: "FP32",
    shape: [2, 2],
    data: Float32Array.of(1, 2.5, -0, Number.NaN),
  });
  assert.equal(text, "[[1.0,2.5],[-0.0,NaN]]");
});
