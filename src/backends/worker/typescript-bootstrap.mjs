// The entry of a worker thread whose module is TypeScript: only when seqserve runs from its
// sources (`node --import tsx`, as the tests do). Node 20 cannot load `.ts` itself, and
// tsx's `--import tsx` hooks do not reach a worker's entry there, so this registers tsx
// in the worker, then imports the entry given as the worker's last argument. Plain
// JavaScript, and not part of the build: the package's workers are compiled modules.
import { register } from "tsx/esm/api";

register();
await import(process.argv.at(-1));
