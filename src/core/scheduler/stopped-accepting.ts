/**
 * Triton's words for a request a stopping server's scheduler no longer takes: a stateless
 * one (its dynamic batch scheduler) or a new sequence (its sequence batch scheduler).
 */
export const STOPPED_ACCEPTING =
  "Server is stopping, scheduler for model has stopped accepting new inference requests";
