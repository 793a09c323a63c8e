import { existsSync, readFileSync, statSync } from "node:fs";
import { setTimeout as delay } from "node:timers/promises";
import pLimit, { type LimitFunction } from "p-limit";
import type { ParsedModelConfig } from "../config/index.ts";
import type { ModelControlMode, SingleModelOptions } from "../config/server-options.ts";
import type { ModelBackend } from "../core/backend.ts";
import { asServerError, invalidArg, SERVER_NOT_READY, ServerError, unavailable } from "../core/errors.ts";
import type { SequenceId } from "../core/infer.ts";
import type { LoadedModel } from "../core/loaded-model.ts";
import type {
  ModelLoadOptions,
  ModelMetadata,
  ModelRegistry,
  ModelState,
  RepositoryIndexEntry,
  ServedModel,
  UnloadedSequenceEnd,
} from "../core/model.ts";
import type { Refusals } from "../core/refusals.ts";
import type { QueueBudget } from "../core/scheduler/queue-budget.ts";
import type { RequestObserverFactory } from "../core/scheduler/request-observer.ts";
import type { SequenceTier } from "../core/sequence/sequence-tier.ts";
import type { StateBudget } from "../core/sequence/state-budget.ts";
import type { ModelStatisticsSnapshot } from "../core/statistics.ts";
import { timerDelay, untilDeadline } from "../core/timer-delay.ts";
import type { Logger } from "../observability/logger.ts";
import { checkInstanceCount, openVersion, parseConfigOverride, prepareModel } from "./model-loader.ts";
import { type ModelOverride, writeModelOverride } from "./model-override.ts";
import { discoverModels, type ModelSource, readOvmsSources } from "./model-source.ts";
import { SIGNATURE_MAX_ENTRIES, sourceSignature } from "./source-signature.ts";
import { UnloadedSequences } from "./unloaded-sequences.ts";
import { selectVersions, versionFolders } from "./version-folders.ts";

// The models on disk and their lifecycle: discovery across repositories (Triton layout
// and OVMS config.json), loading each version the version policy serves, unloading, and
// the lookups the frontends make, answered with Triton's messages. A model that fails to
// load is reported (state UNAVAILABLE with the reason) and never takes the server down.

export interface ModelRepositoryOptions {
  readonly repositories: readonly string[];
  readonly ovmsConfigs: readonly string[];
  readonly strict: boolean;
  readonly controlMode: ModelControlMode;
  readonly loadModels: readonly string[];
  readonly pollSecs: number;
  readonly backend: ModelBackend;
  readonly logger: Logger;
  /** max_batch_size autocomplete gives a batchable model (--backend-config default-max-batch-size). */
  readonly defaultMaxBatchSize: number;
  /** Models opened at the same time (--model-load-thread-count). */
  readonly loadThreadCount: number;
  /** OVMS single-model mode's model. */
  readonly singleModel?: SingleModelOptions | undefined;
  /** How often OVMS config files and their models' folders are checked for changes (0 = never; default 0). */
  readonly configPollSecs?: number;
  /** OVMS's sequence cleaner period (default 5 minutes). */
  readonly sequenceCleanerPollWaitMinutes?: number;
  /** More tries of a load that failed (--model-load-retry-count). */
  readonly loadRetryCount?: number;
  /**
   * How long a reload waits for the replaced version's running sequence batches (a
   * decoupled request still streaming, say) before it gives up and the version goes on
   * serving; 30 s when unset.
   */
  readonly reloadQuietMs?: number;
  /** `configs/<name>.pbtxt` is read instead of config.pbtxt where it exists (--model-config-name). */
  readonly configName?: string | undefined;
  /** Builds the observer each loaded version reports its requests to. */
  readonly observeRequests?: RequestObserverFactory;
  /** Where sequence models keep their state beside memory, shared with other replicas (--state-store). */
  readonly sequenceTier?: SequenceTier | undefined;
  /** Instances a model version may ask for (--max-instances-per-model); default unlimited. */
  readonly maxInstancesPerModel?: number;
  /** Longest string sequence id, in bytes (--max-sequence-id-bytes); default unlimited. */
  readonly maxSequenceIdBytes?: number;
  /** Where refusals by a limit are counted. */
  readonly refusals?: Refusals;
  /** The server's budget of state bytes, for every model's sequences (--max-state-bytes). */
  readonly stateBudget?: StateBudget;
  /** The server's budget of bytes of requests waiting to run, for every model (--max-queued-start-bytes). */
  readonly queueBudget?: QueueBudget;
}

interface ModelEntry {
  readonly name: string;
  source: ModelSource | undefined;
  /** Loaded versions, by version string. */
  versions: Map<string, LoadedModel>;
  /**
   * Every version loaded at some time. Triton keeps an unloaded version in its table (state
   * UNAVAILABLE), so a request naming it is "not at ready state" (503), not "not found" (404).
   */
  everLoaded: Set<string>;
  /**
   * Versions the last load tried and could not serve while others went on serving, with
   * why: listed UNAVAILABLE with the error, as Triton lists them, until a load or unload.
   */
  failedVersions: ReadonlyMap<string, string>;
  configJson: Record<string, unknown> | undefined;
  state: ModelState;
  reason: string;
  signature: string;
  /** The load or unload in progress, so concurrent calls wait for it. */
  transition: Promise<void> | undefined;
  /** Why the name is not served: found in more than one place (then it has no source). */
  notUnique: string | undefined;
  /** The folder of files a load request sent, while the versions loaded from it serve. */
  override: ModelOverride | undefined;
  /** The versions serving were loaded with a load request's config, not the folder's. */
  configOverridden: boolean;
}

export class ModelRepository implements ModelRegistry {
  readonly #options: ModelRepositoryOptions;
  readonly #logger: Logger;
  readonly #models = new Map<string, ModelEntry>();
  #ovmsSources: ModelSource[] = [];
  /** Why each OVMS config entry OVMS would not load was left out (#readOvmsSources). */
  #invalidOvmsEntries: string[] = [];
  /** The Triton repositories' model folders as last read (duplicates included). */
  #inRepositories: readonly ModelSource[] = [];
  /** The repository problems logged at the last look: one still there is not logged again. */
  #loggedProblems: ReadonlySet<string> = new Set();
  /** The OVMS config files' texts as last read, to see when one changes. */
  readonly #ovmsTexts = new Map<string, string>();
  /** Sent model files being removed once the versions loaded from them have unloaded. */
  readonly #removals = new Set<Promise<void>>();
  /** How the sequences of unloaded versions ended, for their clients' next requests. */
  readonly #unloadedSequences = new UnloadedSequences();
  #pollTimer: NodeJS.Timeout | undefined;
  #configTimer: NodeJS.Timeout | undefined;
  /** A reconciliation with the disk is running (polls do not overlap). */
  #reconciling: Promise<void> | undefined;
  /** Loads and unloads done, so that a reload on request can tell whether it changed anything. */
  #changes = 0;
  /** Why the config files as they are now are not applied (OVMS's answer to a reload request). */
  #configRefusal: ServerError | undefined;
  #shuttingDown = false;
  /** Bounds how many models open at once, whoever asks (start, poll, the repository API). */
  readonly #loadSlots: LimitFunction;

  private constructor(options: ModelRepositoryOptions) {
    this.#options = options;
    this.#logger = options.logger;
    this.#loadSlots = pLimit(Math.max(1, options.loadThreadCount));
  }

  /** Discovers the models and loads those the control mode asks for. */
  static async open(options: ModelRepositoryOptions): Promise<ModelRepository> {
    const repository = new ModelRepository(options);
    for (const file of options.ovmsConfigs) repository.#ovmsTexts.set(file, readText(file));
    await repository.#readOvmsSources();
    const sources = repository.#discover();
    const wanted =
      options.controlMode === "explicit"
        ? options.loadModels.includes("*")
          ? [...sources.keys()]
          : options.loadModels
        : [...sources.keys()];
    // A --load-model name the repositories lack is a failed load, as in Triton: the start
    // stops on it with --exit-on-error, and goes on without it otherwise.
    for (const name of options.controlMode === "explicit"
      ? options.loadModels.filter((n) => n !== "*")
      : []) {
      if (sources.has(name)) continue;
      // A name found twice keeps that reason (its entry exists already).
      let entry = repository.#models.get(name);
      if (entry === undefined) {
        entry = repository.#newEntry(name, undefined);
        entry.reason = `--load-model: no model '${name}' in the model repositories`;
        repository.#models.set(name, entry);
      }
      repository.#logger.error({ event: "model_load_failed", model: name }, entry.notUnique ?? entry.reason);
    }
    await Promise.all(wanted.map((name) => repository.#load(name).catch(() => {})));
    if (options.controlMode === "poll" && options.pollSecs > 0) repository.#startPolling();
    // Only OVMS's models are watched (its config files, its --model_path): a Triton launch has none.
    if (
      options.controlMode !== "explicit" &&
      (options.ovmsConfigs.length > 0 || options.singleModel !== undefined) &&
      (options.configPollSecs ?? 0) > 0
    ) {
      repository.#watchOvmsConfigs(options.configPollSecs!);
    }
    return repository;
  }

  // ---- discovery ----

  /** Reads the OVMS config files' models, logging what they ask that is not served. */
  async #readOvmsSources(): Promise<void> {
    const { sources, notes, invalid } = await readOvmsSources(
      this.#options.ovmsConfigs,
      this.#options.singleModel,
    );
    for (const note of notes) this.#logger.warn({ event: "config_note" }, note);
    for (const why of invalid) this.#logger.error({ event: "model_load_failed" }, why);
    this.#ovmsSources = sources;
    this.#invalidOvmsEntries = invalid;
  }

  /** Finds the models on disk; `ovmsOnly` looks at the OVMS config files alone (Triton repositories keep their last look). */
  #discover(ovmsOnly = false): Map<string, ModelSource> {
    const repositories = ovmsOnly ? [] : this.#options.repositories;
    const discovery = discoverModels(repositories, this.#ovmsSources, ovmsOnly ? this.#inRepositories : []);
    const { sources, problems, duplicates } = discovery;
    this.#inRepositories = discovery.inRepositories;
    // Each problem is logged once while it lasts, not at every look (a poll each second).
    for (const problem of problems)
      if (!this.#loggedProblems.has(problem)) this.#logger.error({ event: "repository_problem" }, problem);
    this.#loggedProblems = new Set(problems);
    for (const name of [...sources.keys(), ...duplicates.keys()]) {
      if (!this.#models.has(name)) this.#models.set(name, this.#newEntry(name, sources.get(name)));
    }
    for (const [name, entry] of this.#models) {
      entry.notUnique = duplicates.get(name);
      const keepsTritonSource =
        entry.notUnique === undefined &&
        ovmsOnly &&
        entry.source !== undefined &&
        entry.source.ovms === undefined;
      if (!keepsTritonSource) entry.source = sources.get(name);
    }
    return sources;
  }

  #newEntry(name: string, source: ModelSource | undefined): ModelEntry {
    return {
      name,
      source,
      versions: new Map(),
      everLoaded: new Set(),
      failedVersions: new Map(),
      configJson: undefined,
      state: "UNAVAILABLE",
      reason: "unloaded",
      signature: "",
      transition: undefined,
      notUnique: undefined,
      override: undefined,
      configOverridden: false,
    };
  }

  #startPolling(): void {
    this.#pollTimer = setInterval(
      () => {
        this.#reconcile().catch((error: unknown) =>
          this.#logger.error({ err: error }, "repository poll failed"),
        );
      },
      timerDelay(this.#options.pollSecs * 1000),
    );
    this.#pollTimer.unref();
  }

  /**
   * OVMS's config reload (--file_system_poll_wait_seconds): the config files are read
   * again when they change, and the models they list are reconciled with the disk (a
   * model added, removed, changed in the file or in its folder). A file that no longer
   * parses is reported and the models it listed keep serving.
   */
  #watchOvmsConfigs(seconds: number): void {
    this.#configTimer = setInterval(
      () => {
        this.#rereadOvmsConfigs()
          .then(() => this.#reconcile(true))
          .catch((error: unknown) => this.#logger.error({ err: error }, "config reload failed"));
      },
      timerDelay(seconds * 1000),
    );
    this.#configTimer.unref();
  }

  /**
   * Reads the config files again when one changed; whether one did. A file that does not
   * parse is reported and changes nothing; `refuse`: it is thrown as well, in OVMS's
   * words, also when it has not changed since (it is still not applied).
   */
  async #rereadOvmsConfigs(refuse = false): Promise<boolean> {
    let changed = false;
    for (const file of this.#options.ovmsConfigs) {
      const text = readText(file);
      if (text !== this.#ovmsTexts.get(file)) changed = true;
      this.#ovmsTexts.set(file, text);
    }
    if (changed) {
      try {
        await this.#readOvmsSources();
        this.#configRefusal = undefined;
        this.#logger.info({ event: "config_changed" }, "a model configuration file changed; applying it");
      } catch (error) {
        this.#logger.error(
          { event: "config_invalid", err: error },
          `the changed configuration is not applied, the models keep serving as they were: ${(error as Error).message}`,
        );
        this.#configRefusal = this.#options.ovmsConfigs.every((file) => existsSync(file))
          ? new ServerError(
              "FAILED_PRECONDITION",
              "Reloading config file failed. Check server logs for more info.",
            )
          : new ServerError("INTERNAL", "Config file not found or cannot open.");
      }
    }
    if (refuse && this.#configRefusal !== undefined) throw this.#configRefusal;
    return changed && this.#configRefusal === undefined;
  }

  /**
   * Loads new models, reloads changed ones (their live sequences move to the new version
   * when their state fits) and unloads removed ones; `among` limits it to some models
   * (the OVMS config watch leaves Triton repositories alone outside poll mode).
   */
  #reconcile(ovmsOnly = false): Promise<void> {
    if (this.#shuttingDown) return Promise.resolve();
    // Polls do not overlap: one asked for while another runs is that one.
    if (this.#reconciling !== undefined) return this.#reconciling;
    const run = this.#poll(ovmsOnly).finally(() => {
      this.#reconciling = undefined;
    });
    this.#reconciling = run;
    return run;
  }

  /**
   * OVMS's config reload on request (`POST /v1/config/reload`): the config files are read
   * again and their models reconciled with the disk now, as the config watch does each
   * period. Whether anything changed (a config file, or a model loaded, reloaded or
   * unloaded). A config file that cannot be read or parsed changes nothing and is refused
   * with OVMS's words.
   */
  async reloadConfig(): Promise<boolean> {
    if (this.#shuttingDown)
      throw unavailable("the server is shutting down: its configuration is not reloaded");
    // A poll under way may have read the files before they changed: this reload starts after it.
    while (this.#reconciling !== undefined) await this.#reconciling.catch(() => {});
    const changes = this.#changes;
    const configChanged = await this.#rereadOvmsConfigs(true);
    await this.#reconcile(true);
    this.#refuseFailedOvmsModels();
    return configChanged || this.#changes !== changes;
  }

  /**
   * OVMS's reload fails while a model its config lists did not load as listed (an entry
   * OVMS would not load; its last load failed: a missing path, a bad file, a refused
   * change), on every reload until the
   * config is mended (its `lastLoadConfigStatus`): a deploy script checking the answer
   * must not take a refused change for an applied one. The other models are applied all
   * the same. A missing folder is OVMS's PATH_INVALID (400), anything else 500.
   */
  #refuseFailedOvmsModels(): void {
    if (this.#invalidOvmsEntries.length > 0) {
      throw new ServerError("INTERNAL", "Reloading config file failed. Check server logs for more info.");
    }
    for (const entry of this.#models.values()) {
      if (entry.source?.ovms === undefined || entry.reason === "" || entry.reason === "unloaded") continue;
      throw new ServerError(
        existsSync(entry.source.dir) ? "INTERNAL" : "INVALID_ARG",
        "Reloading config file failed. Check server logs for more info.",
      );
    }
  }

  async #poll(ovmsOnly: boolean): Promise<void> {
    const fromOvms = new Set(
      [...this.#models].filter(([, entry]) => entry.source?.ovms !== undefined).map(([name]) => name),
    );
    const sources = this.#discover(ovmsOnly);
    for (const [name, entry] of this.#models) {
      // Files a load request sent are the client's to replace, not the repository's.
      if (entry.override !== undefined) continue;
      const source = sources.get(name);
      if (ovmsOnly && source?.ovms === undefined && !fromOvms.has(name)) continue;
      if (source === undefined) {
        // OVMS drops a model removed from its configuration at once; a Triton model's
        // work may finish first, as in Triton.
        if (entry.versions.size > 0)
          await this.#unload(name, fromOvms.has(name) ? 0 : 30_000).catch(() => {});
        continue;
      }
      if (entry.versions.size === 0 && entry.state === "UNAVAILABLE" && entry.reason === "unloaded") {
        await this.#load(name).catch(() => {});
      } else if ((await sourceSignature(source)).value !== entry.signature) {
        this.#logger.info(
          { event: "model_changed", model: name },
          `model '${name}' changed on disk; reloading`,
        );
        await this.#load(name).catch(() => {});
      }
    }
  }

  // ---- load / unload ----

  load(name: string, options: ModelLoadOptions = {}): Promise<void> {
    if (this.#shuttingDown) return Promise.reject(notReady());
    // As Triton: the repository API loads and unloads only in explicit mode, refused in
    // Triton's words in none mode too.
    if (this.#options.controlMode !== "explicit") {
      return Promise.reject(
        new ServerError("UNAVAILABLE", "explicit model load / unload is not allowed if polling is enabled"),
      );
    }
    const badName = modelNameProblem(name);
    if (badName !== undefined) return Promise.reject(invalidArg(badName));
    this.#discover();
    // A model the repositories do not have, or sent files that make no model folder, is
    // Triton's INTERNAL (500) "failed to poll"; any other failure to load is INVALID_ARG.
    const files = options.files;
    if (files !== undefined && files.size > 0) return this.#loadOverride(name, options.config, files);
    if (options.dir !== undefined) return this.#loadFolder(name, options.dir);
    if (this.#models.get(name)?.source === undefined) return Promise.reject(notInRepository(name));
    let config: ParsedModelConfig | undefined;
    try {
      config = options.config === undefined ? undefined : this.#configOverride(name, options.config);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#load(name, config, config === undefined).catch(asLoadRefusal);
  }

  /**
   * A load request's config, read before anything changes: one that does not read is, as
   * in Triton, a repository poll that failed (INTERNAL), told in the log as "Invalid config
   * override", and the model stays as it was.
   */
  #configOverride(name: string, text: string): ParsedModelConfig {
    try {
      return parseConfigOverride(name, text);
    } catch (error) {
      const why = `Invalid config override: ${asServerError(error).message}`;
      this.#logger.error({ event: "model_load_failed", model: name, reason: why }, why);
      throw new ServerError(
        "INTERNAL",
        `failed to load '${name}', failed to poll from model repository: ${why}`,
      );
    }
  }

  /**
   * Triton's file override: the model is loaded from the files the request sent, whether
   * or not a repository has it; the repository's folder is used again at its next load
   * without files. What stops the files from becoming a model folder is answered as
   * Triton answers it (its repository poll failed: INTERNAL, "failed to poll"), with why.
   */
  async #loadOverride(
    name: string,
    config: string | undefined,
    files: ReadonlyMap<string, Uint8Array>,
  ): Promise<void> {
    const pollFailure = (why: string) =>
      new ServerError("INTERNAL", `failed to load '${name}', failed to poll from model repository: ${why}`);
    if (config === undefined)
      throw pollFailure("load parameter 'config' must be specified for model file override");
    const parsed = this.#configOverride(name, config);
    let override: ModelOverride;
    try {
      override = await writeModelOverride(name, files);
    } catch (error) {
      throw pollFailure(asServerError(error).message);
    }
    return this.#loadOverridden(name, parsed, override);
  }

  /**
   * A model folder the caller names (ModelLoadOptions.dir), loaded as sent files are: in
   * place of the repository's, and forgotten when unloaded; the folder is the caller's, and
   * stays.
   */
  #loadFolder(name: string, dir: string): Promise<void> {
    if (!existsSync(dir) || !statSync(dir).isDirectory()) {
      return Promise.reject(
        new ServerError(
          "INTERNAL",
          `failed to load '${name}', failed to poll from model repository: no folder '${dir}'`,
        ),
      );
    }
    return this.#loadOverridden(name, undefined, { dir, remove: async () => {} }, true);
  }

  async #loadOverridden(
    name: string,
    parsed: ParsedModelConfig | undefined,
    override: ModelOverride,
    renamed = false,
  ): Promise<void> {
    let entry = this.#models.get(name);
    if (entry === undefined) {
      entry = this.#newEntry(name, undefined);
      this.#models.set(name, entry);
    }
    const loading = entry;
    const work = this.#afterTransition(loading, () =>
      this.#loadEntry(loading, { name, dir: override.dir, renamed }, parsed, override),
    );
    const mine = loading.transition;
    return work.catch((error: unknown): never => {
      // A name that only these files brought stays unknown when they do not load, as in
      // Triton (a failed first load adds no model), unless another load of it follows.
      if (loading.source === undefined && loading.everLoaded.size === 0) this.#forget(loading, mine);
      return asLoadRefusal(error);
    });
  }

  /** `unlessUnchanged`: a model serving what its folder holds now is left as it is. */
  async #load(name: string, configOverride?: ParsedModelConfig, unlessUnchanged = false): Promise<void> {
    const entry = this.#models.get(name);
    if (entry?.source === undefined) throw notInRepository(name);
    return this.#afterTransition(entry, async () => {
      const source = entry.source;
      if (source === undefined) throw notInRepository(name);
      if (unlessUnchanged && (await servesAsOnDisk(entry, source))) {
        this.#logger.debug(
          { event: "model_load_skipped", model: name },
          `model '${name}' not reloaded: no change in the model's directory`,
        );
        return;
      }
      return this.#loadEntry(entry, source, configOverride, undefined);
    });
  }

  /**
   * Runs `step` once the model's load or unload in progress (if any) has ended. The chain is
   * extended synchronously: when several callers waited for the same transition and then
   * all started, concurrent loads of one model each opened instances, and all but the last
   * were orphaned (their workers never closed, not even at shutdown).
   */
  #afterTransition(entry: ModelEntry, step: () => Promise<void>): Promise<void> {
    const work = (entry.transition ?? Promise.resolve()).then(step);
    const transition = settled(work);
    entry.transition = transition;
    void transition.then(() => {
      if (entry.transition === transition) entry.transition = undefined;
    });
    return work;
  }

  /** Loads `source`'s versions in place of `entry`'s; `override`: the folder `source` is, sent by the request. */
  async #loadEntry(
    entry: ModelEntry,
    source: ModelSource,
    configOverride: ParsedModelConfig | undefined,
    override: ModelOverride | undefined,
  ): Promise<void> {
    const name = entry.name;
    const previous = entry.versions;
    entry.state = "LOADING";
    entry.reason = "";
    const loaded = new Map<string, LoadedModel>();
    let configJson: Record<string, unknown> | undefined;
    const { value: signature, truncated } = await sourceSignature(source);
    if (truncated) {
      this.#logger.warn(
        { event: "model_folder_large", model: name },
        `model '${name}': its folder '${source.dir}' holds more than ${SIGNATURE_MAX_ENTRIES} files and folders; a change past the first ${SIGNATURE_MAX_ENTRIES} (read level by level) is not seen by poll mode nor by a load request`,
      );
    }
    const attempt: LoadAttempt = { versions: [], failed: undefined, ignoredTold: false };
    try {
      const opened = await this.#loadSlots(() =>
        withRetries(this.#options.loadRetryCount ?? 0, async () => {
          try {
            return await openModelVersions(
              this.#options,
              source,
              configOverride,
              attempt,
              (v, model, json) => {
                loaded.set(String(v), model);
                configJson = json;
              },
            );
          } catch (error) {
            // Versions this try opened are closed before the next try opens them again.
            for (const model of loaded.values()) await model.close().catch(() => {});
            loaded.clear();
            throw error;
          }
        }),
      );
      if (!opened) {
        throw unavailable(
          `failed to load '${name}': at least one version must be available under the version policy of model '${name}'`,
        );
      }
      if (source.ovms !== undefined) refuseStatefulSwitch(name, previous, loaded);
      // The previous versions' sequences move to the new ones in the same turn as the
      // switch, once no batch of theirs is running: no request finds neither. Meanwhile
      // they are paused, so the wait is bounded: past it the reload fails and they go on.
      const quietMs = this.#options.reloadQuietMs ?? 30_000;
      if (!(await quietWithin(previous, quietMs))) {
        throw unavailable(
          `model '${name}' was not reloaded: requests of its sequences were still running after ${quietMs / 1000} s (a decoupled request still streaming, or a client not reading its answers); the loaded version goes on serving; load it again later`,
        );
      }
      this.#handOverSequences(name, previous, loaded);
      entry.versions = loaded;
      entry.failedVersions = new Map();
      for (const version of loaded.keys()) entry.everLoaded.add(version);
      entry.configJson = configJson;
      entry.configOverridden = configOverride !== undefined;
      entry.state = "READY";
      entry.signature = signature;
      this.#changes++;
      this.#logger.info(
        { event: "model_loaded", model: name, versions: [...loaded.keys()] },
        `loaded model '${name}' version${loaded.size > 1 ? "s" : ""} ${[...loaded.keys()].join(", ")}`,
      );
    } catch (error) {
      for (const model of previous.values()) model.resume();
      for (const model of loaded.values()) await model.close().catch(() => {});
      await override?.remove();
      const failure = asServerError(error);
      entry.reason = failure.message;
      entry.state = previous.size > 0 ? "READY" : "UNAVAILABLE";
      // As Triton: the version that failed with its error; those that opened beside it,
      // and were let go with it, "unloaded"; a failure not of one version's, on each.
      entry.failedVersions = new Map(
        attempt.versions
          .filter((v) => !previous.has(v))
          .map((v) => [
            v,
            attempt.failed === undefined || attempt.failed === v ? failure.message : "unloaded",
          ]),
      );
      // Poll mode retries a failed model when its files change, as Triton does, not at
      // every poll (each retry started a worker and logged the same error again). That
      // holds for a reload that found the old version busy too: tried at every poll, each
      // try would pause the model's sequences for the whole wait again.
      entry.signature = signature;
      this.#logger.error(
        { event: "model_load_failed", model: name, reason: failure.message },
        `failed to load model '${name}': ${failure.message}`,
      );
      throw failure;
    }
    // A reload replaced the previous versions: let their work finish, then free them
    // (and the files a request sent for them).
    const replacedOverride = entry.override;
    entry.override = override;
    const unloads = [...previous.entries()].map(([version, model]) => {
      model.resume();
      const unloaded = model
        .unload(Date.now() + 30_000)
        .then(() => this.#unloadedSequences.keep(model))
        .catch((error: unknown) =>
          this.#logger.warn({ err: error, model: name }, "unloading a replaced version failed"),
        );
      // A version loaded again in its place counts on from the load it replaces, whose
      // requests taken before the switch are counted as they finish.
      entry.versions.get(version)?.carryCountersFrom(model, unloaded);
      return unloaded;
    });
    if (replacedOverride !== undefined)
      this.#removeLater(Promise.all(unloads).then(() => replacedOverride.remove()));
  }

  /**
   * The sequences of each replaced version go to the new version of the same number, or
   * else to the highest new one: with their state when it fits, ended otherwise. Versions
   * that stay go first: where a retired version's sequence has the id of one that lives
   * on in the version it goes to, the one already there keeps it and the newcomer ends.
   */
  #handOverSequences(
    name: string,
    previous: ReadonlyMap<string, LoadedModel>,
    loaded: ReadonlyMap<string, LoadedModel>,
  ): void {
    let highest: LoadedModel | undefined;
    for (const model of loaded.values())
      if (highest === undefined || Number(model.version) > Number(highest.version)) highest = model;
    const staying = [...previous].filter(([version]) => loaded.has(version));
    const retired = [...previous].filter(([version]) => !loaded.has(version));
    for (const [version, old] of [...staying, ...retired]) {
      const successor = loaded.get(version) ?? highest;
      if (successor === undefined) continue;
      const result = old.moveSequencesTo(successor);
      if (result.moved > 0) {
        this.#logger.info(
          {
            event: "sequences_moved",
            model: name,
            from: version,
            to: successor.version,
            count: result.moved,
          },
          `${result.moved} live sequence(s) of model '${name}' moved from version ${version} to version ${successor.version} with their state`,
        );
      }
      // Those that did not move, each group with why (the state no longer fits; the new
      // version has no room for them, or holds a live sequence of their id already).
      for (const ended of result.ended) {
        this.#logger.warn(
          { event: "sequences_ended", model: name, version, count: ended.count, reason: "reloaded" },
          `${ended.count} live sequence(s) of model '${name}' version ${version} ended: ${ended.reason}`,
        );
      }
    }
  }

  async unload(name: string): Promise<void> {
    if (this.#shuttingDown) throw notReady();
    if (this.#options.controlMode !== "explicit") {
      throw new ServerError(
        "UNAVAILABLE",
        "explicit model load / unload is not allowed if polling is enabled",
      );
    }
    return this.#unload(name);
  }

  async #unload(name: string, graceMs = 30_000): Promise<void> {
    const entry = this.#models.get(name);
    // As Triton: unloading a model it does not know changes nothing, and succeeds.
    if (entry === undefined) return;
    let fromSentFilesOnly = false;
    const work = this.#afterTransition(entry, async () => {
      fromSentFilesOnly = entry.source === undefined && entry.override !== undefined;
      const versions = entry.versions;
      entry.versions = new Map();
      entry.failedVersions = new Map();
      entry.state = "UNLOADING";
      await Promise.all(
        [...versions.values()].map(async (m) => {
          await m.unload(Date.now() + graceMs, "unloaded");
          this.#unloadedSequences.keep(m);
        }),
      );
      await entry.override?.remove();
      entry.override = undefined;
      entry.state = "UNAVAILABLE";
      entry.reason = "unloaded";
      this.#changes++;
      this.#logger.info({ event: "model_unloaded", model: name }, `unloaded model '${name}'`);
    });
    const mine = entry.transition;
    await work;
    // A model that only a request's files made (no repository has its folder) is forgotten
    // once unloaded: Triton's index lists only what the repositories hold, and each name
    // loaded this way would otherwise be kept for good. (A repository model whose folder
    // went stays known, as in Triton: "has no available versions".)
    if (fromSentFilesOnly) this.#forget(entry, mine);
  }

  /**
   * Drops `entry`, which serves nothing, unless another load or unload of it followed
   * `mine` (its transition that just ended) or its name now means another entry.
   */
  #forget(entry: ModelEntry, mine: Promise<void> | undefined): void {
    const next = entry.transition;
    if (entry.versions.size > 0 || (next !== mine && next !== undefined)) return;
    if (this.#models.get(entry.name) === entry) this.#models.delete(entry.name);
  }

  // ---- lookups (Triton's messages) ----

  model(name: string, version?: string): ServedModel {
    const entry = this.#models.get(name);
    if (entry === undefined)
      throw new ServerError("NOT_FOUND", `Request for unknown model: '${name}' is not found`, {
        reason: "model_unknown",
      });
    if (version === undefined || version === "") {
      let best: LoadedModel | undefined;
      for (const model of entry.versions.values())
        if (best === undefined || Number(model.version) > Number(best.version)) best = model;
      if (best === undefined) {
        const message = `Request for unknown model: '${name}' has no available versions`;
        // A model still loading will serve soon: UNAVAILABLE, to be retried (Triton answers
        // NOT_FOUND then too, which clients would take for gone).
        if (entry.state === "LOADING") {
          throw new ServerError("UNAVAILABLE", message, { retryAfterSeconds: 1, reason: "version_loading" });
        }
        // Unloaded, its folder gone, or its load failed: Triton's NOT_FOUND
        // (ModelLifeCycle::GetModel), not a 503 clients would retry for a model that is gone.
        // OVMS's families tell a model whose load failed (a version not loaded) from one
        // whose versions are all gone (its default version is then none: "not found").
        throw new ServerError("NOT_FOUND", message, {
          reason: entry.failedVersions.size > 0 ? "version_loading" : "version_unknown",
        });
      }
      return best;
    }
    if (!/^\d+$/.test(version))
      throw invalidArg(`Request for model '${name}': version '${version}' is not a version number`);
    const key = String(Number(version));
    const model = entry.versions.get(key);
    if (model === undefined) {
      const served = entry.everLoaded.has(key);
      // A version whose load failed is known too, not ready (Triton keeps it in its table).
      const failed = entry.failedVersions.has(key);
      if (served || failed || entry.state === "LOADING" || entry.state === "UNLOADING") {
        throw new ServerError(
          "UNAVAILABLE",
          `Request for unknown model: '${name}' version ${version} is not at ready state`,
          { reason: served ? "version_retired" : "version_loading" },
        );
      }
      throw new ServerError(
        "NOT_FOUND",
        `Request for unknown model: '${name}' version ${version} is not found`,
        {
          reason: "version_unknown",
        },
      );
    }
    return model;
  }

  metadata(name: string, version?: string): ModelMetadata {
    const model = this.model(name, version);
    // As Triton: the metadata of one version lists that version; of the model, every ready one.
    const versions =
      version === undefined || version === ""
        ? [...this.#models.get(name)!.versions.keys()].sort((a, b) => Number(a) - Number(b))
        : [model.version];
    return {
      name: model.name,
      versions,
      platform: model.config.platform,
      inputs: model.inputs,
      outputs: model.outputs,
    };
  }

  configJson(name: string, version?: string): Record<string, unknown> {
    this.model(name, version);
    return this.#models.get(name)!.configJson ?? {};
  }

  isReady(name: string, version?: string): boolean {
    try {
      this.model(name, version);
      return true;
    } catch {
      return false;
    }
  }

  /**
   * The models in Triton's order, its index's: by name as a std::map orders them, byte
   * for byte for ASCII names ("Zeta" before "alpha"), not by the locale's collation,
   * whose first use also pages in about 2 MB of ICU's tables.
   */
  #byName(): ModelEntry[] {
    return [...this.#models.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  index(readyOnly = false): RepositoryIndexEntry[] {
    const entries: RepositoryIndexEntry[] = [];
    for (const entry of this.#byName()) {
      if (entry.versions.size > 0) {
        // As Triton: beside the versions served, those served before and since replaced or
        // unloaded, UNAVAILABLE "unloaded", and those the last load failed to add, with why.
        const listed = new Set(entry.versions.keys());
        if (!readyOnly) for (const v of [...entry.everLoaded, ...entry.failedVersions.keys()]) listed.add(v);
        for (const version of [...listed].sort((a, b) => Number(a) - Number(b))) {
          const failure = entry.failedVersions.get(version);
          entries.push(
            entry.versions.has(version)
              ? { name: entry.name, version, state: "READY", reason: "" }
              : { name: entry.name, version, state: "UNAVAILABLE", reason: failure ?? "unloaded" },
          );
        }
      } else if (!readyOnly) {
        // As Triton: the versions a model once served stay listed, each with why it is not;
        // a model never loaded, nor tried, is listed by its name alone.
        // A first load that failed lists the versions it tried, each with why (Triton keeps
        // each version's state).
        const versions = [...new Set([...entry.everLoaded, ...entry.failedVersions.keys()])].sort(
          (a, b) => Number(a) - Number(b),
        );
        // A name in two repositories: Triton's MODEL_READY_REASON_DUPLICATE (the log and
        // the start's failure name the folders).
        const reason =
          entry.notUnique === undefined ? entry.reason : "model appears in two or more repositories";
        if (versions.length === 0 && entry.state === "UNAVAILABLE" && reason === "unloaded")
          entries.push({ name: entry.name });
        else if (versions.length === 0) entries.push({ name: entry.name, state: entry.state, reason });
        for (const version of versions) {
          const failure = entry.notUnique === undefined ? entry.failedVersions.get(version) : undefined;
          entries.push({ name: entry.name, version, state: entry.state, reason: failure ?? reason });
        }
      }
    }
    return entries;
  }

  /** Triton's statistics lookups: a model or version that is not ready is an invalid request. */
  statistics(name?: string, version?: string): ModelStatisticsSnapshot[] {
    if (name === undefined || name === "") {
      // In Triton's order, by name then version (served() is in no order: it serves every request's lookups).
      return this.#byName().flatMap((entry) => byVersion(entry).map((m) => m.statistics()));
    }
    const entry = this.#models.get(name);
    if (entry === undefined || entry.versions.size === 0)
      throw invalidArg(`requested model '${name}' is not available`);
    if (version === undefined || version === "") return byVersion(entry).map((m) => m.statistics());
    const model = /^\d+$/.test(version) ? entry.versions.get(String(Number(version))) : undefined;
    if (model === undefined) throw invalidArg(`requested model version is not available for model '${name}'`);
    return [model.statistics()];
  }

  served(): ServedModel[] {
    const models: ServedModel[] = [];
    for (const entry of this.#models.values()) models.push(...entry.versions.values());
    return models;
  }

  unloadedSequence(id: SequenceId): UnloadedSequenceEnd | undefined {
    return this.#unloadedSequences.find(id);
  }

  /**
   * Why the start failed, under --exit-on-error: the models the control mode asked for that
   * did not load, or whose name was found in more than one place (as Triton's "failed to
   * load all models"). Explicit mode asks only for its --load-model names.
   */
  startFailures(): string[] {
    const { controlMode, loadModels } = this.#options;
    const asked = (name: string) =>
      controlMode !== "explicit" || loadModels.includes("*") || loadModels.includes(name);
    const failures: string[] = [];
    for (const entry of this.#byName()) {
      if (entry.versions.size > 0) continue;
      if (entry.notUnique !== undefined) {
        if (asked(entry.name)) failures.push(entry.notUnique);
      } else if (entry.state === "UNAVAILABLE" && entry.reason !== "unloaded") {
        failures.push(`model '${entry.name}' failed to load: ${entry.reason}`);
      }
    }
    return failures;
  }

  /**
   * Every model the server was asked to serve is ready (Triton's strict readiness). A model
   * that serves while it reloads is ready (Triton loads the new copy beside it); in
   * explicit mode, a model whose last load failed is not, until it loads or is unloaded.
   */
  allReady(): boolean {
    const explicit = this.#options.controlMode === "explicit";
    for (const entry of this.#models.values()) {
      if (entry.source === undefined || entry.versions.size > 0) continue;
      const failed = entry.state === "UNAVAILABLE" && entry.reason !== "unloaded";
      const wanted = !explicit || entry.state === "LOADING" || failed;
      if (wanted && entry.state !== "READY") return false;
    }
    return true;
  }

  // ---- shutdown ----

  beginShutdown(): void {
    this.#shuttingDown = true;
    if (this.#pollTimer !== undefined) clearInterval(this.#pollTimer);
    if (this.#configTimer !== undefined) clearInterval(this.#configTimer);
    for (const model of this.#allLoaded()) model.beginShutdown();
  }

  /**
   * Lets work finish until `deadlineMs`. A Triton model's live sequences may finish too;
   * an OVMS model's are not waited for (OVMS drops them as it stops): once its requests
   * are answered, they end (`shutdown`).
   */
  async drain(deadlineMs: number): Promise<void> {
    await Promise.all(
      [...this.#models.values()].flatMap((entry) =>
        [...entry.versions.values()].map((model) =>
          entry.source?.ovms === undefined ? model.drain(deadlineMs) : drainRequests(model, deadlineMs),
        ),
      ),
    );
  }

  /**
   * The model versions with work in flight (requests accepted and not answered, and, of
   * a Triton model, live or waiting sequences), as a stopping server reports them each
   * second, Triton's way.
   */
  inFlight(): { model: string; version: string; count: number }[] {
    const busy: { model: string; version: string; count: number }[] = [];
    for (const entry of this.#models.values()) {
      for (const model of entry.versions.values()) {
        const summary = entry.source?.ovms === undefined ? model.sequences?.summary() : undefined;
        const count = model.pending + (summary === undefined ? 0 : summary.live + summary.backlog);
        if (count > 0) busy.push({ model: model.name, version: model.version, count });
      }
    }
    return busy;
  }

  /** Tracks a removal of sent files that waits for replaced versions, so that shutdown waits for it too. */
  #removeLater(removal: Promise<void>): void {
    const tracked = removal
      .catch(() => {})
      .then(() => {
        this.#removals.delete(tracked);
      });
    this.#removals.add(tracked);
  }

  /**
   * Ends every model: live sequences get until `deadlineMs`. A load or unload under way is
   * waited for until `transitionsDeadlineMs` (the server's exit timeout, as Triton counts
   * them against it); past it the server goes on without it, and what it opens is closed
   * once it ends. Resolves to whether everything finished in time (no transition cut short).
   */
  async shutdown(deadlineMs: number, transitionsDeadlineMs = Number.POSITIVE_INFINITY): Promise<boolean> {
    this.beginShutdown();
    const transitions = Promise.all([...this.#models.values()].map((e) => e.transition));
    let transitionsDone = false;
    void transitions.then(() => {
      transitionsDone = true;
    });
    await untilDeadline(transitions, transitionsDeadlineMs);
    if (!transitionsDone) {
      this.#logger.warn(
        { event: "exit_timeout" },
        "the exit timeout passed with a model load or unload under way: the server stops without it, and closes what it opens once it ends",
      );
      void transitions.then(() => Promise.all(this.#allLoaded().map((m) => m.close())));
    }
    await this.drain(deadlineMs);
    await Promise.all(this.#allLoaded().map((m) => m.close()));
    await Promise.all(this.#removals);
    for (const entry of this.#models.values()) {
      await entry.override?.remove();
      entry.override = undefined;
      entry.versions = new Map();
      entry.state = "UNAVAILABLE";
      entry.reason = "unloaded";
    }
    return transitionsDone;
  }

  #allLoaded(): LoadedModel[] {
    return [...this.#models.values()].flatMap((e) => [...e.versions.values()]);
  }
}

/**
 * Waits until `model` has answered the requests it accepted (or `deadlineMs`), then ends
 * what is left, its live sequences included, as OVMS stops (with a state store, the
 * batcher's drain hands the sequences over instead: they go on on other replicas).
 */
async function drainRequests(model: LoadedModel, deadlineMs: number): Promise<void> {
  model.beginShutdown();
  while (model.pending > 0 && Date.now() < deadlineMs) await delay(REQUESTS_DRAIN_POLL_MS);
  await model.drain(Math.min(Date.now(), deadlineMs));
}

/** How often a stopping OVMS model looks whether its requests are answered. */
const REQUESTS_DRAIN_POLL_MS = 20;

/** A model's loaded versions in Triton's order, ascending (a std::map of int64). */
function byVersion(entry: ModelEntry): LoadedModel[] {
  return [...entry.versions].sort(([a], [b]) => Number(a) - Number(b)).map(([, model]) => model);
}

/** A file's text, or "" when it cannot be read (a reload then reports the reading error). */
function readText(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return "";
  }
}

/**
 * OVMS refuses to switch `stateful` on a loaded model ("Model type cannot be changed after
 * it is loaded"): its clients' requests would change meaning. The loaded versions stay.
 */
function refuseStatefulSwitch(
  name: string,
  previous: ReadonlyMap<string, LoadedModel>,
  loaded: ReadonlyMap<string, LoadedModel>,
): void {
  if (previous.size === 0) return;
  const stateful = (models: ReadonlyMap<string, LoadedModel>): boolean =>
    [...models.values()].some((m) => m.config.sequenceBatching !== undefined);
  const was = stateful(previous);
  if (was === stateful(loaded)) return;
  throw new ServerError(
    "FAILED_PRECONDITION",
    `Model type cannot be changed after it is loaded: model '${name}' is ${was ? "stateful" : "stateless"} and the new configuration makes it ${was ? "stateless" : "stateful"}; remove it from the configuration (unloading it) before adding it back`,
  );
}

/**
 * Triton answers a failure to load with INVALID_ARG (HTTP 400), whatever its cause: a load
 * request is refused as a whole, not retried as if the server were busy.
 */
function asLoadRefusal(error: unknown): never {
  const failure = asServerError(error);
  throw failure.code === "INVALID_ARG"
    ? failure
    : new ServerError("INVALID_ARG", failure.message, { cause: failure });
}

/** Why Triton's model repository would refuse `name` (ValidateModelName); undefined when it would not. */
function modelNameProblem(name: string): string | undefined {
  const trimmed = name.trim();
  if (trimmed === "") return "Model name cannot be empty. Please enter a valid name to deploy.";
  if (trimmed === ".." || trimmed.includes("/")) {
    return `invalid model name '${name}', model name must not contain path traversal characters`;
  }
  return undefined;
}

/**
 * As Triton once the server is exiting: no model is loaded or unloaded any more (its
 * inference requests go on, so live sequences may finish).
 */
function notReady(): ServerError {
  return new ServerError("UNAVAILABLE", SERVER_NOT_READY);
}

/** Triton's answer to a load of a model no repository has. */
function notInRepository(name: string): ServerError {
  return new ServerError("INTERNAL", `failed to load '${name}', failed to poll from model repository`);
}

/**
 * A transition only orders loads and unloads: its failure belongs to the caller, who gets
 * `work` itself. Chaining on the rejecting promise itself made a second, unobserved
 * rejection that ended the process (e.g. a model file ONNX Runtime cannot parse).
 */
function settled(work: Promise<void>): Promise<void> {
  return work.then(
    () => {},
    () => {},
  );
}

/** Whether every model in `models` quiesced (ran no batch any more) within `limitMs`. */
async function quietWithin(models: ReadonlyMap<string, LoadedModel>, limitMs: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), timerDelay(limitMs));
  });
  try {
    return await Promise.race([
      Promise.all([...models.values()].map((m) => m.quiesce())).then(() => true),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** `open`, tried again up to `retries` more times while it fails (Triton's --model-load-retry-count). */
async function withRetries<T>(retries: number, open: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await open();
    } catch (error) {
      if (attempt >= retries) throw error;
    }
  }
}

/** What a load tried: the versions the policy named, and the one whose opening failed. */
interface LoadAttempt {
  versions: string[];
  failed: string | undefined;
  /** The version folders that are not versions were logged (by the first try). */
  ignoredTold: boolean;
}

/** Opens every version the policy serves (told in `attempt`); false when there is none. */
async function openModelVersions(
  options: ModelRepositoryOptions,
  source: ModelSource,
  configOverride: ParsedModelConfig | undefined,
  attempt: LoadAttempt,
  onVersion: (version: number, model: LoadedModel, configJson: Record<string, unknown>) => void,
): Promise<boolean> {
  const prepared = await prepareModel(
    source,
    configOverride,
    options.strict,
    { sequenceCleanerPollWaitMinutes: options.sequenceCleanerPollWaitMinutes ?? 5 },
    options.configName,
  );
  checkInstanceCount(prepared, options.maxInstancesPerModel, options.refusals);
  // What an OVMS config.json entry asks that has no effect here: once per model, not per version.
  for (const note of source.ovms?.entry.notes ?? [])
    options.logger.info({ event: "config_note", model: source.name }, note);
  const available =
    existsSync(source.dir) && statSync(source.dir).isDirectory()
      ? versionFolders(source.dir, source.ovms !== undefined, (warning) => {
          // Once per load, not again at each of its retries.
          if (attempt.ignoredTold) return;
          options.logger.warn({ event: "version_ignored", model: source.name }, warning);
        })
      : [];
  attempt.ignoredTold = true;
  const policy = prepared.settings.versionPolicy;
  // Triton's words for a version the policy names that has no folder; the others load.
  if (policy.kind === "specific") {
    for (const version of policy.versions.filter((v) => !available.includes(v))) {
      options.logger.error(
        { event: "version_missing", model: source.name, version },
        `version ${version} is specified for model '${source.name}', but the version directory is not present`,
      );
    }
  }
  const versions = selectVersions(available, policy);
  if (versions.length === 0) return false;
  attempt.versions = versions.map(String);
  attempt.failed = undefined;
  for (const version of versions) {
    attempt.failed = String(version);
    const { model, configJson } = await openVersion(prepared, version, options);
    attempt.failed = undefined;
    onVersion(version, model, configJson);
  }
  return true;
}

/**
 * As Triton (ModelRepositoryManager::LoadModel): a load request without a config or files
 * of a model already serving, every version that its folder holds now and nothing else, is
 * not necessary, and changes nothing: no new instances, no warmup, its statistics go on.
 * A change in the folder, a version whose last load failed, or versions loaded from a
 * request's config or files (the folder's own are then new to it) make it a reload.
 */
async function servesAsOnDisk(entry: ModelEntry, source: ModelSource): Promise<boolean> {
  return (
    entry.state === "READY" &&
    entry.versions.size > 0 &&
    entry.reason === "" &&
    entry.failedVersions.size === 0 &&
    entry.override === undefined &&
    !entry.configOverridden &&
    (await sourceSignature(source)).value === entry.signature
  );
}
