import type { InferRequest, SequenceId } from "../../core/infer.ts";
import type { ServedModel } from "../../core/model.ts";

// The requests of a stream that wait for their sequence to get a slot, which its limits
// of requests and bytes held unanswered (--grpc-max-inflight-per-stream,
// --max-held-request-bytes) do not count.
//
// Why: one stream may carry more sequences than the model has slots, sent round-robin (all
// the STARTs, then all the second steps, then all the ENDs), as Triton's clients do; Triton
// reads a stream's next request as soon as it has issued one, with no limit per stream.
// Counted, the STARTs waiting in the backlog filled the stream's limit, reading stopped,
// and the ENDs that would have freed the slots were never read: the stream stalled until
// the running sequences timed out, a few answers per idle timeout.
//
// Not counted, they are still bounded in bytes: a request waiting for a slot holds its
// bytes in the server's budget of waiting requests (--max-queued-start-bytes), which
// refuses the next one (UNAVAILABLE, in-band) instead of stopping reading, and the core
// says when a request begins and stops waiting (SequenceControl.onWaitingForSlot). A step
// of a sequence whose START, sent on this stream, waits for a slot waits with it (it runs
// only once the START has): it is not counted either, and the budget holds its bytes too.
// Every request that is counted has a slot or needs none, so it is answered without
// another read: reading stopped at the limits always starts again.

/** A request of the stream, unanswered, as the count sees it. */
interface Tracked {
  readonly bytes: number;
  /** The core holds it waiting for a slot. */
  waits: boolean;
  /** The waiting START of its sequence it is queued behind. */
  behind: WaitingStart | undefined;
  /** A START that waits: the steps behind it. */
  leads: WaitingStart | undefined;
  answered: boolean;
  /** Left out of the stream's counts now. */
  uncounted: boolean;
}

/** A START of the stream waiting for a slot, and the steps of its sequence sent behind it. */
interface WaitingStart {
  waiting: boolean;
  readonly behind: Set<Tracked>;
}

/** What a request needs from the count: the request to run (with the core's hook), and its end. */
export interface SlotWaitTicket {
  readonly request: InferRequest;
  /** The request is answered (its last response sent). */
  readonly answered: () => void;
}

const NOTHING_TO_DO = (): void => {};

export class SlotWaits {
  /** Requests waiting for a slot, and their bytes: what the stream's limits leave out. */
  requests = 0;
  bytes = 0;
  /** The stream's waiting STARTs by model and id, which later steps of the id queue behind. */
  readonly #starts = new Map<ServedModel, Map<SequenceId, WaitingStart>>();
  readonly #changed: () => void;

  /** `changed`: the counts changed (the stream looks at its limits again). */
  constructor(changed: () => void) {
    this.#changed = changed;
  }

  /** Follows a request of `model` holding `bytes` from now until it is answered. */
  track(model: ServedModel, request: InferRequest, bytes: number): SlotWaitTicket {
    const control = request.sequence;
    if (control === undefined || model.sequences === undefined) return { request, answered: NOTHING_TO_DO };
    const tracked: Tracked = {
      bytes,
      waits: false,
      behind: undefined,
      leads: undefined,
      answered: false,
      uncounted: false,
    };
    const id = control.id;
    const starts = this.#starts.get(model);
    if (id !== undefined && starts !== undefined) {
      // A START begins a new life of the id: later steps are its, not an earlier START's.
      if (control.start) this.#forget(model, starts, id);
      else {
        const start = starts.get(id);
        if (start?.waiting === true) {
          tracked.behind = start;
          start.behind.add(tracked);
          this.#recount(tracked);
        }
      }
    }
    const onWaitingForSlot = (waiting: boolean): void => {
      tracked.waits = waiting;
      if (control.start && id !== undefined) {
        if (waiting) this.#lead(model, id, tracked);
        else this.#started(model, id, tracked);
      }
      this.#recount(tracked);
      this.#changed();
    };
    return {
      request: { ...request, sequence: { ...control, onWaitingForSlot } },
      answered: () => {
        tracked.answered = true;
        tracked.behind?.behind.delete(tracked);
        tracked.behind = undefined;
        this.#recount(tracked);
      },
    };
  }

  /** A START waits for a slot: the steps of its id sent after it wait behind it. */
  #lead(model: ServedModel, id: SequenceId, start: Tracked): void {
    if (start.leads !== undefined) return;
    start.leads = { waiting: true, behind: new Set() };
    let starts = this.#starts.get(model);
    if (starts === undefined) {
      starts = new Map();
      this.#starts.set(model, starts);
    }
    starts.set(id, start.leads);
  }

  /** A waiting START got its slot (or was answered): the steps behind it have one too. */
  #started(model: ServedModel, id: SequenceId, start: Tracked): void {
    const lead = start.leads;
    if (lead === undefined) return;
    start.leads = undefined;
    lead.waiting = false;
    const starts = this.#starts.get(model);
    if (starts !== undefined && starts.get(id) === lead) this.#forget(model, starts, id);
    for (const step of lead.behind) {
      step.behind = undefined;
      this.#recount(step);
    }
    lead.behind.clear();
  }

  #forget(model: ServedModel, starts: Map<SequenceId, WaitingStart>, id: SequenceId): void {
    starts.delete(id);
    if (starts.size === 0) this.#starts.delete(model);
  }

  /** Puts a request in, or leaves it out of, the counts the stream's limits look at. */
  #recount(tracked: Tracked): void {
    const uncounted = !tracked.answered && (tracked.waits || tracked.behind?.waiting === true);
    if (uncounted === tracked.uncounted) return;
    tracked.uncounted = uncounted;
    const sign = uncounted ? 1 : -1;
    this.requests += sign;
    this.bytes += sign * tracked.bytes;
  }
}
