// Text helpers of the session_context handler: a document cut into passages, and each
// text's features for the text_embedder model (hashed word and character-trigram counts,
// what a tokenizer would hand an embedding model). Pure functions, so a test can compute
// the expected answers exactly as the handler does.

export const FEATURES = 1024;

/** Passages of whole sentences, about `target` characters each. */
export function passagesOf(document: string, target = 320): string[] {
  const sentences = document
    .replace(/\s+/g, " ")
    .split(/(?<=[.!?])\s+/)
    .filter((s) => s.trim() !== "");
  const passages: string[] = [];
  let current = "";
  for (const sentence of sentences) {
    current = current === "" ? sentence : `${current} ${sentence}`;
    if (current.length >= target) {
      passages.push(current);
      current = "";
    }
  }
  if (current !== "") passages.push(current);
  return passages;
}

/** FNV-1a, 32 bits. */
function hash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

const STOP_WORDS = new Set(
  "a an and are as at be but by did do does for from had has have he her his i in is it its of on or our so that the their them they this to was we were what when which who will with you your".split(
    " ",
  ),
);

/** Each text's features, row after row: `FEATURES` counts per text (log-scaled). */
export function featuresOf(texts: readonly string[]): Float32Array {
  const features = new Float32Array(texts.length * FEATURES);
  texts.forEach((text, row) => {
    const counts = features.subarray(row * FEATURES, (row + 1) * FEATURES);
    const words = text.toLowerCase().match(/[a-z0-9]+/g) ?? [];
    for (const word of words) {
      if (STOP_WORDS.has(word)) continue;
      const stem = word.length > 4 && word.endsWith("s") ? word.slice(0, -1) : word;
      counts[hash(`w:${stem}`) % FEATURES]! += 2;
      const padded = ` ${stem} `;
      for (let i = 0; i + 3 <= padded.length; i++) counts[hash(padded.slice(i, i + 3)) % FEATURES]! += 0.5;
    }
    for (let i = 0; i < counts.length; i++) counts[i] = Math.log1p(counts[i]!);
  });
  return features;
}

/** The row of `embeddings` (rows of `width`) closest to `query` (unit vectors: the largest dot product). */
export function closest(
  embeddings: Float32Array,
  width: number,
  query: Float32Array,
): { index: number; score: number } {
  let best = { index: -1, score: Number.NEGATIVE_INFINITY };
  for (let row = 0; row * width < embeddings.length; row++) {
    let score = 0;
    for (let i = 0; i < width; i++) score += embeddings[row * width + i]! * query[i]!;
    if (score > best.score) best = { index: row, score };
  }
  return best;
}
