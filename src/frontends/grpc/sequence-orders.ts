import type { SequenceId } from "../../core/infer.ts";
import type { ServedModel } from "../../core/model.ts";
import { OrderedRelease } from "../../core/scheduler/ordered-release.ts";
import { readSequenceControl } from "../../core/sequence/sequence-parameters.ts";
import { readRequestParameters } from "./infer-parameters.ts";
import type { ModelInferRequestMessage } from "./messages.ts";

// A stream whose answers go out as they complete (`seqserve-stream-order: sequence`)
// still answers each sequence's requests in the order they came. The core runs a
// sequence's requests in order, but a request refused before it runs (by the decoder, or
// by the model's validation) is answered at once, ahead of the earlier requests of its
// sequence still waiting for a slot; so each sequence with requests unanswered on the
// stream has its own order here. A sequence is a model's: two models' sequences that
// share an id do not wait for each other.

/** One sequence's order; it forgets itself once every answer it ordered has gone out. */
class SequenceOrder extends OrderedRelease {
  readonly #forget: (order: SequenceOrder) => void;

  constructor(forget: (order: SequenceOrder) => void) {
    super();
    this.#forget = forget;
  }

  override complete(ticket: number, release: () => void): void {
    super.complete(ticket, release);
    // Entries last only while their sequence has requests unanswered, so at most one a
    // request in flight, however many sequences the stream goes through.
    if (this.settled) this.#forget(this);
  }
}

/** The orders of a stream's sequences with requests unanswered, by model and sequence id. */
export class SequenceOrders {
  readonly #byModel = new Map<ServedModel, Map<SequenceId, SequenceOrder>>();

  /** The order `id`'s answers go out in (a place must be issued at once); undefined for a request of no sequence. */
  of(model: ServedModel | undefined, id: SequenceId | undefined): OrderedRelease | undefined {
    if (model === undefined || id === undefined) return undefined;
    let ofModel = this.#byModel.get(model);
    if (ofModel === undefined) {
      ofModel = new Map();
      this.#byModel.set(model, ofModel);
    }
    let order = ofModel.get(id);
    if (order === undefined) {
      const sequences = ofModel;
      order = new SequenceOrder((settled) => {
        if (sequences.get(id) === settled) sequences.delete(id);
        if (sequences.size === 0 && this.#byModel.get(model) === sequences) this.#byModel.delete(model);
      });
      ofModel.set(id, order);
    }
    return order;
  }
}

/**
 * The sequence id a request names, read on its own for a request refused before its
 * parameters were (a wrong input is found first); undefined when it names none or one that
 * cannot be read.
 */
export function namedSequenceId(message: ModelInferRequestMessage): SequenceId | undefined {
  const parameter = message.parameters?.sequence_id;
  if (parameter === undefined) return undefined;
  try {
    return readSequenceControl(readRequestParameters({ sequence_id: parameter }))?.id;
  } catch {
    return undefined;
  }
}
