import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import protoLoader from "@grpc/proto-loader";
import protobuf from "protobufjs";
import {
  loadModelConfigRoot,
  MODEL_CONFIG_PROTO_PATH,
  modelConfigType,
  parseModelConfigFile,
  resolveModelConfig,
  toTritonJson,
} from "../../src/config/index.ts";
import { FIXTURES } from "./config-assertions.ts";
import { MODEL_IO } from "./model-io-fixtures.ts";
import { TRITON_ENUMS, TRITON_MESSAGES } from "./triton-model-config-fields.ts";

/** Every message's fields and every enum's values of a proto, written as the table writes them. */
function describeProto(root: protobuf.Root): {
  messages: Record<string, string[]>;
  enums: Record<string, string[]>;
} {
  const messages: Record<string, string[]> = {};
  const enums: Record<string, string[]> = {};
  const inPackage = (name: string) => name.replace(/^\.inference\./, "");
  const walk = (namespace: protobuf.NamespaceBase) => {
    for (const nested of namespace.nestedArray) {
      if (nested instanceof protobuf.Type) {
        messages[inPackage(nested.fullName)] = nested.fieldsArray.map((field) => {
          const type = field.resolvedType === null ? field.type : inPackage(field.resolvedType.fullName);
          const shape =
            field instanceof protobuf.MapField
              ? `map<${field.keyType}, ${type}>`
              : field.repeated
                ? `repeated ${type}`
                : type;
          const oneof = field.partOf === null ? "" : ` (oneof ${field.partOf.name})`;
          return `${field.id} ${field.name}: ${shape}${oneof}`;
        });
      } else if (nested instanceof protobuf.Enum) {
        enums[inPackage(nested.fullName)] = Object.entries(nested.values).map(
          ([name, id]) => `${id} ${name}`,
        );
      }
      if (nested instanceof protobuf.Namespace) walk(nested);
    }
  };
  walk(root.lookup("inference") as protobuf.Namespace);
  return { messages, enums };
}

/** protobufjs writes unset messages as null; Triton's JSON leaves them out. */
function withoutNulls(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutNulls);
  if (typeof value !== "object" || value === null) return value;
  return Object.fromEntries(
    Object.entries(value).flatMap(([key, item]) => (item === null ? [] : [[key, withoutNulls(item)]])),
  );
}

describe("proto/model_config.proto", () => {
  it("loads with @grpc/proto-loader, as the gRPC frontend loads it", () => {
    const definition = protoLoader.loadSync(MODEL_CONFIG_PROTO_PATH, {
      keepCase: true,
      longs: String,
      enums: String,
    });
    assert.ok(definition["inference.ModelConfig"]);
    assert.ok(definition["inference.ModelSequenceBatching"]);
  });

  it("gives one shared protobufjs Root", () => {
    assert.equal(loadModelConfigRoot(), loadModelConfigRoot());
    assert.equal(modelConfigType().fullName, ".inference.ModelConfig");
  });

  it("has Triton's messages, field names, numbers and types, and enum values", () => {
    const { messages, enums } = describeProto(loadModelConfigRoot());
    assert.deepEqual(messages, TRITON_MESSAGES);
    assert.deepEqual(enums, TRITON_ENUMS);
    const wire = modelConfigType().encode({ max_batch_size: 8, backend: "x" }).finish();
    assert.deepEqual([...wire], [0x20, 0x08, 0x8a, 0x01, 0x01, 0x78]);
  });

  it("carries a resolved config's Triton JSON through protobuf and back (the gRPC ModelConfig answer)", async () => {
    const modelDir = join(FIXTURES, "implicit_state");
    const parsed = await parseModelConfigFile(join(modelDir, "config.pbtxt"));
    const { completed, tritonJson } = resolveModelConfig({
      parsed,
      modelName: "implicit_state",
      modelDir,
      modelIo: MODEL_IO.implicit_state,
    });
    const type = modelConfigType();
    const json = toTritonJson(completed, { int64: "string" });
    assert.equal(type.verify(type.fromObject(json)), null);
    const decoded = type.toObject(type.decode(type.encode(type.fromObject(json)).finish()), {
      longs: String,
      enums: String,
      defaults: true,
      arrays: true,
      objects: true,
      oneofs: false,
    });
    assert.deepEqual(withoutNulls(decoded), json);
    // Triton's HTTP form differs only in 64-bit integers being numbers.
    const batching = tritonJson.sequence_batching as { state: { dims: unknown[] }[] };
    assert.deepEqual(batching.state[1]?.dims, [-1, 2]);
  });
});
