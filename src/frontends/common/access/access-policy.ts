import { createHash, timingSafeEqual } from "node:crypto";
import type { AccessOptions, ApiGroup, ApiKey, HeaderRestriction } from "../../../config/security-options.ts";
import { ServerError } from "../../../core/errors.ts";
import type { Refusals } from "../../../core/refusals.ts";

// Who may call which API, for one protocol (HTTP or gRPC: Triton's restrictions differ
// between them). A request is let through when its API group is open, when it carries the
// header Triton's restriction asks for, or when it carries an API key that opens the group
// (`Authorization: Bearer <key>` or `x-api-key: <key>`); it is refused with
// UNAUTHENTICATED (no key, or an unknown one) or PERMISSION_DENIED (a key that does not
// open the group, a Triton restriction not met).
//
// Secrets are compared as SHA-256 digests with timingSafeEqual, against every key each
// time: how long a check takes says nothing about how close a guess was. The caller is
// named by its key's name, never by the key.

/** Reads a request header (lower-case name); undefined when absent. */
export type HeaderLookup = (name: string) => string | undefined;

interface StoredKey {
  readonly name: string;
  readonly digest: Buffer;
  readonly groups: ReadonlySet<ApiGroup>;
}

const digest = (text: string): Buffer => createHash("sha256").update(text, "utf8").digest();

/** Whether `given` equals the secret whose digest is `expected`, in time independent of both. */
function matches(given: Buffer, expected: Buffer): boolean {
  return timingSafeEqual(given, expected);
}

export interface AccessPolicyOptions {
  readonly access: AccessOptions;
  /** This protocol's Triton restrictions (--http-restricted-api or --grpc-restricted-protocol). */
  readonly restrictions: Readonly<Partial<Record<ApiGroup, HeaderRestriction>>>;
  /** How Triton words an unmet restriction on this protocol ("API" over HTTP, "protocol" over gRPC). */
  readonly restrictedWord: "API" | "protocol";
  readonly refusals?: Refusals | undefined;
}

export class AccessPolicy {
  readonly #keys: readonly StoredKey[];
  readonly #open: ReadonlySet<ApiGroup>;
  readonly #restrictions: ReadonlyMap<ApiGroup, HeaderRestriction & { readonly digest: Buffer }>;
  readonly #restrictedWord: string;
  readonly #refusals: Refusals | undefined;
  /** Nothing is restricted: every check passes at once. */
  readonly unrestricted: boolean;

  constructor(options: AccessPolicyOptions) {
    this.#keys = options.access.apiKeys.map((key: ApiKey) => ({
      name: key.name,
      digest: digest(key.secret),
      groups: new Set(key.groups),
    }));
    this.#open = new Set(options.access.openGroups);
    const restrictions = new Map<ApiGroup, HeaderRestriction & { readonly digest: Buffer }>();
    for (const [group, restriction] of Object.entries(options.restrictions)) {
      if (restriction !== undefined) {
        restrictions.set(group as ApiGroup, { ...restriction, digest: digest(restriction.value) });
      }
    }
    this.#restrictions = restrictions;
    this.#restrictedWord = options.restrictedWord;
    this.#refusals = options.refusals;
    this.unrestricted = this.#keys.length === 0 && restrictions.size === 0;
  }

  /** Whether a group needs an API key. */
  needsKey(group: ApiGroup): boolean {
    return this.#keys.length > 0 && !this.#open.has(group);
  }

  /**
   * Lets a request to `group` through, or throws. Returns the caller's name when it was
   * let through by an API key, undefined otherwise.
   */
  check(group: ApiGroup, header: HeaderLookup): string | undefined {
    if (this.unrestricted) return undefined;
    const restriction = this.#restrictions.get(group);
    const needsKey = this.needsKey(group);
    if (restriction === undefined && !needsKey) return undefined;
    if (restriction !== undefined) {
      const given = header(restriction.header);
      if (given !== undefined && matches(digest(given), restriction.digest)) return undefined;
      if (!needsKey) {
        this.#refusals?.denied(group, "forbidden");
        throw new ServerError(
          "PERMISSION_DENIED",
          `This ${this.#restrictedWord} is restricted, expecting header '${restriction.header}'`,
        );
      }
    }
    const token = presentedKey(header);
    if (token === undefined) {
      this.#refusals?.denied(group, "missing");
      throw new ServerError(
        "UNAUTHENTICATED",
        `the ${group} API needs an API key: send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'`,
      );
    }
    const key = this.#find(token);
    if (key === undefined) {
      this.#refusals?.denied(group, "invalid");
      throw new ServerError("UNAUTHENTICATED", "the API key is not valid");
    }
    if (!key.groups.has(group)) {
      this.#refusals?.denied(group, "forbidden");
      throw new ServerError("PERMISSION_DENIED", `the API key '${key.name}' does not open the ${group} API`);
    }
    return key.name;
  }

  #find(token: string): StoredKey | undefined {
    const given = digest(token);
    let found: StoredKey | undefined;
    // Every key is compared, found or not.
    for (const key of this.#keys) if (matches(given, key.digest) && found === undefined) found = key;
    return found;
  }
}

/** The key a request presents: `Authorization: Bearer <key>`, else `x-api-key`. */
function presentedKey(header: HeaderLookup): string | undefined {
  const authorization = header("authorization");
  if (authorization !== undefined) {
    const match = /^\s*Bearer\s+(\S+)\s*$/i.exec(authorization);
    if (match !== null) return match[1];
  }
  const apiKey = header("x-api-key")?.trim();
  return apiKey === undefined || apiKey === "" ? undefined : apiKey;
}
