import { endianness } from "node:os";
import protobuf from "protobufjs";

// The repeated number fields of tensor messages (KServe's InferTensorContents, TensorFlow's
// TensorProto), decoded straight into typed arrays. protobufjs decodes them into
// JavaScript arrays, a Long object per 64-bit integer, which the frontend then copied into
// the typed array a tensor is, on the event loop: 132 ms for a million 1-byte int32
// varints, 451 ms for a million int64s (bench/grpc-typed-contents.ts, medians). Here packed
// floats and doubles are one copy, and varints are read in one loop into the array they
// end in (4.8 and 21 ms). The field kinds covered are those of the two messages; another
// is refused when the decoder is installed.
//
// Each array is sized to its values and owns its buffer (never a view of the received
// message), so a tensor can take it as its data and move it to a worker. The message's other fields
// decode as protobufjs decodes them, without keeping unknown fields.

type NumberKind = "float" | "double" | "int32" | "uint32" | "int64" | "uint64" | "bool";

/** The typed array a repeated number field decodes into. */
export type DecodedNumbers =
  | Float32Array
  | Float64Array
  | Int32Array
  | Uint32Array
  | BigInt64Array
  | BigUint64Array
  | Uint8Array;

interface NumberArrayType {
  new (length: number): DecodedNumbers;
  readonly BYTES_PER_ELEMENT: number;
}

const ARRAY_OF: Readonly<Record<NumberKind, NumberArrayType>> = {
  float: Float32Array,
  double: Float64Array,
  int32: Int32Array,
  uint32: Uint32Array,
  int64: BigInt64Array,
  uint64: BigUint64Array,
  bool: Uint8Array,
};

/** The wire type of one element sent unpacked (packed runs are wire type 2). */
const ELEMENT_WIRE: Readonly<Record<NumberKind, number>> = {
  float: 5,
  double: 1,
  int32: 0,
  uint32: 0,
  int64: 0,
  uint64: 0,
  bool: 0,
};

const LITTLE_ENDIAN = endianness() === "LE";

type FieldPlan =
  | { readonly kind: "numbers"; readonly name: string; readonly number: NumberKind }
  | {
      readonly kind: "message";
      readonly name: string;
      readonly repeated: boolean;
      readonly type: protobuf.Type;
    }
  | { readonly kind: "bytes"; readonly name: string; readonly repeated: boolean }
  | { readonly kind: "scalar"; readonly name: string; readonly read: "int32" | "uint32" | "bool" };

const typedFields = new WeakMap<protobuf.Type, ReadonlyMap<number, FieldPlan>>();

function fieldPlan(type: protobuf.Type, field: protobuf.Field): FieldPlan {
  field.resolve();
  const name = field.name;
  const resolved = field.resolvedType;
  const unsupported = (): Error =>
    new Error(
      `${type.fullName}.${name} (${field.repeated ? "repeated " : ""}${field.type}) has no typed-array decoding`,
    );
  if (field.map) throw unsupported();
  if (resolved instanceof protobuf.Type) {
    if (field.delimited) throw unsupported();
    return { kind: "message", name, repeated: field.repeated, type: resolved };
  }
  const scalar = resolved instanceof protobuf.Enum ? "int32" : field.type;
  if (scalar === "bytes") return { kind: "bytes", name, repeated: field.repeated };
  if (field.repeated) {
    if (!(scalar in ARRAY_OF)) throw unsupported();
    return { kind: "numbers", name, number: scalar as NumberKind };
  }
  if (scalar === "int32" || scalar === "uint32" || scalar === "bool")
    return { kind: "scalar", name, read: scalar };
  throw unsupported();
}

/** Bytes a decoded element of `type`'s field `id` takes, when the field decodes into a typed array. */
export function typedElementBytes(type: protobuf.Type, id: number): number | undefined {
  const plan = typedFields.get(type)?.get(id);
  return plan?.kind === "numbers" ? ARRAY_OF[plan.number].BYTES_PER_ELEMENT : undefined;
}

const outOfRange = (): RangeError => new RangeError("index out of range");
const badVarint = (): Error => new Error("invalid varint encoding");

/** Where the last varint read ended. */
let next = 0;

/** The low 32 bits of the varint at `pos`, which ends before `end`. */
function varint32(buf: Uint8Array, pos: number, end: number): number {
  let value = 0;
  for (let shift = 0; shift < 70; shift += 7) {
    if (pos >= end) throw outOfRange();
    const byte = buf[pos++]!;
    if (shift < 32) value |= (byte & 0x7f) << shift;
    if (byte < 0x80) {
      next = pos;
      return value;
    }
  }
  throw badVarint();
}

/** The varint at `pos` as two 32-bit halves (high half in `high`). */
let high = 0;
function varint64(buf: Uint8Array, pos: number, end: number): number {
  let low = 0;
  let hi = 0;
  for (let i = 0; i < 10; i++) {
    if (pos >= end) throw outOfRange();
    const byte = buf[pos++]!;
    const bits = byte & 0x7f;
    if (i < 4) low |= bits << (7 * i);
    else if (i === 4) {
      low |= bits << 28;
      hi = bits >>> 4;
    } else hi |= bits << (7 * i - 32);
    if (byte < 0x80) {
      next = pos;
      high = hi;
      return low;
    }
  }
  throw badVarint();
}

/** How many varints `buf` [from, to) holds: each ends at its one byte with the high bit clear. */
function varintCount(buf: Uint8Array, from: number, to: number): number {
  let count = 0;
  for (let i = from; i < to; i++) if (buf[i]! < 0x80) count++;
  return count;
}

/** Reads the varints of `buf` [from, to) into `out` from index `i`; returns the index after them. */
function varints32(out: Int32Array, i: number, buf: Uint8Array, from: number, to: number): number {
  let pos = from;
  while (pos < to) {
    const byte = buf[pos]!;
    if (byte < 0x80) {
      out[i++] = byte;
      pos++;
    } else {
      out[i++] = varint32(buf, pos, to);
      pos = next;
    }
  }
  return i;
}

/** As varints32, each value 1 when any of its bits is set (protobufjs's reading of a bool). */
function varintBools(out: Uint8Array, i: number, buf: Uint8Array, from: number, to: number): number {
  let pos = from;
  while (pos < to) {
    const low = varint64(buf, pos, to);
    out[i++] = low !== 0 || high !== 0 ? 1 : 0;
    pos = next;
  }
  return i;
}

/** As varints32, each 64-bit value as two 32-bit halves, low first (a little-endian BigInt64Array's layout). */
function varints64(halves: Uint32Array, i: number, buf: Uint8Array, from: number, to: number): number {
  let pos = from;
  while (pos < to) {
    halves[2 * i] = varint64(buf, pos, to);
    halves[2 * i + 1] = high;
    i++;
    pos = next;
  }
  return i;
}

/** As varints64, on a big-endian machine. */
function varintBigInts(
  out: BigInt64Array | BigUint64Array,
  signed: boolean,
  i: number,
  buf: Uint8Array,
  from: number,
  to: number,
): number {
  let pos = from;
  while (pos < to) {
    const low = varint64(buf, pos, to);
    const bits = (BigInt(high >>> 0) << 32n) | BigInt(low >>> 0);
    out[i++] = signed ? BigInt.asIntN(64, bits) : bits;
    pos = next;
  }
  return i;
}

/** A field's values as they arrive, in one or more runs. */
class NumbersBuilder {
  readonly #kind: NumberKind;
  #array: DecodedNumbers | undefined;
  #length = 0;

  constructor(kind: NumberKind, existing: DecodedNumbers | undefined) {
    this.#kind = kind;
    this.#array = existing;
    this.#length = existing?.length ?? 0;
  }

  /**
   * Room for `more` values. A field's first run gets exactly its room (the common case:
   * one packed run, kept as is); after that the array doubles, so that a field sent as
   * many runs, or one value at a time, costs time in proportion to its values (growing
   * each run exactly copied the array once per run). finish() trims the slack, so a
   * field may briefly take three times its size.
   */
  #reserve(more: number, exact: boolean): DecodedNumbers {
    const array = this.#array;
    const needed = this.#length + more;
    if (array !== undefined && needed <= array.length) return array;
    const size = exact && array === undefined ? needed : Math.max(needed, (array?.length ?? 0) * 2, 8);
    const grown = new ARRAY_OF[this.#kind](size);
    if (array !== undefined && this.#length > 0) (grown as Uint8Array).set(array as Uint8Array);
    this.#array = grown;
    return grown;
  }

  /** A packed run: the bytes [from, to) of `buf`. */
  addRun(buf: Uint8Array, from: number, to: number): void {
    const kind = this.#kind;
    if (kind === "float" || kind === "double") {
      const width = kind === "float" ? 4 : 8;
      if ((to - from) % width !== 0) throw outOfRange();
      const count = (to - from) / width;
      const array = this.#reserve(count, true) as Float32Array | Float64Array;
      const at = this.#length;
      if (LITTLE_ENDIAN) {
        new Uint8Array(array.buffer, at * width, count * width).set(buf.subarray(from, to));
      } else {
        const view = new DataView(buf.buffer, buf.byteOffset + from, to - from);
        for (let i = 0; i < count; i++) {
          array[at + i] = width === 4 ? view.getFloat32(i * width, true) : view.getFloat64(i * width, true);
        }
      }
      this.#length += count;
      return;
    }
    if (to > from && buf[to - 1]! >= 0x80) throw outOfRange();
    this.#addVarints(this.#reserve(varintCount(buf, from, to), true), buf, from, to);
  }

  /** One element sent on its own (unpacked), at `pos`; returns where it ends. */
  addOne(buf: Uint8Array, pos: number, end: number): number {
    const array = this.#reserve(1, false);
    const kind = this.#kind;
    if (kind === "float" || kind === "double") {
      const width = kind === "float" ? 4 : 8;
      if (pos + width > end) throw outOfRange();
      const view = new DataView(buf.buffer, buf.byteOffset + pos, width);
      (array as Float64Array)[this.#length++] =
        width === 4 ? view.getFloat32(0, true) : view.getFloat64(0, true);
      return pos + width;
    }
    let last = pos;
    while (last < end && buf[last]! >= 0x80) last++;
    if (last >= end) throw outOfRange();
    this.#addVarints(array, buf, pos, last + 1);
    return last + 1;
  }

  /** Appends the varints of `buf` [from, to), whose last byte ends one, to `array`. */
  #addVarints(array: DecodedNumbers, buf: Uint8Array, from: number, to: number): void {
    // One loop per element width, each writing one kind of array, so that each stays
    // monomorphic: 32-bit values are stored as their low 32 bits through an Int32Array
    // (a Uint32Array's bits are the same), 64-bit ones as two halves, low first.
    const { buffer, byteOffset } = array;
    switch (this.#kind) {
      case "int32":
      case "uint32":
        this.#length = varints32(
          new Int32Array(buffer, byteOffset, array.length),
          this.#length,
          buf,
          from,
          to,
        );
        return;
      case "bool":
        this.#length = varintBools(array as Uint8Array, this.#length, buf, from, to);
        return;
      default:
        if (LITTLE_ENDIAN) {
          const halves = new Uint32Array(buffer, byteOffset, array.length * 2);
          this.#length = varints64(halves, this.#length, buf, from, to);
        } else {
          this.#length = varintBigInts(
            array as BigInt64Array,
            this.#kind === "int64",
            this.#length,
            buf,
            from,
            to,
          );
        }
    }
  }

  finish(): DecodedNumbers {
    const array = this.#array ?? new ARRAY_OF[this.#kind](0);
    return this.#length === array.length ? array : array.slice(0, this.#length);
  }
}

type Decoded = Record<string, unknown>;

/** protobufjs's generated decode, as message decoders call each other: reader, length, end group, depth, message to merge into. */
type Decode = (
  reader: protobuf.Reader,
  length: number,
  endGroup: undefined,
  depth: number,
  into?: unknown,
) => unknown;

function decoderOf(
  type: protobuf.Type,
  plans: ReadonlyMap<number, FieldPlan>,
): (
  reader: protobuf.Reader | Uint8Array,
  length?: number,
  endGroup?: number,
  depth?: number,
  into?: Decoded,
) => Decoded {
  const Message = type.ctor as unknown as new () => Decoded;
  return (input, length, endGroup, depth = 0, into) => {
    const r = input instanceof protobuf.Reader ? input : protobuf.Reader.create(input);
    if (depth > protobuf.Reader.recursionLimit) throw new Error("max depth exceeded");
    const buf = r.buf;
    let end = r.len;
    let outer: number | undefined;
    if (length !== undefined) {
      end = r.pos + length;
      if (end > r.len) throw outOfRange();
      outer = r.len;
      r.len = end;
    }
    const message = into ?? new Message();
    let builders: Map<string, NumbersBuilder> | undefined;
    while (r.pos < end) {
      const tag = r.tag();
      if (tag === endGroup) {
        endGroup = undefined;
        break;
      }
      const wire = tag & 7;
      const plan = plans.get(tag >>> 3);
      if (plan === undefined) {
        r.skipType(wire, depth, tag >>> 3);
        continue;
      }
      switch (plan.kind) {
        case "numbers": {
          if (wire !== 2 && wire !== ELEMENT_WIRE[plan.number]) break;
          builders ??= new Map();
          let builder = builders.get(plan.name);
          if (builder === undefined) {
            // A message merged into keeps its values (protobufjs's constructor gives every
            // repeated field an empty array of its own).
            const existing = message[plan.name];
            builder = new NumbersBuilder(
              plan.number,
              ArrayBuffer.isView(existing) ? (existing as DecodedNumbers) : undefined,
            );
            builders.set(plan.name, builder);
          }
          if (wire === 2) {
            const size = r.size();
            const from = r.pos;
            if (from + size > end) throw outOfRange();
            builder.addRun(buf, from, from + size);
            r.pos = from + size;
          } else {
            r.pos = builder.addOne(buf, r.pos, end);
          }
          continue;
        }
        case "message": {
          if (wire !== 2) break;
          const decode = plan.type.decode as unknown as Decode;
          if (plan.repeated)
            repeatedOf(message, plan.name).push(decode.call(plan.type, r, r.size(), undefined, depth + 1));
          else
            message[plan.name] = decode.call(
              plan.type,
              r,
              r.size(),
              undefined,
              depth + 1,
              message[plan.name],
            );
          continue;
        }
        case "bytes": {
          if (wire !== 2) break;
          const value = r.bytes();
          if (plan.repeated) repeatedOf(message, plan.name).push(value);
          else if (value.length > 0) message[plan.name] = value;
          else delete message[plan.name];
          continue;
        }
        case "scalar": {
          if (wire !== 0) break;
          const value = r[plan.read]();
          if (value !== 0 && value !== false) message[plan.name] = value;
          else delete message[plan.name];
          continue;
        }
      }
      // A known field sent with another wire type is skipped, as protobufjs skips it.
      r.skipType(wire, depth, tag >>> 3);
    }
    if (builders !== undefined) for (const [name, builder] of builders) message[name] = builder.finish();
    if (outer !== undefined) {
      if (r.pos !== end) throw outOfRange();
      r.len = outer;
    }
    if (endGroup !== undefined) throw new Error("missing end group");
    return message;
  };
}

function repeatedOf(message: Decoded, name: string): unknown[] {
  if (!Object.hasOwn(message, name)) message[name] = [];
  return message[name] as unknown[];
}

/**
 * Makes `type` (and every message that contains it, whose decoders call its decode)
 * decode its repeated number fields into typed arrays. Throws, at start-up, for a field
 * kind this decoding does not cover.
 */
export function decodeNumbersIntoTypedArrays(type: protobuf.Type): void {
  const plans = new Map<number, FieldPlan>();
  for (const field of type.fieldsArray) plans.set(field.id, fieldPlan(type, field));
  // protobufjs generates a type's codecs on first use and would then replace this decode.
  type.setup();
  type.decode = decoderOf(type, plans) as unknown as typeof type.decode;
  typedFields.set(type, plans);
}
