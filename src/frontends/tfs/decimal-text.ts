// Floating-point values as TF-Serving's REST API writes them (json_tensor.cc, WriteDecimal),
// which OVMS's REST API uses: printf's "%g" (six significant digits), or all the digits
// the type needs ("%.9g" for a float, "%.17g" for a double) when six do not read back as
// the same value; a whole number not in exponent form gets ".0", so that clients (numpy,
// pandas) read floats as floats; NaN and ±Infinity as those words.

/** `value` as C's printf "%.{precision}g" writes it (exponent with a sign and two digits at least). */
export function formatG(value: number, precision: number): string {
  if (value === 0) return Object.is(value, -0) ? "-0" : "0";
  const sign = value < 0 ? "-" : "";
  const { digits, exponent } = significantDigits(Math.abs(value), precision);
  // The exponent after rounding to `precision` digits decides the form, as in C.
  if (exponent < -4 || exponent >= precision) {
    const mantissa = withoutTrailingZeros(`${digits[0]}.${digits.slice(1)}`);
    return `${sign}${mantissa}e${exponent < 0 ? "-" : "+"}${String(Math.abs(exponent)).padStart(2, "0")}`;
  }
  const fixed =
    exponent >= 0
      ? `${digits.slice(0, exponent + 1)}.${digits.slice(exponent + 1)}`
      : `0.${"0".repeat(-exponent - 1)}${digits}`;
  return sign + withoutTrailingZeros(fixed);
}

/**
 * `magnitude` (> 0) rounded to `count` significant digits, as C rounds them: to the
 * nearest, and an exact tie to the even digit. JavaScript's toExponential rounds a tie
 * away from zero, so a value that may sit on one is rounded from its exact digits.
 */
function significantDigits(magnitude: number, count: number): { digits: string; exponent: number } {
  const next = magnitude.toExponential(count);
  if (next[next.indexOf("e") - 1] !== "5") return splitExponential(magnitude.toExponential(count - 1));
  // 101 significant digits: past the digits any double's tie could need.
  const exact = splitExponential(magnitude.toExponential(100));
  let kept = exact.digits.slice(0, count);
  const rest = exact.digits.slice(count);
  const last = kept.charCodeAt(count - 1) - 48;
  const up = rest[0]! > "5" || (rest[0] === "5" && (/[1-9]/.test(rest.slice(1)) || last % 2 === 1));
  if (!up) return { digits: kept, exponent: exact.exponent };
  kept = (BigInt(kept) + 1n).toString();
  // 99…9 rounded up is 10…0: one digit more, the exponent one higher.
  return kept.length > count
    ? { digits: kept.slice(0, count), exponent: exact.exponent + 1 }
    : { digits: kept, exponent: exact.exponent };
}

function splitExponential(text: string): { digits: string; exponent: number } {
  const e = text.indexOf("e");
  return { digits: text.slice(0, e).replace(".", ""), exponent: Number(text.slice(e + 1)) };
}

function withoutTrailingZeros(text: string): string {
  return text.includes(".") ? text.replace(/\.?0*$/, "") : text;
}

/** The JSON text TF-Serving writes for `value`, a float32 (`float32`) or a double. */
export function decimalText(value: number, float32: boolean): string {
  if (Number.isNaN(value)) return "NaN";
  if (!Number.isFinite(value)) return value < 0 ? "-Infinity" : "Infinity";
  let text = formatG(value, 6);
  const readBack = float32 ? Math.fround(Number(text)) : Number(text);
  if (readBack !== value) text = formatG(value, float32 ? 9 : 17);
  return text.includes(".") || text.includes("e") ? text : `${text}.0`;
}

/** The elements of `array` as TF-Serving writes them, comma-separated. */
export function decimalsText(array: Float32Array | Float64Array): string {
  const float32 = array instanceof Float32Array;
  const parts = new Array<string>(array.length);
  for (let i = 0; i < array.length; i++) parts[i] = decimalText(array[i]!, float32);
  return parts.join(",");
}
