// The models a SageMaker multi-model endpoint loaded through POST /models: the name
// SageMaker gave each (its model_name, a hash of the artifact) and the url it was loaded
// from. As Triton's SageMaker server keeps them (sagemaker_models_list_), apart from the
// repository's own models: only these are listed, unloaded and invoked through /models.

export class MultiModelEndpoint {
  readonly #urls = new Map<string, string>();
  /** Names whose load is under way: a second load of one is a duplicate too. */
  readonly #loading = new Set<string>();

  has(name: string): boolean {
    return this.#urls.has(name) || this.#loading.has(name);
  }

  url(name: string): string | undefined {
    return this.#urls.get(name);
  }

  entries(): [string, string][] {
    return [...this.#urls];
  }

  /** Runs `load` for `name`, which then counts as loaded from `url` if it succeeds. */
  async load(name: string, url: string, load: () => Promise<void>): Promise<void> {
    this.#loading.add(name);
    try {
      await load();
      this.#urls.set(name, url);
    } finally {
      this.#loading.delete(name);
    }
  }

  delete(name: string): void {
    this.#urls.delete(name);
  }
}
