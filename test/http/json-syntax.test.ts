import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { jsonSyntaxFault, parseRequestJson } from "../../src/frontends/common/json-syntax.ts";

function faultOf(text: string): ReturnType<typeof jsonSyntaxFault> {
  try {
    JSON.parse(text);
  } catch (error) {
    return jsonSyntaxFault(text, error);
  }
  throw new Error(`${text} parsed`);
}

describe("a malformed JSON text, described as rapidjson describes it", () => {
  it("names each kind of fault with rapidjson's words and its byte offset", () => {
    const cases: readonly (readonly [string, string, number])[] = [
      ["", "The document is empty.", 0],
      [" \n", "The document is empty.", 0],
      ['{"a":}', "Invalid value.", 5],
      ["[1,]", "Invalid value.", 3],
      ["tru", "Invalid value.", 3],
      ["{", "Missing a name for object member.", 1],
      ['{"a":1,}', "Missing a name for object member.", 7],
      ['{"a" 1}', "Missing a colon after a name of object member.", 5],
      ['{"a":1', "Missing a comma or '}' after an object member.", 6],
      ["[1 2]", "Missing a comma or ']' after an array element.", 3],
      ['"abc', "Missing a closing quotation mark in string.", 4],
      ['"a\\qb"', "Invalid escape character in string.", 3],
      ['"\\u12G4"', "Incorrect hex digit after \\u escape in string.", 5],
      ['"a\u0001"', "Invalid encoding in string.", 2],
      ["1.", "Missing fraction part in number.", 2],
      ["1e", "Missing exponent in number.", 2],
      ["1 2", "The document root must not be followed by other values.", 2],
    ];
    for (const [text, description, byteOffset] of cases) {
      assert.deepEqual(faultOf(text), { description, byteOffset }, JSON.stringify(text));
    }
  });

  it("counts the offset in bytes of UTF-8, as a client's buffer holds it", () => {
    // "é" and "€" take 2 and 3 bytes: the unexpected x is the 7th character, byte 9.
    assert.deepEqual(faultOf('{"é€":x}'), { description: "Invalid value.", byteOffset: 9 });
  });

  it("leaves out the offset of an unexpected token in a long text rather than parse it many times", () => {
    const long = `[${"1,".repeat(40_000)}x]`;
    assert.deepEqual(faultOf(long), { description: "Invalid value.", byteOffset: undefined });
    assert.throws(() => parseRequestJson(long), {
      message: "failed to parse the request JSON buffer: Invalid value.",
    });
    // A fault V8 places is placed at any length.
    assert.deepEqual(faultOf(`[${"1,".repeat(40_000)}1 2]`), {
      description: "Missing a comma or ']' after an array element.",
      byteOffset: 80_003,
    });
  });

  it("refuses a request body in Triton's words, and parses a good one", () => {
    assert.throws(() => parseRequestJson("{not json"), {
      message: "failed to parse the request JSON buffer: Missing a name for object member. at 1",
    });
    assert.deepEqual(parseRequestJson('{"inputs": []}'), { inputs: [] });
  });
});
