import { invalidArg } from "../../../core/errors.ts";
import type { SequenceId } from "../../../core/infer.ts";
import type { ServedModel } from "../../../core/model.ts";
import { pathSequenceId } from "../sequence-routes.ts";

// The query of a stream's upgrade request: `sequence_id` (decimal digits are a uint64,
// anything else a string; `id_type` as for the sequences API), `sequence_start` (`false`:
// the stream continues that sequence, begun elsewhere: over HTTP, on a stream that was
// cut, on another replica), `format` (`framed` or `raw`) and `binary_data_output` (`true`
// or `false`). Checked before the upgrade, so a bad query is an ordinary HTTP 400.

type StreamFormat = "framed" | "raw";

export interface StreamOptions {
  /** The client's sequence id; undefined when the server assigns one. */
  readonly sequenceId: SequenceId | undefined;
  /** The stream goes on with a sequence begun before it, instead of starting it. */
  readonly continues: boolean;
  readonly format: StreamFormat;
  /** The connection's choice; undefined: binary for binary messages, JSON for text ones. */
  readonly binaryOutput: boolean | undefined;
}

const KNOWN = ["sequence_id", "id_type", "sequence_start", "format", "binary_data_output"];

function single(query: Readonly<Record<string, unknown>>, name: string): string | undefined {
  const value = query[name];
  if (value === undefined || typeof value === "string") return value;
  throw invalidArg(`query parameter '${name}' is given more than once`);
}

function readSequenceId(
  model: ServedModel,
  text: string | undefined,
  type: string | undefined,
): SequenceId | undefined {
  if (text === undefined) {
    if (type !== undefined) throw invalidArg("query parameter 'id_type' needs a 'sequence_id'");
    return undefined;
  }
  if (model.sequences === undefined) {
    throw invalidArg(
      `model '${model.name}' is not served with sequence batching: its streams carry independent requests, so 'sequence_id' does not apply`,
    );
  }
  if (text === "")
    throw invalidArg("query parameter 'sequence_id' is empty: omit it to have the server assign an id");
  const id = pathSequenceId(text, type);
  if (id === 0n)
    throw invalidArg("sequence id 0 means no id: omit 'sequence_id' to have the server assign one");
  model.sequences.checkId(id);
  return id;
}

function readContinues(start: string | undefined, id: SequenceId | undefined): boolean {
  if (start === undefined || start === "true") return false;
  if (start !== "false") {
    throw invalidArg(`Unable to parse 'sequence_start': expected 'true' or 'false', got '${start}'`);
  }
  if (id === undefined) {
    throw invalidArg(
      "query parameter 'sequence_start=false' continues a sequence: name it with 'sequence_id'",
    );
  }
  return true;
}

function readFormat(model: ServedModel, text: string | undefined): StreamFormat {
  if (text === undefined || text === "framed") return "framed";
  if (text !== "raw") throw invalidArg(`unknown stream format '${text}': expected 'framed' or 'raw'`);
  const count = model.config.inputs.length;
  if (count !== 1) {
    throw invalidArg(
      `format 'raw' sends the bytes of a model's only input, but model '${model.name}' has ${count} inputs`,
    );
  }
  return "raw";
}

function readBinaryOutput(text: string | undefined): boolean | undefined {
  if (text === undefined) return undefined;
  if (text === "true") return true;
  if (text === "false") return false;
  throw invalidArg(`Unable to parse 'binary_data_output': expected 'true' or 'false', got '${text}'`);
}

/** The stream's options for `model`, from the upgrade request's query. */
export function readStreamOptions(
  query: Readonly<Record<string, unknown>>,
  model: ServedModel,
): StreamOptions {
  for (const name in query) {
    if (!KNOWN.includes(name)) {
      throw invalidArg(`unknown query parameter '${name}' for a stream: expected ${KNOWN.join(", ")}`);
    }
  }
  const sequenceId = readSequenceId(model, single(query, "sequence_id"), single(query, "id_type"));
  return {
    sequenceId,
    continues: readContinues(single(query, "sequence_start"), sequenceId),
    format: readFormat(model, single(query, "format")),
    binaryOutput: readBinaryOutput(single(query, "binary_data_output")),
  };
}
