// setTimeout and setInterval keep a delay of at most 2^31-1 ms (24.8 days): Node fires a
// longer one after 1 ms, with a warning each time. Delays from flags, model configs and
// clients (a poll period in seconds, a queue delay in microseconds, a timeout) can be
// longer, so every such timer goes through timerDelay. Where the exact moment matters (a
// sequence's deadline), the timer checks the time when it fires and waits again.

/** The longest delay a Node timer keeps. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** `ms` as a delay a Node timer keeps: from 0 to 24.8 days, which stands in for any longer wait. */
export function timerDelay(ms: number): number {
  return Math.min(MAX_TIMER_MS, Math.max(0, ms));
}

/** Resolves when `promise` settles or at `deadlineMs` (epoch ms), whichever comes first. */
export function untilDeadline(promise: Promise<unknown>, deadlineMs: number): Promise<void> {
  const settled = promise.then(
    () => {},
    () => {},
  );
  if (!Number.isFinite(deadlineMs)) return settled;
  return new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, timerDelay(deadlineMs - Date.now()));
    void settled.then(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}
