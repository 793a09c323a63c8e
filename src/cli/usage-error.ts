/** A command line seqserve cannot run: the message names the flag or variable at fault. */
export class UsageError extends Error {
  override name = "UsageError";
}
