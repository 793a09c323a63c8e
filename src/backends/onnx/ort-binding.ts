// onnxruntime-node's native session, used directly rather than through its public
// InferenceSession wrapper, for two reasons:
// - the wrapper refuses to create a session for a model with any input or output of a type
//   it has no Tensor type for (bfloat16, float8, ...), so such a model could not even be
//   described; the native session reports every type's ONNX number;
// - the native run() is synchronous, where the wrapper adds an event-loop turn and a
//   re-validation of the feeds to every run of a path that runs thousands of times a second.
// The native session is what the wrapper itself calls (onnxruntime-node/lib/backend.ts); its
// surface is small: loadModel, inputMetadata / outputMetadata, run, dispose. The package
// version is pinned, and the backend tests exercise every part of it used here.

export { type Binding, binding, initOrt } from "onnxruntime-node/dist/binding.js";
