import protobuf from "protobufjs";
import { typedElementBytes } from "./typed-array-fields.ts";

// What a request message takes once decoded, bounded before it is decoded. protobufjs
// makes an object of each 64-bit integer (a Long, 40 bytes or more for one byte on the
// wire), each bytes or string value and each message, and a JavaScript number of every
// other value (8 bytes for a 1-byte varint). Tensor values are the exception: they decode
// into typed arrays (typed-array-fields.ts) and count at their element size. The walk
// reads the wire format with the message's schema, counting values without making them:
// a field of raw bytes is skipped by its length.

/** Rough V8 heap costs of a decoded value, in bytes. */
const LONG_BYTES = 48;
const NUMBER_BYTES = 8;
const VIEW_BYTES = 96;
const STRING_BYTES = 32;
const MESSAGE_BYTES = 64;
/** Deeper than this, a message is refused (TensorFlow's protos nest tensors in variants). */
const MAX_DEPTH = 64;

type Wire = "varint" | "fixed32" | "fixed64";

type FieldPlan =
  | { readonly kind: "message"; readonly plan: () => MessagePlan }
  | { readonly kind: "scalar"; readonly wire: Wire; readonly bytes: number }
  | { readonly kind: "bytes" }
  | { readonly kind: "string" };

type MessagePlan = ReadonlyMap<number, FieldPlan>;

const SCALARS: Readonly<Record<string, { wire: Wire; bytes: number }>> = {
  double: { wire: "fixed64", bytes: NUMBER_BYTES },
  float: { wire: "fixed32", bytes: NUMBER_BYTES },
  int32: { wire: "varint", bytes: NUMBER_BYTES },
  uint32: { wire: "varint", bytes: NUMBER_BYTES },
  sint32: { wire: "varint", bytes: NUMBER_BYTES },
  fixed32: { wire: "fixed32", bytes: NUMBER_BYTES },
  sfixed32: { wire: "fixed32", bytes: NUMBER_BYTES },
  bool: { wire: "varint", bytes: NUMBER_BYTES },
  int64: { wire: "varint", bytes: LONG_BYTES },
  uint64: { wire: "varint", bytes: LONG_BYTES },
  sint64: { wire: "varint", bytes: LONG_BYTES },
  fixed64: { wire: "fixed64", bytes: LONG_BYTES },
  sfixed64: { wire: "fixed64", bytes: LONG_BYTES },
};

function typePlan(type: string, resolved: protobuf.ReflectionObject | null): FieldPlan {
  if (resolved instanceof protobuf.Type) {
    // Made on first use (a message type may contain itself), then kept.
    let plan: MessagePlan | undefined;
    return { kind: "message", plan: () => (plan ??= planOf(resolved)) };
  }
  if (resolved instanceof protobuf.Enum) return { kind: "scalar", wire: "varint", bytes: NUMBER_BYTES };
  if (type === "bytes") return { kind: "bytes" };
  if (type === "string") return { kind: "string" };
  const scalar = SCALARS[type];
  return scalar === undefined ? { kind: "bytes" } : { kind: "scalar", ...scalar };
}

const plans = new WeakMap<protobuf.Type, MessagePlan>();

function planOf(type: protobuf.Type): MessagePlan {
  let plan = plans.get(type);
  if (plan !== undefined) return plan;
  const fields = new Map<number, FieldPlan>();
  for (const field of type.fieldsArray) {
    field.resolve();
    if (field instanceof protobuf.MapField) {
      // A map's entries are messages of a key (field 1) and a value (field 2).
      const entry = new Map<number, FieldPlan>([
        [1, typePlan(field.keyType, null)],
        [2, typePlan(field.type, field.resolvedType)],
      ]);
      fields.set(field.id, { kind: "message", plan: () => entry });
    } else {
      const plan = typePlan(field.type, field.resolvedType);
      const typed = typedElementBytes(type, field.id);
      fields.set(field.id, typed !== undefined && plan.kind === "scalar" ? { ...plan, bytes: typed } : plan);
    }
  }
  plan = fields;
  plans.set(type, plan);
  return plan;
}

/** A message the walk gives up on: what it was about to cost, or why. */
class DecodedSizeExceeded extends Error {}

class Walk {
  readonly #bytes: Uint8Array;
  readonly #limit: number;
  #total = 0;

  constructor(bytes: Uint8Array, limit: number) {
    this.#bytes = bytes;
    this.#limit = limit;
  }

  #add(bytes: number): void {
    this.#total += bytes;
    if (this.#total > this.#limit) throw new DecodedSizeExceeded();
  }

  /** Where #varint read up to. */
  #next = 0;

  /** Reads a varint at `pos` (its end in #next); -1 when it runs past `end`. */
  #varint(pos: number, end: number): number {
    let value = 0;
    let scale = 1;
    const stop = Math.min(end, pos + 10);
    for (let i = pos; i < stop; i++) {
      const byte = this.#bytes[i]!;
      value += (byte & 0x7f) * scale;
      scale *= 128;
      if (byte < 0x80) {
        this.#next = i + 1;
        return value;
      }
    }
    return -1;
  }

  /**
   * Counts what the message in [start, end) decodes to. Malformed input ends the walk
   * quietly: decoding it then fails with protobufjs's own error.
   */
  message(plan: MessagePlan, start: number, end: number, depth: number): void {
    if (depth > MAX_DEPTH) throw new DecodedSizeExceeded(`messages nested more than ${MAX_DEPTH} deep`);
    this.#add(MESSAGE_BYTES);
    let pos = start;
    while (pos < end) {
      const tag = this.#varint(pos, end);
      if (tag < 0) return;
      pos = this.#next;
      const field = plan.get(Math.floor(tag / 8));
      const wire = tag % 8;
      if (wire === 0) {
        if (this.#varint(pos, end) < 0) return;
        pos = this.#next;
      } else if (wire === 1) pos += 8;
      else if (wire === 5) pos += 4;
      else if (wire === 2) {
        const size = this.#varint(pos, end);
        if (size < 0) return;
        const from = this.#next;
        if (from + size > end) return;
        pos = from + size;
        if (field?.kind === "message") this.message(field.plan(), from, pos, depth + 1);
        else if (field?.kind === "scalar") this.#add(this.#packedCount(field.wire, from, pos) * field.bytes);
        else if (field?.kind === "string") this.#add(STRING_BYTES + size);
        else if (field?.kind === "bytes") this.#add(VIEW_BYTES);
        continue;
      } else if (wire === 3) {
        // A group: the decoder skips it whole and decodes what follows, so the walk goes
        // on after it too (stopping there let what follows be decoded uncounted).
        pos = this.#afterGroup(pos, end, Math.floor(tag / 8));
        if (pos < 0) return;
        continue;
      } else return;
      if (field?.kind === "scalar") this.#add(field.bytes);
    }
  }

  /** Where the group of `field` starting at `pos` ends, skipped as the decoder skips it; -1 if malformed. */
  #afterGroup(pos: number, end: number, field: number): number {
    const reader = protobuf.Reader.create(this.#bytes);
    reader.pos = pos;
    reader.len = end;
    try {
      reader.skipType(3, 0, field);
    } catch {
      return -1;
    }
    return reader.pos;
  }

  #packedCount(wire: Wire, from: number, to: number): number {
    if (wire === "fixed32") return Math.floor((to - from) / 4);
    if (wire === "fixed64") return Math.floor((to - from) / 8);
    // Each varint ends with the one byte of it whose high bit is clear.
    let count = 0;
    const bytes = this.#bytes;
    for (let i = from; i < to; i++) if (bytes[i]! < 0x80) count++;
    return count;
  }
}

/**
 * Why the last message was refused. grpc-js answers a deserializer's throw with INTERNAL
 * "Error deserializing request" and no reason; the call's status is then replaced with
 * this one (decompression-limit.ts), in the same turn of the event loop.
 */
export class DecodeRefusal {
  #message: string | undefined;

  set(message: string): void {
    this.#message = message;
  }

  take(): string | undefined {
    const message = this.#message;
    this.#message = undefined;
    return message;
  }
}

/**
 * A deserializer of `type` that refuses, before decoding, a message whose values would
 * take more than `maxBytes` once decoded, telling `refusal` why.
 */
export function boundedDecoder(
  type: protobuf.Type,
  maxBytes: number,
  refusal: DecodeRefusal | undefined,
): (bytes: Uint8Array) => protobuf.Message {
  if (refusal === undefined || !Number.isFinite(maxBytes)) return (bytes) => type.decode(bytes);
  const plan = planOf(type);
  return (bytes) => {
    const walk = new Walk(bytes, maxBytes);
    try {
      walk.message(plan, 0, bytes.byteLength, 0);
    } catch (error) {
      if (!(error instanceof DecodedSizeExceeded)) throw error;
      refusal.set(
        error.message !== ""
          ? `the request message has ${error.message}`
          : `the request message would take more than ${maxBytes} bytes once decoded (a tensor's typed values take their element's size each, a bytes or string value about ${VIEW_BYTES} bytes): send large tensors as raw contents, or raise --grpc-max-decompressed-bytes`,
      );
      throw error;
    }
    return type.decode(bytes);
  };
}
