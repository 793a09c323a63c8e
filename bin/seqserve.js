#!/usr/bin/env node
// seqserve's command: registers the TypeScript loader, then runs the CLI. Model
// instances run in worker threads, which register the same loader themselves.
import { register } from "tsx/esm/api";

register();
await import("../src/cli/main.ts");
