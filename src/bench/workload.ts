import { readFileSync } from "node:fs";
import { allocateArray, type DataType, elementByteSize, type NumericDataType } from "../core/datatype.ts";
import type { TensorMetadata } from "../core/model.ts";
import { elementCount, type Tensor } from "../core/tensor.ts";
import { seeded } from "./seeded-random.ts";

// What the benchmark sends: each step's inputs, made from the model's metadata. Fixed
// values (`--input sr=16000`) and shapes for variable dims (`--shape input=1,512`) come
// from the command line; the rest is seeded random data, or chunks of a WAV file for the
// model's audio input. The same seed gives the same data on every run, so answers can be
// checked against an in-process run of the same steps.
//
// The steps take turns with a fixed number of sets of inputs, each made once, as Triton's
// perf_analyzer reuses the data it made: the load generator shares the machine with the
// server, and making and encoding fresh data for every request cost it about as much CPU
// as the server's own request handling (JSON: 40 % of its time went to formatting
// floats). Clients may keep what they encode of a set: its tensors are the same objects
// each time, never changed. There are up to MAX_SETS sets, fewer for large inputs.

const MAX_SETS = 256;
/** What the sets may hold in all, in bytes of tensor data. */
const SETS_BYTES = 16 * 1024 * 1024;
/** A guess at a BYTES element's size, for the bound above. */
const BYTES_ELEMENT_GUESS = 16;

export interface WorkloadOptions {
  /** Fixed values of inputs, by name. */
  readonly values: ReadonlyMap<string, readonly number[]>;
  /** Client shapes of inputs, by name (overrides the metadata's -1 dims). */
  readonly shapes: ReadonlyMap<string, readonly number[]>;
  /** A WAV file whose samples feed `audioInput`. */
  readonly wavFile?: string;
  /** The input the audio goes to (default: the first FP32 input). */
  readonly audioInput?: string;
  readonly seed: number;
}

/** Mono samples in [-1, 1] from a PCM16 or float32 WAV (channels averaged). */
function readWav(path: string): Float32Array {
  const bytes = readFileSync(path);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.toString("latin1", 0, 4) !== "RIFF" || bytes.toString("latin1", 8, 12) !== "WAVE") {
    throw new Error(`'${path}' is not a WAV file`);
  }
  let format = 0;
  let channels = 1;
  let bits = 16;
  for (let offset = 12; offset + 8 <= bytes.byteLength; ) {
    const id = bytes.toString("latin1", offset, offset + 4);
    const size = view.getUint32(offset + 4, true);
    const body = offset + 8;
    if (id === "fmt ") {
      format = view.getUint16(body, true);
      channels = view.getUint16(body + 2, true);
      bits = view.getUint16(body + 14, true);
    } else if (id === "data") {
      const width = bits / 8;
      const frames = Math.floor(Math.min(size, bytes.byteLength - body) / (width * channels));
      const out = new Float32Array(frames);
      for (let f = 0; f < frames; f++) {
        let sum = 0;
        for (let c = 0; c < channels; c++) {
          const at = body + (f * channels + c) * width;
          if (format === 3 && bits === 32) sum += view.getFloat32(at, true);
          else if (format === 1 && bits === 16) sum += view.getInt16(at, true) / 32768;
          else throw new Error(`'${path}': only PCM16 and float32 WAV files are read`);
        }
        out[f] = sum / channels;
      }
      return out;
    }
    offset = body + size + (size % 2);
  }
  throw new Error(`'${path}' has no data chunk`);
}

export class Workload {
  readonly #inputs: readonly TensorMetadata[];
  readonly #options: WorkloadOptions;
  readonly #shapes = new Map<string, number[]>();
  readonly #audio: Float32Array | undefined;
  readonly #audioInput: string | undefined;
  readonly #made = new Map<number, ReadonlyMap<string, Tensor>>();
  /** How many sets of inputs the steps take turns with. */
  readonly sets: number;

  constructor(inputs: readonly TensorMetadata[], options: WorkloadOptions) {
    this.#inputs = inputs;
    this.#options = options;
    for (const input of inputs) {
      const given = options.shapes.get(input.name);
      // The batch dimension (a leading -1) is 1: each request is one row; other variable dims 1 unless given.
      const shape = given ? [...given] : input.shape.map((d) => (d < 0 ? 1 : d));
      this.#shapes.set(input.name, shape);
    }
    let stepBytes = 0;
    for (const input of inputs) {
      const width = elementByteSize(input.datatype) ?? BYTES_ELEMENT_GUESS;
      stepBytes += width * elementCount(this.#shapes.get(input.name)!);
    }
    this.sets = Math.max(1, Math.min(MAX_SETS, Math.floor(SETS_BYTES / Math.max(1, stepBytes))));
    for (const name of [...options.values.keys(), ...options.shapes.keys()]) {
      if (!inputs.some((i) => i.name === name)) throw new Error(`the model has no input '${name}'`);
    }
    if (options.wavFile !== undefined) {
      this.#audio = readWav(options.wavFile);
      this.#audioInput = options.audioInput ?? inputs.find((i) => i.datatype === "FP32")?.name;
      if (this.#audioInput === undefined) throw new Error("the model has no FP32 input for the audio");
      if (!inputs.some((i) => i.name === this.#audioInput))
        throw new Error(`the model has no input '${this.#audioInput}' for the audio (--audio-input)`);
    }
  }

  /** The inputs of step `step` of sequence (or client) `sequence`: one of the sets. */
  step(sequence: number, step: number): ReadonlyMap<string, Tensor> {
    // Consecutive steps of a sequence take consecutive sets (consecutive chunks of a WAV
    // file), and neighbouring sequences start apart.
    const set = (sequence * 7 + step) % this.sets;
    let made = this.#made.get(set);
    if (made === undefined) {
      made = this.#make(set);
      this.#made.set(set, made);
    }
    return made;
  }

  #make(set: number): ReadonlyMap<string, Tensor> {
    const random = seeded(this.#options.seed + set * 7919);
    const tensors = new Map<string, Tensor>();
    for (const input of this.#inputs) {
      const shape = this.#shapes.get(input.name)!;
      const fixed = this.#options.values.get(input.name);
      const count = elementCount(shape);
      tensors.set(input.name, {
        datatype: input.datatype,
        shape,
        data: fixed
          ? fill(input.datatype, count, (i) => fixed[i % fixed.length]!)
          : input.name === this.#audioInput
            ? this.#audioChunk(set, count)
            : randomData(input.datatype, count, random),
      });
    }
    return tensors;
  }

  #audioChunk(set: number, count: number): Float32Array {
    const audio = this.#audio!;
    const out = new Float32Array(count);
    // Consecutive chunks of the file, wrapping around.
    const start = set * count;
    for (let i = 0; i < count; i++) out[i] = audio[(start + i) % audio.length]!;
    return out;
  }
}

function fill(datatype: DataType, count: number, value: (i: number) => number): Tensor["data"] {
  if (datatype === "BYTES") return Array.from({ length: count }, (_, i) => Buffer.from(String(value(i))));
  const data = allocateArray(datatype as NumericDataType, count);
  const big = data instanceof BigInt64Array || data instanceof BigUint64Array;
  for (let i = 0; i < count; i++) (data as Float64Array)[i] = (big ? BigInt(value(i)) : value(i)) as number;
  return data;
}

function randomData(datatype: DataType, count: number, random: () => number): Tensor["data"] {
  switch (datatype) {
    case "FP32":
    case "FP64":
      // Audio-like: small values around zero.
      return fill(datatype, count, () => (random() - 0.5) * 0.6);
    case "BOOL":
      return fill(datatype, count, () => (random() < 0.5 ? 0 : 1));
    case "FP16":
    case "BF16":
      // Bit patterns of small positive numbers (0x3000..0x3bff: about 0.125 to 1).
      return fill(datatype, count, () => 0x3000 + Math.floor(random() * 0xc00));
    default:
      return fill(datatype, count, () => Math.floor(random() * 16));
  }
}
