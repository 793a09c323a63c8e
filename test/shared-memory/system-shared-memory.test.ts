import assert from "node:assert/strict";
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { ServerError } from "../../src/core/errors.ts";
import { SystemSharedMemory } from "../../src/shared-memory/system-shared-memory.ts";

// The region registry on its own, over a temporary folder standing in for /dev/shm: what
// it reads and writes, and the descriptors it holds. Over the APIs, with /dev/shm itself:
// test/e2e/triton-shared-memory.test.ts.

const failsWith = (code: string, message: string) => (error: unknown) =>
  error instanceof ServerError && error.code === code && error.message === message;

/** Descriptors this process has open (Linux). */
const openDescriptors = (): number => readdirSync("/proc/self/fd").length;

describe("SystemSharedMemory", () => {
  let folder: string;
  before(() => {
    folder = mkdtempSync(join(tmpdir(), "seqserve-shm-"));
    writeFileSync(join(folder, "data"), Buffer.from(Array.from({ length: 64 }, (_, i) => i)));
  });
  after(() => rmSync(folder, { recursive: true, force: true }));

  it("reads and writes slices relative to the region, and refuses slices outside it", () => {
    const regions = new SystemSharedMemory(true, folder);
    regions.register("r", "/data", 16, 32);
    assert.deepEqual([...regions.read({ region: "r", offset: 4, byteSize: 4 })], [20, 21, 22, 23]);
    regions.write({ region: "r", offset: 30, byteSize: 2 }, "OUT", Uint8Array.of(200, 201));
    assert.deepEqual([...readFileSync(join(folder, "data")).subarray(46, 48)], [200, 201]);
    assert.throws(
      () => regions.read({ region: "r", offset: 32, byteSize: 0 }),
      failsWith("INVALID_ARG", "Invalid offset for shared memory region: 'r'"),
    );
    assert.throws(
      () => regions.read({ region: "r", offset: 30, byteSize: 4 }),
      failsWith("INVALID_ARG", "Invalid offset + byte size for shared memory region: 'r'"),
    );
    assert.throws(
      () => regions.write({ region: "r", offset: 0, byteSize: 2 }, "OUT", new Uint8Array(3)),
      failsWith(
        "INTERNAL",
        "shared memory size specified with the request for output 'OUT' (2 bytes) should be at least 3 bytes to hold the results",
      ),
    );
    regions.close();
  });

  it("an output written after its region was unregistered is refused, not written to a reused descriptor", () => {
    const regions = new SystemSharedMemory(true, folder);
    const before = openDescriptors();
    regions.register("r", "data", 0, 8);
    assert.equal(openDescriptors(), before + 1);
    regions.unregister("r");
    assert.equal(openDescriptors(), before);
    assert.throws(
      () => regions.write({ region: "r", offset: 0, byteSize: 8 }, "OUT", new Uint8Array(8)),
      failsWith("NOT_FOUND", "Unable to find shared memory region: 'r'"),
    );
    regions.register("a", "data", 0, 8);
    regions.register("b", "data", 8, 8);
    regions.unregister();
    assert.equal(openDescriptors(), before);
    assert.deepEqual(regions.status(), []);
  });

  it("opens only regular files in its folder, never through a link", () => {
    const regions = new SystemSharedMemory(true, folder);
    symlinkSync(join(folder, "data"), join(folder, "link"));
    mkdirSync(join(folder, "folder"));
    assert.throws(
      () => regions.register("r", "/link", 0, 8),
      failsWith("INTERNAL", "Unable to open shared memory region: '/link'"),
    );
    assert.throws(
      () => regions.register("r", "/folder", 0, 8),
      failsWith("INTERNAL", "Unable to open shared memory region: '/folder'"),
    );
    assert.throws(
      () => regions.register("r", "/a/../data", 0, 8),
      failsWith("INTERNAL", "Unable to open shared memory region: '/a/../data'"),
    );
    assert.deepEqual(regions.status(), []);
  });

  it("refuses registrations where clients may not register, and lists none", () => {
    const regions = new SystemSharedMemory(false, folder);
    const disabled =
      "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";
    assert.throws(() => regions.register("r", "data", 0, 8), failsWith("UNSUPPORTED", disabled));
    assert.throws(() => regions.unregister(), failsWith("UNSUPPORTED", disabled));
    assert.deepEqual(regions.status(), []);
  });
});
