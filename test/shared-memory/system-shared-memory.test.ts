import assert from "node:assert/strict";
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { ServerError } from "../../src/core/errors.ts";
import { Refusals } from "../../src/core/refusals.ts";
import {
  PAGE_SIZE,
  SystemSharedMemory,
  type SystemSharedMemoryOptions,
} from "../../src/shared-memory/system-shared-memory.ts";

// The region registry on its own, over a temporary folder standing in for /dev/shm: what
// a request reads and writes, how long a region lives, the descriptors it holds and its
// limits. Over the APIs, with /dev/shm itself: test/e2e/triton-shared-memory.test.ts.

const failsWith = (code: string, message: string) => (error: unknown) => {
  assert.ok(error instanceof ServerError, String(error));
  assert.deepEqual([error.code, error.message], [code, message]);
  return true;
};

/** Descriptors this process has open (Linux). */
/**
 * The descriptors this process holds open on files in `folder`: the test process's other
 * descriptors (sockets of files run beside it, a handle closed late) come and go meanwhile.
 */
function openDescriptors(folder: string): number {
  let count = 0;
  for (const fd of readdirSync("/proc/self/fd")) {
    try {
      if (readlinkSync(`/proc/self/fd/${fd}`).startsWith(`${folder}/`)) count++;
    } catch {
      // Closed between the listing and the look.
    }
  }
  return count;
}

const BYTES = Buffer.from(Array.from({ length: 64 }, (_, i) => i));

describe("SystemSharedMemory", () => {
  let folder: string;
  const object = (name: string, bytes: Uint8Array = BYTES): string => {
    writeFileSync(join(folder, name), bytes);
    return `/${name}`;
  };
  const registry = (options: Partial<SystemSharedMemoryOptions> = {}) =>
    new SystemSharedMemory({
      clientRegistration: true,
      maxRegions: 16,
      maxBytes: 1024,
      directory: folder,
      ...options,
    });
  before(() => {
    folder = mkdtempSync(join(tmpdir(), "seqserve-shm-"));
  });
  after(() => rmSync(folder, { recursive: true, force: true }));

  it("reads and writes slices relative to the region, and refuses slices outside it", () => {
    const regions = registry();
    // The region starts on a page (Triton maps it), at the 16th of BYTES.
    const key = object("slices", Buffer.concat([Buffer.alloc(PAGE_SIZE - 16, 0xff), BYTES]));
    regions.register("r", key, PAGE_SIZE, 32);
    const use = regions.use();
    assert.deepEqual([...use.read({ region: "r", offset: 4, byteSize: 4 })], [20, 21, 22, 23]);
    use.hold({ region: "r", offset: 30, byteSize: 2 });
    use.write({ region: "r", offset: 30, byteSize: 2 }, "OUT", Uint8Array.of(200, 201));
    assert.deepEqual(
      [...readFileSync(join(folder, "slices")).subarray(PAGE_SIZE + 30, PAGE_SIZE + 32)],
      [200, 201],
    );
    assert.throws(
      () => use.read({ region: "r", offset: 32, byteSize: 0 }),
      failsWith("INVALID_ARG", "Invalid offset for shared memory region: 'r'"),
    );
    assert.throws(
      () => use.read({ region: "r", offset: 30, byteSize: 4 }),
      failsWith("INVALID_ARG", "Invalid offset + byte size for shared memory region: 'r'"),
    );
    assert.throws(
      () => use.write({ region: "r", offset: 0, byteSize: 2 }, "OUT", new Uint8Array(3)),
      failsWith(
        "INTERNAL",
        "shared memory size specified with the request for output 'OUT' (2 bytes) should be at least 3 bytes to hold the results",
      ),
    );
    use.release();
    regions.close();
  });

  it("a region unregistered while a request holds it lives until the request is done, as in Triton", () => {
    const regions = registry();
    const first = object("first", new Uint8Array(8));
    const second = object("second", new Uint8Array(8));
    const descriptors = openDescriptors(folder);
    regions.register("out", first, 0, 8);
    const use = regions.use();
    use.hold({ region: "out", offset: 0, byteSize: 8 });
    regions.unregister("out");
    // Still listed, its name still taken, its descriptor still open.
    assert.deepEqual(
      regions.status().map((r) => r.name),
      ["out"],
    );
    assert.throws(
      () => regions.register("out", second, 0, 8),
      failsWith("ALREADY_EXISTS", "shared memory region 'out' already in manager"),
    );
    assert.equal(openDescriptors(folder), descriptors + 1);
    // A request that comes after does not find it: requests in turn cannot keep it alive.
    const later = regions.use();
    assert.throws(
      () => later.hold({ region: "out", offset: 0, byteSize: 8 }),
      failsWith("NOT_FOUND", "Unable to find shared memory region: 'out'"),
    );
    later.release();
    use.write({ region: "out", offset: 0, byteSize: 8 }, "OUT", new Uint8Array(8).fill(7));
    assert.deepEqual([...readFileSync(join(folder, "first"))], new Array(8).fill(7));
    use.release();
    assert.deepEqual(regions.status(), []);
    assert.equal(openDescriptors(folder), descriptors);
    // Registered again, the name is the new object's.
    regions.register("out", second, 0, 8);
    assert.equal(regions.status()[0]?.key, second);
    regions.unregister();
    assert.equal(openDescriptors(folder), descriptors);
  });

  it("regions of one object share one descriptor", () => {
    const regions = registry();
    const key = object("shared", new Uint8Array(8 * PAGE_SIZE));
    const descriptors = openDescriptors(folder);
    for (let i = 0; i < 8; i++) regions.register(`r${i}`, key, i * PAGE_SIZE, 8);
    assert.equal(openDescriptors(folder), descriptors + 1);
    for (let i = 0; i < 7; i++) regions.unregister(`r${i}`);
    assert.equal(openDescriptors(folder), descriptors + 1);
    regions.unregister("r7");
    assert.equal(openDescriptors(folder), descriptors);
  });

  it("bounds the regions registered and the bytes read by requests in flight, and counts the refusals", () => {
    const refusals = new Refusals();
    const regions = registry({ maxRegions: 2, maxBytes: 48, refusals });
    const key = object("bounded", new Uint8Array(PAGE_SIZE + 32));
    regions.register("a", key, 0, 32);
    regions.register("b", key, PAGE_SIZE, 32);
    assert.throws(
      () => regions.register("c", key, 0, 8),
      failsWith(
        "RESOURCE_EXHAUSTED",
        "failed to register shared memory region 'c': 2 regions are registered, the server's limit (--max-shared-memory-regions)",
      ),
    );
    const first = regions.use();
    first.read({ region: "a", offset: 0, byteSize: 32 });
    const second = regions.use();
    assert.throws(
      () => second.read({ region: "b", offset: 0, byteSize: 32 }),
      failsWith(
        "RESOURCE_EXHAUSTED",
        "reading 32 bytes from shared memory would take the bytes read by requests in flight past the server's limit of 48 (--max-shared-memory-bytes)",
      ),
    );
    first.release();
    first.release();
    assert.equal(second.read({ region: "b", offset: 0, byteSize: 32 }).byteLength, 32);
    second.release();
    assert.equal(refusals.count("shared_memory_regions"), 1);
    assert.equal(refusals.count("shared_memory_bytes"), 1);
    regions.close();
  });

  it("an object truncated after it was registered is neither read nor written past its end", () => {
    const regions = registry();
    const key = object("truncated");
    regions.register("t", key, 0, 64);
    truncateSync(join(folder, "truncated"), 16);
    const use = regions.use();
    const message =
      "shared memory region 't' ends before the 32 bytes at offset 0: its key '/truncated' was truncated after it was registered";
    assert.throws(
      () => use.read({ region: "t", offset: 0, byteSize: 32 }),
      failsWith("INVALID_ARG", message),
    );
    use.hold({ region: "t", offset: 0, byteSize: 32 });
    assert.throws(
      () => use.write({ region: "t", offset: 0, byteSize: 32 }, "OUT", new Uint8Array(32)),
      failsWith("INVALID_ARG", message),
    );
    assert.equal(readFileSync(join(folder, "truncated")).byteLength, 16);
    use.release();
    regions.close();
  });

  it("refuses what Triton's mmap of a region refuses: no bytes, an offset off a page", () => {
    const regions = registry();
    const key = object("mapped", new Uint8Array(2 * PAGE_SIZE));
    const refused =
      "failed to register shared memory region 'r': unable to process address spaceInvalid argument";
    assert.throws(() => regions.register("r", key, 0, 0), failsWith("INVALID_ARG", refused));
    assert.throws(() => regions.register("r", key, 8, 8), failsWith("INVALID_ARG", refused));
    assert.throws(() => regions.register("r", key, PAGE_SIZE / 2, 8), failsWith("INVALID_ARG", refused));
    assert.deepEqual(regions.status(), []);
    regions.register("r", key, PAGE_SIZE, PAGE_SIZE);
    regions.close();
  });

  it("opens only regular files in its folder, never through a link", () => {
    const regions = registry();
    symlinkSync(join(folder, object("target")), join(folder, "link"));
    mkdirSync(join(folder, "folder"));
    for (const key of ["/link", "/folder", "/a/../target"]) {
      assert.throws(
        () => regions.register("r", key, 0, 8),
        failsWith("INTERNAL", `Unable to open shared memory region: '${key}'`),
      );
    }
    assert.deepEqual(regions.status(), []);
  });

  it("a region registered with an API key is that key's; one registered without is any caller's", () => {
    const regions = registry();
    const owned = object("owned");
    regions.register("owned", owned, 0, 64, "tenant-a");
    regions.register("open", object("open"), 0, 64);
    const denied = failsWith(
      "PERMISSION_DENIED",
      "shared memory region 'owned' belongs to another caller: only the API key that registered it may use, list or unregister it",
    );
    const slice = { region: "owned", offset: 0, byteSize: 4 };
    // Refused before the slice is checked: an offset past its end says nothing of its size.
    for (const caller of ["tenant-b", undefined]) {
      const use = regions.use(caller);
      assert.throws(() => use.read(slice), denied);
      assert.throws(() => use.hold({ ...slice, offset: 4096 }), denied);
      assert.deepEqual([...use.read({ ...slice, region: "open" })], [0, 1, 2, 3]);
      use.release();
      assert.throws(() => regions.status("owned", caller), denied);
      assert.throws(() => regions.unregister("owned", caller), denied);
      assert.deepEqual(
        regions.status(undefined, caller).map((r) => r.name),
        ["open"],
      );
    }
    const mine = regions.use("tenant-a");
    assert.deepEqual([...mine.read(slice)], [0, 1, 2, 3]);
    mine.release();
    assert.throws(
      () => regions.register("again", owned, 0, 64, "tenant-b"),
      failsWith(
        "PERMISSION_DENIED",
        "failed to register shared memory region 'again': its key '/owned' is registered by another caller, only the API key that registered it may register it again",
      ),
    );
    regions.unregister(undefined, "tenant-b");
    assert.deepEqual(
      regions.status(undefined, "tenant-a").map((r) => r.name),
      ["owned"],
    );
    regions.unregister(undefined, "tenant-a");
    assert.deepEqual(regions.status(undefined, "tenant-a"), []);
    regions.close();
  });

  it("refuses registrations where clients may not register, and lists none", () => {
    const regions = registry({ clientRegistration: false });
    const disabled =
      "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";
    assert.throws(() => regions.register("r", object("disabled"), 0, 8), failsWith("UNSUPPORTED", disabled));
    assert.throws(() => regions.unregister(), failsWith("UNSUPPORTED", disabled));
    assert.deepEqual(regions.status(), []);
  });
});
