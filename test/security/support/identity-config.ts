// The config of an identity model (tools/onnx identityModel) taking its full shape, no
// batching: OUTPUT0 = INPUT0, of `type` (TYPE_FP32, TYPE_STRING, …) and `dims`.
export function identityConfig(name: string, type: string, dims = "[ -1 ]", extra = ""): string {
  return `
name: "${name}"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT0" data_type: ${type} dims: ${dims} } ]
output [ { name: "OUTPUT0" data_type: ${type} dims: ${dims} } ]
${extra}
`;
}
