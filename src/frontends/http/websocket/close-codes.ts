// The close codes a stream's server side uses (the README's WebSocket section lists them).

export const CLOSE_CODES = {
  /** The sequence ended at the client's request (an END request or the end message). */
  sequenceEnded: 1000,
  /**
   * The stream sent no message for --http-stream-idle-timeout-secs with nothing in flight;
   * the server is stopping; the model of a stream without a sequence was unloaded.
   */
  goingAway: 1001,
  /** The client left more answers unread than --max-buffered-response-bytes allows. */
  policyViolation: 1008,
  /** A message larger than the body limit (sent by `ws` itself, which enforces maxPayload). */
  messageTooBig: 1009,
  /** The server failed in a way that left the stream unusable. */
  internalError: 1011,
  /**
   * The sequence no longer exists on the server (idle timeout, forced end through the
   * sequences API, shutdown, a cancelled request, its model unloaded): later messages
   * could not continue it.
   * 4000 + HTTP 410 Gone.
   */
  sequenceGone: 4410,
} as const;

/** Closes in which the client meant to stop (1005: a close frame with no code, as `close()` sends). */
export function isDeliberateClose(code: number): boolean {
  return code === 1000 || code === 1005;
}
