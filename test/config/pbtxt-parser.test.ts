import assert from "node:assert/strict";
import { describe, it } from "node:test";
import protobuf from "protobufjs";
import { parseModelConfigText } from "../../src/config/index.ts";
import { PbtxtParser } from "../../src/config/pbtxt/pbtxt-parser.ts";
import { assertConfigError } from "./config-assertions.ts";

const FILE = "models/m/config.pbtxt";
const parse = (text: string) => parseModelConfigText(text, { file: FILE }).message;

describe("config.pbtxt syntax", () => {
  it("reads fields, nested messages in every spelling, comments and separators", () => {
    const message = parse(`
      # a comment line
      name: "m"  # a trailing comment
      max_batch_size: 8;
      version_policy: { latest { num_versions: 2 } },
      optimization < graph: < level: -1 > >
      dynamic_batching { }
    `);
    assert.deepEqual(message, {
      name: "m",
      max_batch_size: 8,
      version_policy: { latest: { num_versions: 2 } },
      optimization: { graph: { level: -1 } },
      dynamic_batching: {},
    });
  });

  it("reads repeated fields by repetition and by list, and mixes both", () => {
    const message = parse(`
      input { name: "a" dims: 1 dims: 2 }
      input [ { name: "b" dims: [ 3, -1 ] }, < name: "c" dims: [] > ]
      input: [ { name: "d" } ]
      instance_group [ ]
    `);
    assert.deepEqual(message.input, [
      { name: "a", dims: [1n, 2n] },
      { name: "b", dims: [3n, -1n] },
      { name: "c", dims: [] },
      { name: "d" },
    ]);
    assert.deepEqual(message.instance_group, []);
  });

  it("reads strings with either quote, escapes and adjacent concatenation", () => {
    const message = parse(String.raw`
      name: 'single "quoted"'
      platform: "tab\there\nnew \\ \" \' \x41\101\u00e9" ' joined'
      default_model_filename: "caf\303\251.onnx"
    `);
    assert.equal(message.name, 'single "quoted"');
    assert.equal(message.platform, "tab\there\nnew \\ \" ' AAé joined");
    assert.equal(message.default_model_filename, "café.onnx");
  });

  it("joins a surrogate pair written as two \\u escapes into one character, as protobuf's C++ parser", () => {
    const message = parse(String.raw`
      name: "\uD83D\uDE00 \ud83d\ude00 \U0001F600 \U0000D83D\uDE00"
      platform: "\uD83D\u0041 \uDE00"
    `);
    assert.equal(message.name, "\u{1F600} \u{1F600} \u{1F600} \u{1F600}");
    // A surrogate not in a pair is no character: it reads as U+FFFD, and what follows is kept.
    assert.equal(message.platform, "\uFFFDA \uFFFD");
  });

  it("keeps 64-bit integers exact and reads hex, octal and negative integers", () => {
    const message = parse(`
      max_batch_size: 0x10
      version_policy { specific { versions: [ 9007199254740993, 017, -0x7fffffffffffffff ] } }
      dynamic_batching { max_queue_delay_microseconds: 18446744073709551615 }
    `);
    assert.equal(message.max_batch_size, 16);
    assert.deepEqual((message.version_policy as { specific: { versions: bigint[] } }).specific.versions, [
      9007199254740993n,
      15n,
      -0x7fffffffffffffffn,
    ]);
    assert.equal(
      (message.dynamic_batching as { max_queue_delay_microseconds: bigint }).max_queue_delay_microseconds,
      18446744073709551615n,
    );
  });

  it("reads floats in every form, and integers where floats are expected", () => {
    const message = parse(`
      metric_tags { key: "x" value: "y" }
      model_metrics { metric_control { histogram_options { buckets: [ 1.5, 1e-3, .5, 1.0f, 2, inf, -inf, -Infinity, nan, - 2.5 ] } } }
    `);
    const buckets = (
      message.model_metrics as { metric_control: [{ histogram_options: { buckets: number[] } }] }
    ).metric_control[0].histogram_options.buckets;
    assert.deepEqual(buckets.slice(0, 7), [1.5, 0.001, 0.5, 1, 2, Infinity, -Infinity]);
    assert.equal(buckets[7], -Infinity);
    assert.ok(Number.isNaN(buckets[8]));
    assert.equal(buckets[9], -2.5);
  });

  it("reads booleans as true/false/True/False/t/f/1/0", () => {
    const message = parse(`
      instance_group { passive: true }  instance_group { passive: False }
      instance_group { passive: True }  instance_group { passive: f }
      instance_group { passive: t }     instance_group { passive: 0 }
      instance_group { passive: 1 }
    `);
    const passive = (message.instance_group as { passive: boolean }[]).map((g) => g.passive);
    assert.deepEqual(passive, [true, false, true, false, true, false, true]);
  });

  it("reads enums by name and by number", () => {
    const message = parse(`input { data_type: TYPE_FP16 format: 2 } instance_group { kind: 2 }`);
    assert.deepEqual(message.input, [{ data_type: "TYPE_FP16", format: "FORMAT_NCHW" }]);
    assert.deepEqual(message.instance_group, [{ kind: "KIND_CPU" }]);
  });

  it("reads map fields entry by entry, in lists, with scalar and message values", () => {
    const message = parse(`
      parameters { key: "a" value { string_value: "1" } }
      parameters: [ { key: "b" value: { string_value: "2" } }, { key: "c" } ]
      cc_model_filenames { key: "7.5" value: "t4.onnx" }
      dynamic_batching { priority_queue_policy { key: 2 value { max_queue_size: 5 } } }
    `);
    assert.deepEqual(message.parameters, {
      a: { string_value: "1" },
      b: { string_value: "2" },
      c: {},
    });
    assert.deepEqual(message.cc_model_filenames, { "7.5": "t4.onnx" });
    assert.deepEqual(message.dynamic_batching, { priority_queue_policy: { "2": { max_queue_size: 5 } } });
  });

  it("keeps a map key that names an Object property, such as __proto__, as any other key", () => {
    const message = parse(`
      parameters { key: "__proto__" value { string_value: "x" } }
      parameters { key: "b" value { string_value: "y" } }
      metric_tags { key: "__proto__" value: "z" }
    `);
    // A computed key: a plain `__proto__:` in a literal would set the prototype instead.
    assert.deepEqual(message.parameters, { ["__proto__"]: { string_value: "x" }, b: { string_value: "y" } });
    assert.deepEqual(message.metric_tags, { ["__proto__"]: "z" });
  });

  it("keeps the last entry of a map key given twice, as protobuf does", () => {
    const parsed = parseModelConfigText(
      'parameters { key: "k" value { string_value: "1" } }\n' +
        'parameters [ { key: "__proto__" }, { key: "k" value { string_value: "2" } } ]\n' +
        'parameters { key: "__proto__" value { string_value: "3" } }\n' +
        'metric_tags { key: "t" value: "a" } metric_tags { key: "t" }',
      { file: FILE },
    );
    const { parameters, metric_tags } = parsed.message;
    // A computed key: a plain `__proto__:` in a literal would set the prototype instead.
    assert.deepEqual(parameters, { k: { string_value: "2" }, ["__proto__"]: { string_value: "3" } });
    // An entry without a value sets the value's default, as in protobuf.
    assert.deepEqual(metric_tags, { t: "" });
    // Messages about the value point at the entry that was kept.
    assert.deepEqual(parsed.locations.get(parameters as object, "k"), { line: 2, column: 47 });
  });

  it("records where each value was written", () => {
    const parsed = parseModelConfigText('name: "m"\n\n  max_batch_size: 4\ninput [\n  { name: "x" }\n]', {
      file: FILE,
    });
    assert.deepEqual(parsed.locations.get(parsed.message, "max_batch_size"), { line: 3, column: 3 });
    const inputs = parsed.message.input as object[];
    assert.deepEqual(parsed.locations.get(inputs, 0), { line: 5, column: 3 });
  });
});

describe("config.pbtxt errors", () => {
  const cases: { name: string; text: string; line: number; column: number; includes: string }[] = [
    {
      name: "a misspelt field, with a suggestion",
      text: 'name: "m"\nplatform: "onnxruntime_onnx"\n\n\n\n\n  max_bach_size: 4',
      line: 7,
      column: 3,
      includes: "unknown field 'max_bach_size' in inference.ModelConfig (did you mean 'max_batch_size'?)",
    },
    {
      name: "a field unknown in a nested message",
      text: "input {\n  name: 'x'\n  dtype: TYPE_FP32\n}",
      line: 3,
      column: 3,
      includes: "unknown field 'dtype' in inference.ModelInput",
    },
    {
      name: "a string for an integer",
      text: 'max_batch_size: "abc"',
      line: 1,
      column: 17,
      includes: `field 'max_batch_size' expects an integer, got "abc"`,
    },
    {
      name: "a float for an integer",
      text: "max_batch_size: 1.5",
      line: 1,
      column: 17,
      includes: "expects an integer, got 1.5",
    },
    {
      name: "an integer out of range",
      text: "max_batch_size: 2147483648",
      line: 1,
      column: 17,
      includes: "value 2147483648 is out of range for field 'max_batch_size' (int32)",
    },
    {
      name: "a negative unsigned integer",
      text: "dynamic_batching {\n  max_queue_delay_microseconds: -1\n}",
      line: 2,
      column: 33,
      includes: "out of range for field 'max_queue_delay_microseconds' (uint64)",
    },
    {
      name: "a minus sign on zero for an unsigned integer",
      text: "dynamic_batching {\n  max_queue_delay_microseconds: - 0\n}",
      line: 2,
      column: 33,
      includes: "field 'max_queue_delay_microseconds' is unsigned (uint64), so it takes no '-', got -0",
    },
    {
      name: "an octal integer for a float",
      text: "sequence_batching { direct { minimum_slot_utilization: 010 } }",
      line: 1,
      column: 56,
      includes: "field 'minimum_slot_utilization' expects a decimal number, got 010",
    },
    {
      name: "a hex integer for a double",
      text: "model_metrics { metric_control { histogram_options { buckets: [ 1, -0x10 ] } } }",
      line: 1,
      column: 68,
      includes: "field 'buckets' expects a decimal number, got -0x10",
    },
    {
      name: "a quoted string for an enum (JSON configs may quote enums, config.pbtxt may not)",
      text: 'input {\n  name: "x"\n  data_type: "TYPE_FP32"\n}',
      line: 3,
      column: 14,
      includes:
        "field 'data_type' expects a value of enum inference.DataType as a bare name or a number, got the quoted string \"TYPE_FP32\"",
    },
    {
      name: "a field given twice",
      text: 'name: "a"\nname: "b"',
      line: 2,
      column: 1,
      includes: "field 'name' given twice",
    },
    {
      name: "an unknown enum value",
      text: "input [\n  {\n    name: 'x'\n    data_type: TYPE_FP33\n  }\n]",
      line: 4,
      column: 16,
      includes: "unknown value 'TYPE_FP33' for enum field 'data_type' (inference.DataType)",
    },
    {
      name: "an enum number out of range",
      text: "input { format: 7 }",
      line: 1,
      column: 17,
      includes: "unknown value 7 for enum field 'format'",
    },
    {
      name: "a string for a bool",
      text: "instance_group { passive: 'yes' }",
      line: 1,
      column: 27,
      includes: "field 'passive' expects true or false",
    },
    {
      name: "an unterminated string",
      text: 'name: "abc\nmax_batch_size: 1',
      line: 1,
      column: 7,
      includes: "unterminated string",
    },
    {
      name: "a missing closing brace",
      text: "sequence_batching {\n  direct {\n    max_queue_delay_microseconds: 1\n  }\n",
      line: 5,
      column: 1,
      includes: "missing '}' to close 'sequence_batching' opened at 1:19",
    },
    {
      name: "a stray closing brace",
      text: 'name: "m"\n}',
      line: 2,
      column: 1,
      includes: "expected a field name, got '}'",
    },
    {
      name: "a missing colon",
      text: 'name "m"',
      line: 1,
      column: 6,
      includes: "expected ':' after field 'name'",
    },
    {
      name: "two members of a oneof",
      text: "dynamic_batching { }\nsequence_batching { }",
      line: 2,
      column: 1,
      includes: "field 'sequence_batching' cannot be set together with 'dynamic_batching'",
    },
    {
      name: "a list for a single field",
      text: "max_batch_size: [1, 2]",
      line: 1,
      column: 17,
      includes: "field 'max_batch_size' is not repeated",
    },
    {
      name: "an unclosed list",
      text: "input { dims: [1, 2 }",
      line: 1,
      column: 21,
      includes: "expected ',' or ']' in the list of 'dims'",
    },
    {
      name: "a bad escape",
      text: "name: 'a\\qb'",
      line: 1,
      column: 9,
      includes: "invalid escape '\\q' in string",
    },
    {
      name: "a bad octal number",
      text: "max_batch_size: 09",
      line: 1,
      column: 17,
      includes: "invalid octal number '09'",
    },
    {
      name: "a number run into letters",
      text: "max_batch_size: 12ab",
      line: 1,
      column: 17,
      includes: "invalid number '12ab'",
    },
    {
      name: "a stray character",
      text: 'name: "m" @',
      line: 1,
      column: 11,
      includes: "unexpected character '@'",
    },
    {
      name: "a message for a scalar",
      text: "max_batch_size { }",
      line: 1,
      column: 16,
      includes: "expected ':' after field 'max_batch_size'",
    },
    {
      name: "a scalar for a message",
      text: "dynamic_batching: 4",
      line: 1,
      column: 19,
      includes: "expected '{' to start field 'dynamic_batching'",
    },
  ];
  for (const c of cases) {
    it(`reports ${c.name} at its line and column`, () => {
      assertConfigError(() => parse(c.text), {
        file: FILE,
        line: c.line,
        column: c.column,
        includes: c.includes,
      });
    });
  }
});

describe("config.pbtxt nesting", () => {
  // inference.ModelConfig nests 6 messages deep at most; a type that contains itself can
  // nest as deep as the text does.
  const nodeType = protobuf
    .parse('syntax = "proto3"; message Node { Node child = 1; string name = 2; }')
    .root.resolveAll()
    .lookupType("Node");
  const nested = (levels: number) => `name: "root"\n${"child { ".repeat(levels)}${"}".repeat(levels)}`;

  it("reports nesting deeper than 100 levels at the brace that goes past, however deep the text", () => {
    for (const levels of [101, 20000]) {
      assertConfigError(() => new PbtxtParser(nested(levels), FILE).parse(nodeType), {
        file: FILE,
        line: 2,
        column: "child { ".length * 100 + "child ".length + 1,
        includes: "nesting deeper than 100 levels",
      });
    }
    // 100 levels are read.
    let message = new PbtxtParser(nested(100), FILE).parse(nodeType).message;
    for (let level = 0; level < 100; level++) message = message.child as typeof message;
    assert.deepEqual(message, {});
  });
});
