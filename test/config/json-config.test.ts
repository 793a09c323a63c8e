import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import { parseModelConfigFile, parseModelConfigText, toTritonJson } from "../../src/config/index.ts";
import { assertConfigError, FIXTURES } from "./config-assertions.ts";

const FILE = "models/m/config.json";
const parse = (text: string) => parseModelConfigText(text, { file: FILE }).message;

describe("config.json", () => {
  it("reads the same config as config.pbtxt (proto names, JSON names, numbers as strings, enums in any case)", async () => {
    const pbtxt = await parseModelConfigFile(join(FIXTURES, "add_sub", "config.pbtxt"));
    const json = await parseModelConfigFile(join(FIXTURES, "add_sub", "config.json"));
    assert.equal(pbtxt.format, "pbtxt");
    assert.equal(json.format, "json");
    assert.deepEqual(json.message, pbtxt.message);
  });

  for (const fixture of [
    "image_classifier",
    "sequence_direct",
    "implicit_state",
    "full_options",
    "silero_vad",
  ]) {
    it(`reads ${fixture} from its own Triton JSON form identically`, async () => {
      const pbtxt = await parseModelConfigFile(join(FIXTURES, fixture, "config.pbtxt"));
      // The file rendered as protobuf JSON (strings for 64-bit integers), then read back.
      const text = JSON.stringify(toTritonJson(pbtxt.message, { int64: "string" }));
      const json = parseModelConfigText(text, { file: FILE });
      const reprinted = toTritonJson(json.message, { int64: "string" });
      assert.deepEqual(reprinted, toTritonJson(pbtxt.message, { int64: "string" }));
    });
  }

  it("keeps 64-bit integers exact whether written as numbers or strings", () => {
    const message = parse(
      '{"dynamic_batching": {"max_queue_delay_microseconds": 18446744073709551615},' +
        ' "version_policy": {"specific": {"versions": ["9007199254740993", 2]}}}',
    );
    assert.deepEqual(message, {
      dynamic_batching: { max_queue_delay_microseconds: 18446744073709551615n },
      version_policy: { specific: { versions: [9007199254740993n, 2n] } },
    });
  });

  it("treats null as not set and accepts NaN/Infinity strings for floats", () => {
    const message = parse(
      '{"name": null, "model_metrics": {"metric_control": [{"histogram_options": {"buckets": ["Infinity", 0.5]}}]}}',
    );
    assert.deepEqual(message, {
      model_metrics: { metric_control: [{ histogram_options: { buckets: [Infinity, 0.5] } }] },
    });
  });

  it("keeps a map key that names an Object property, such as __proto__, as any other key", () => {
    const message = parse(
      '{"parameters": {"__proto__": {"string_value": "x"}, "b": {"string_value": "y"}},' +
        ' "metric_tags": {"__proto__": "z"}}',
    );
    // A computed key: a plain `__proto__:` in a literal would set the prototype instead.
    assert.deepEqual(message.parameters, { ["__proto__"]: { string_value: "x" }, b: { string_value: "y" } });
    assert.deepEqual(message.metric_tags, { ["__proto__"]: "z" });
  });

  it("records lines of JSON values", () => {
    const parsed = parseModelConfigText('{\n  "name": "m",\n  "input": [\n    {"name": "x"}\n  ]\n}', {
      file: FILE,
    });
    assert.deepEqual(parsed.locations.get(parsed.message, "input"), { line: 3, column: 3 });
    assert.deepEqual(parsed.locations.get(parsed.message.input as object, 0), { line: 4, column: 5 });
  });

  const errors: { name: string; text: string; line: number; includes: string }[] = [
    {
      name: "a syntax error, at its line",
      text: '{\n  "name": "m",\n  "max_batch_size": 4,\n}',
      line: 4,
      includes: "expected a member name, got '}'",
    },
    { name: "an unterminated string", text: '{\n  "name": "m\n}', line: 2, includes: "unterminated string" },
    {
      name: "truncated JSON",
      text: '{"name": "m",\n"input": [',
      line: 2,
      includes: "unexpected end of file",
    },
    {
      name: "trailing content",
      text: '{"name": "m"}\n{}',
      line: 2,
      includes: "unexpected content after the JSON value",
    },
    {
      name: "a bad value deep in a list, by its path",
      text: '{\n  "input": [\n    {"name": "a", "dims": [1]},\n    {"name": "b", "dims": [2, "abc"]}\n  ]\n}',
      line: 4,
      includes: `field 'input[1].dims[1]' expects an integer, got "abc"`,
    },
    {
      name: "an unknown field, by its path",
      text: '{"input": [{"name": "a",\n "dtype": "TYPE_FP32"}]}',
      line: 2,
      includes: "unknown field 'input[0].dtype' in inference.ModelInput",
    },
    {
      name: "an unknown enum value",
      text: '{"input": [{"data_type": "TYPE_FP33"}]}',
      line: 1,
      includes: "unknown value 'TYPE_FP33' for enum field 'input[0].data_type' (inference.DataType)",
    },
    {
      name: "the same field under both names",
      text: '{"max_batch_size": 1,\n"maxBatchSize": 2}',
      line: 2,
      includes: "field 'max_batch_size' given twice",
    },
    {
      name: "a map key __proto__ given twice",
      text: '{"parameters": {"__proto__": {"string_value": "1"},\n"__proto__": {}}}',
      line: 2,
      includes: "key '__proto__' given twice in map field 'parameters'",
    },
    {
      name: "an object where a list is expected",
      text: '{"input": {"name": "a"}}',
      line: 1,
      includes: "field 'input' expects a list, got an object",
    },
    {
      name: "a list where a message is expected",
      text: '{"dynamic_batching": []}',
      line: 1,
      includes: "field 'dynamic_batching' expects an object, got a list",
    },
    {
      name: "a bool given as a string",
      text: '{"instance_group": [{"passive": "true"}]}',
      line: 1,
      includes: "expects true or false",
    },
    {
      name: "two members of a oneof",
      text: '{"sequence_batching": {"direct": {},\n"oldest": {}}}',
      line: 2,
      includes: "field 'oldest' cannot be set together with 'direct'",
    },
    {
      name: "a config that is not an object",
      text: "[1]",
      line: 1,
      includes: "the configuration expects an object, got a list",
    },
  ];
  for (const c of errors) {
    it(`reports ${c.name}`, () => {
      assertConfigError(() => parse(c.text), { file: FILE, line: c.line, includes: c.includes });
    });
  }

  it("reports nesting deeper than 100 levels where it goes past, however deep the text", () => {
    // {"input": [[[...]]]}: the object is the first level, so the 100th '[' opens the 101st.
    const nested = (lists: number) => `{\n"input": ${"[".repeat(lists)}${"]".repeat(lists)}}`;
    const column = '"input": '.length + 100;
    for (const lists of [100, 20000]) {
      assertConfigError(() => parse(nested(lists)), {
        file: FILE,
        line: 2,
        column,
        includes: "nesting deeper than 100 levels",
      });
    }
    // 100 levels are read, and the schema then refuses the list.
    assertConfigError(() => parse(nested(99)), {
      file: FILE,
      line: 2,
      includes: "field 'input[0]' expects an object, got a list",
    });
  });

  it("reports a file that cannot be read", async () => {
    const missing = join(FIXTURES, "no_such_model", "config.pbtxt");
    await assert.rejects(parseModelConfigFile(missing), (error: Error) => {
      assert.ok(error.message.startsWith(`${missing}: cannot read the model configuration`), error.message);
      return true;
    });
  });
});
