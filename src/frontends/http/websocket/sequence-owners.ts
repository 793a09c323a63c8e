import type { SequenceId } from "../../../core/infer.ts";
import type { SequenceEndReason, ServedModel } from "../../../core/model.ts";

// Which stream owns each sequence. A client that reconnects with its id starts the
// sequence again from the new stream (the core restarts it); the old stream, whose close
// may only be noticed later, must then neither continue nor end the new sequence.
// Only streams are tracked: a start sent over plain HTTP takes an id without the streams
// knowing.
//
// A stream continuing a sequence (sequence_start=false) takes it at once from the stream
// that held it (a client resuming after a cut: the cut stream's late close must not end
// it), but it has taken it for good only once it drives it (one of its steps runs, or its
// end message). Until then the stream it took the sequence from goes on stepping it, never
// told it was taken, and gets it back if the taker leaves without driving it: a socket
// opened and dropped does not leave the sequence with no stream until its idle timeout.
// The stream driving it may itself leave while the taker is idle: its close, which would
// have ended the sequence, is kept (`leftEnding`), and the taker that leaves without
// driving it ends it with that close's reason; one that drives it owns it, and the kept
// close is forgotten.

/** A stream that may own sequences. */
export interface SequenceHolder {
  /** Still open: it can hold a sequence given back to it. */
  readonly open: boolean;
}

export class SequenceOwners {
  readonly #owners = new Map<string, SequenceHolder>();
  /** Streams that took a sequence to continue it and have not driven it yet: whom from. */
  readonly #tookFrom = new WeakMap<SequenceHolder, SequenceHolder>();
  /** Streams that left while steering a sequence another stream took: the end their close asked. */
  readonly #leftEnding = new WeakMap<SequenceHolder, SequenceEndReason>();

  /** The key of `id` in `model` (ids of different model versions are different sequences). */
  static key(model: ServedModel, id: SequenceId): string {
    return `${model.name}\u0000${model.version}\u0000${typeof id === "bigint" ? "u" : "s"}${id}`;
  }

  /** `owner` has started `key` again: whoever held it holds it no more. */
  claim(key: string, owner: SequenceHolder): void {
    this.#owners.set(key, owner);
  }

  /**
   * `owner` continues `key`, begun elsewhere: it holds it from now on, but the stream it
   * took it from keeps stepping it, and gets it back, until `owner` drives it (`drove`).
   */
  claimToContinue(key: string, owner: SequenceHolder): void {
    const previous = this.#owners.get(key);
    if (previous !== undefined && previous !== owner) this.#tookFrom.set(owner, previous);
    this.#owners.set(key, owner);
  }

  /** Claims `key` unless another stream holds it; true when `owner` holds it afterwards. */
  claimIfFree(key: string, owner: SequenceHolder): boolean {
    const current = this.#owners.get(key);
    if (current === undefined) this.#owners.set(key, owner);
    return current === undefined || current === owner;
  }

  /** `owner` has driven the sequence it continues (a step, its end): it has taken it for good. */
  drove(owner: SequenceHolder): void {
    this.#tookFrom.delete(owner);
  }

  /** `owner` holds `key`: its leaving may end the sequence. */
  owns(key: string, owner: SequenceHolder): boolean {
    return this.#owners.get(key) === owner;
  }

  /**
   * `owner` may step `key`: it holds it, or the streams that took it since (each from the
   * one before) have not driven it.
   */
  steers(key: string, owner: SequenceHolder): boolean {
    let holder = this.#owners.get(key);
    while (holder !== undefined && holder !== owner) holder = this.#tookFrom.get(holder);
    return holder === owner;
  }

  /**
   * `owner`, which steers `key` and no longer holds it (a stream that took it has not driven
   * it), leaves with a close that would have ended it with `reason`: the sequence ends so
   * if it comes back to no open stream (`release`).
   */
  leftEnding(owner: SequenceHolder, reason: SequenceEndReason): void {
    this.#leftEnding.set(owner, reason);
  }

  /**
   * `owner` leaves. A sequence it holds without having driven it goes back to the stream
   * it took it from, if that one is open (else to the one that stream took it from, and so
   * on); otherwise no stream holds it, and the end a stream it passes asked on leaving
   * (`leftEnding`) is returned: the caller ends the sequence with it.
   */
  release(key: string, owner: SequenceHolder): SequenceEndReason | undefined {
    if (this.#owners.get(key) !== owner) return undefined;
    let ending: SequenceEndReason | undefined;
    let previous = this.#tookFrom.get(owner);
    while (previous !== undefined && !previous.open) {
      ending ??= this.#leftEnding.get(previous);
      previous = this.#tookFrom.get(previous);
    }
    if (previous !== undefined) {
      this.#owners.set(key, previous);
      return undefined;
    }
    this.#owners.delete(key);
    return ending;
  }
}
