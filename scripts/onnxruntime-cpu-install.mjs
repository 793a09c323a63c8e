// seqserve's install step: keeps onnxruntime-node's own install step from downloading GPU
// libraries seqserve never loads.
//
// seqserve runs ONNX Runtime on the CPU, whose libraries ship inside the onnxruntime-node
// package. On Linux x64, onnxruntime-node's postinstall step also downloads its CUDA and
// TensorRT providers (hundreds of MB, from outside the npm registry) whenever they are
// missing, unless the installing user sets ONNXRUNTIME_NODE_INSTALL=skip: a package
// cannot set that for its users. npm runs every package's preinstall step before any
// postinstall step, so this step, run first, marks those provider files as present (empty
// files; seqserve never loads them) and onnxruntime-node's step then has nothing to fetch.
//
// It changes nothing when the user chose (ONNXRUNTIME_NODE_INSTALL or
// ONNXRUNTIME_NODE_INSTALL_CUDA, as environment variables or npm settings: the CUDA
// providers are then installed as asked), on other platforms (nothing is downloaded
// there), or when a provider file already exists. It never fails an install.

import { existsSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const CHOICES = [
  "ONNXRUNTIME_NODE_INSTALL",
  "ONNXRUNTIME_NODE_INSTALL_CUDA",
  "npm_config_onnxruntime_node_install",
  "npm_config_onnxruntime_node_install_cuda",
];

function providerFiles() {
  const require = createRequire(import.meta.url);
  const packageDir = dirname(require.resolve("onnxruntime-node/package.json"));
  const platform = `${process.platform}/${process.arch}`;
  // onnxruntime-node's own list of what its install step downloads, by platform.
  const metadata = require(join(packageDir, "script", "install-metadata.js"));
  const binDir = join(packageDir, "bin", "napi-v6", process.platform, process.arch);
  const files = [];
  for (const manifest of metadata.requirements[platform] ?? []) {
    for (const file of Object.keys(metadata.manifests[`${platform}:${manifest}`] ?? {})) {
      files.push(join(binDir, file));
    }
  }
  // Only where the CPU build is in place: the layout this step knows.
  return existsSync(join(binDir, "onnxruntime_binding.node")) ? files : [];
}

try {
  if (!CHOICES.some((name) => process.env[name])) {
    const missing = providerFiles().filter((file) => !existsSync(file));
    for (const file of missing) writeFileSync(file, "");
    if (missing.length > 0) {
      process.stdout.write(
        "seqserve: ONNX Runtime runs on the CPU; onnxruntime-node's GPU providers are not downloaded " +
          "(set ONNXRUNTIME_NODE_INSTALL=cuda12 and reinstall to get them)\n",
      );
    }
  }
} catch {
  // A layout this step does not know: leave onnxruntime-node's step to decide.
}
