/**
 * `text` cut to at most `maxBytes` bytes of UTF-8, ending in "..." where it was cut (a
 * character split by the cut becomes U+FFFD). For messages that echo a client's strings
 * into a place with a size limit.
 */
export function cutToBytes(text: string, maxBytes: number): string {
  // A string of n UTF-16 units is at most 3n bytes: most messages skip the count.
  if (text.length * 3 <= maxBytes || Buffer.byteLength(text) <= maxBytes) return text;
  return `${Buffer.from(text)
    .subarray(0, Math.max(0, maxBytes - 3))
    .toString()}...`;
}
