import { nonFiniteValue, parseJsonWithNonFinite } from "../../src/frontends/common/non-finite-json.ts";

/**
 * JSON as Triton writes it and tritonclient reads it (rapidjson): `NaN`, `Infinity` and
 * `-Infinity` are numbers. Parsed by the server's own reader, whose marks become numbers.
 */
export function parseTritonJson(text: string): unknown {
  return JSON.parse(parseJsonWithNonFinite(text).text, (_key, value) => nonFiniteValue(value) ?? value);
}
