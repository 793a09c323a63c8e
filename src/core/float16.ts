// IEEE 754 half precision from any double (float32 values and JSON numbers alike) and to
// single precision, used to store state as FP16 (`store_states_as_fp16`), to read FP16
// from JSON numbers and to check FP16 tensors. Round-to-nearest-even, as hardware does.

const f64 = new Float64Array(1);
const u32 = new Uint32Array(f64.buffer);
/** The index of a double's high word in `u32` (its sign, exponent and top mantissa bits). */
const HIGH = new Uint8Array(Uint16Array.of(1).buffer)[0] === 1 ? 1 : 0;

/** `value` (≥ 0) rounded to an integer, an exact tie to the even one. */
function roundHalfEven(value: number): number {
  const floor = Math.floor(value);
  const rest = value - floor; // exact: `value` is below 2^11 here, far from 2^53
  return rest > 0.5 || (rest === 0.5 && floor % 2 === 1) ? floor + 1 : floor;
}

/**
 * The half-precision bits nearest `value`, any double (a float32 is one, exactly): rounded
 * once, to the nearest, a tie to the even. A double rounded to float32 first, and that to
 * half, may be rounded twice to another half than numpy's float16 (1.0004882812509095 is
 * 0x3c01, not 0x3c00). NaN keeps the top of its payload, made quiet.
 */
export function float16Bits(value: number): number {
  f64[0] = value;
  const high = u32[HIGH]!;
  const sign = (high >>> 16) & 0x8000;
  if (Number.isNaN(value)) return sign | 0x7e00 | ((high >>> 10) & 0x3ff);
  const magnitude = Math.abs(value);
  // 65520 lies halfway between the largest half (65504) and 2^16: it and above are infinite.
  if (magnitude >= 65520) return sign | 0x7c00;
  // Below the smallest normal half (2^-14), in units of the smallest subnormal (2^-24):
  // 1024 of them, rounded up, is the smallest normal's bits.
  if (magnitude < 2 ** -14) return sign | roundHalfEven(magnitude * 2 ** 24);
  let exponent = Math.floor(Math.log2(magnitude));
  if (2 ** exponent > magnitude) exponent--;
  else if (2 ** (exponent + 1) <= magnitude) exponent++;
  // The significand in units of its last bit, [1024, 2048); 2048 carries into the exponent,
  // which the bits' sum does too.
  const significand = roundHalfEven(magnitude * 2 ** (10 - exponent));
  return sign | (((exponent + 15) << 10) + significand - 1024);
}

export function float16BitsToFloat32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >>> 10) & 0x1f;
  const mantissa = bits & 0x3ff;
  if (exponent === 0) return sign * mantissa * 2 ** -24;
  if (exponent === 0x1f) return mantissa ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
}

export function toFloat16Array(values: Float32Array | Float64Array): Uint16Array {
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = float16Bits(values[i]!);
  return out;
}

export function fromFloat16Array(bits: Uint16Array): Float32Array {
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = float16BitsToFloat32(bits[i]!);
  return out;
}
