// The models a SageMaker multi-model endpoint loaded through POST /models, by the name
// SageMaker calls each (its model_name, a hash of the artifact): the name the model is
// served under and its modelUrl. As Triton's SageMaker server keeps them
// (sagemaker_models_list_), apart from the repository's own models: only these are
// listed, unloaded and invoked through /models, each by its hash.
//
// The served name is the load request's TargetModel (X-Amzn-SageMaker-Target-Model, the
// artifact's name such as "acc.tar.gz"), else the hash, as Triton loads it: answers,
// metrics and logs name the model so, and invocations naming that TargetModel reach it.

export interface EndpointModel {
  /** The name the model is served under. */
  readonly served: string;
  /** Its modelUrl: the folder Triton registers as the model's repository. */
  readonly url: string;
}

export class MultiModelEndpoint {
  readonly #models = new Map<string, EndpointModel>();
  /** Loads under way, hash → served name: a second load of either is a duplicate too. */
  readonly #loading = new Map<string, string>();

  /** Whether the model SageMaker calls `hash` is loaded, or loading. */
  has(hash: string): boolean {
    return this.#models.has(hash) || this.#loading.has(hash);
  }

  /** Whether a model loaded (or loading) through the endpoint is served under `name`. */
  serves(name: string): boolean {
    for (const model of this.#models.values()) if (model.served === name) return true;
    for (const served of this.#loading.values()) if (served === name) return true;
    return false;
  }

  /** The loaded model SageMaker calls `hash`; undefined while it is not loaded. */
  model(hash: string): EndpointModel | undefined {
    return this.#models.get(hash);
  }

  entries(): [string, EndpointModel][] {
    return [...this.#models];
  }

  /**
   * Runs `load`, which loads the model under `served` and gives its modelUrl; `hash` then
   * counts as loaded if it succeeds.
   */
  async load(hash: string, served: string, load: () => Promise<string>): Promise<void> {
    this.#loading.set(hash, served);
    try {
      const url = await load();
      this.#models.set(hash, { served, url });
    } finally {
      this.#loading.delete(hash);
    }
  }

  delete(hash: string): void {
    this.#models.delete(hash);
  }
}
