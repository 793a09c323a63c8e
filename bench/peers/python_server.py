"""The Python server a user would write in an afternoon, for the performance comparison
(docs/performance.md): FastAPI (uvicorn) for KServe v2 HTTP, grpc.aio for KServe v2 gRPC,
onnxruntime called in the handler, batch 1. Model `silero_vad`: the client passes the
recurrent state; model `silero_vad_stateful`: the state is kept in a dict by sequence id.

    python bench/peers/python_server.py <http_port> <grpc_port> <model.onnx> <stubs_dir>
(prints "listening <http_port> <grpc_port>" when ready; bench/peers/setup-python.sh makes
the virtual environment and the gRPC stubs)
"""

import asyncio
import json
import sys

import numpy as np
import onnxruntime as ort
import uvicorn
from fastapi import FastAPI, Request, Response

http_port, grpc_port, model_path, stubs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
sys.path.insert(0, stubs)
import grpc  # noqa: E402
import grpc_service_pb2 as pb  # noqa: E402
import grpc_service_pb2_grpc as pb_grpc  # noqa: E402

options = ort.SessionOptions()
options.intra_op_num_threads = 1
session = ort.InferenceSession(model_path, options)
SR = np.array(16000, dtype=np.int64)
states = {}  # sequence id -> state, for silero_vad_stateful


def run(audio, state):
    output, state_n = session.run(["output", "stateN"], {"input": audio, "state": state, "sr": SR})
    return output, state_n


def stateful_step(sequence_id, start, end, audio):
    state = np.zeros((2, 1, 128), dtype=np.float32) if start else states[sequence_id]
    output, state_n = run(audio, state)
    if end:
        states.pop(sequence_id, None)
    else:
        states[sequence_id] = state_n
    return output


app = FastAPI()
METADATA = {
    "silero_vad": {
        "name": "silero_vad",
        "inputs": [
            {"name": "input", "datatype": "FP32", "shape": [-1, 512]},
            {"name": "state", "datatype": "FP32", "shape": [2, -1, 128]},
            {"name": "sr", "datatype": "INT64", "shape": []},
        ],
        "outputs": [
            {"name": "output", "datatype": "FP32", "shape": [-1, 1]},
            {"name": "stateN", "datatype": "FP32", "shape": [2, -1, 128]},
        ],
    },
    "silero_vad_stateful": {
        "name": "silero_vad_stateful",
        "inputs": [
            {"name": "input", "datatype": "FP32", "shape": [-1, 512]},
            {"name": "sr", "datatype": "INT64", "shape": [1]},
        ],
        "outputs": [{"name": "output", "datatype": "FP32", "shape": [-1, 1]}],
    },
}


@app.get("/v2/models/{model}")
async def metadata(model: str):
    return METADATA[model]


@app.get("/v2/models/{model}/config")
async def config(model: str):
    return {"name": model, "sequence_batching": {}} if model == "silero_vad_stateful" else {"name": model}


@app.post("/v2/models/{model}/infer")
async def infer(model: str, request: Request):
    body = await request.body()
    header_length = request.headers.get("inference-header-content-length")
    binary = header_length is not None
    header = json.loads(body[: int(header_length)] if binary else body)
    tensors, offset = {}, int(header_length or 0)
    for i in header["inputs"]:
        dtype = np.int64 if i["datatype"] == "INT64" else np.float32
        if binary:
            size = i["parameters"]["binary_data_size"]
            tensors[i["name"]] = np.frombuffer(body[offset : offset + size], dtype=dtype).reshape(i["shape"])
            offset += size
        else:
            tensors[i["name"]] = np.array(i["data"], dtype=dtype).reshape(i["shape"])
    if model == "silero_vad":
        outputs = dict(zip(["output", "stateN"], run(tensors["input"], tensors["state"])))
    else:
        p = header.get("parameters", {})
        outputs = {"output": stateful_step(p["sequence_id"], p.get("sequence_start", False), p.get("sequence_end", False), tensors["input"])}
    if not binary:
        return {
            "model_name": model,
            "outputs": [{"name": n, "datatype": "FP32", "shape": list(t.shape), "data": t.ravel().tolist()} for n, t in outputs.items()],
        }
    described = [
        {"name": n, "datatype": "FP32", "shape": list(t.shape), "parameters": {"binary_data_size": t.nbytes}} for n, t in outputs.items()
    ]
    head = json.dumps({"model_name": model, "outputs": described}).encode()
    return Response(
        head + b"".join(t.tobytes() for t in outputs.values()),
        media_type="application/octet-stream",
        headers={"inference-header-content-length": str(len(head))},
    )


def grpc_infer(request):
    raw = {i.name: (i, request.raw_input_contents[k]) for k, i in enumerate(request.inputs)}
    audio = np.frombuffer(raw["input"][1], dtype=np.float32).reshape(list(raw["input"][0].shape))
    if request.model_name == "silero_vad":
        state = np.frombuffer(raw["state"][1], dtype=np.float32).reshape(list(raw["state"][0].shape))
        outputs = dict(zip(["output", "stateN"], run(audio, state)))
    else:
        p = request.parameters
        sid = p["sequence_id"].int64_param
        outputs = {"output": stateful_step(sid, p["sequence_start"].bool_param, p["sequence_end"].bool_param, audio)}
    response = pb.ModelInferResponse(model_name=request.model_name, id=request.id)
    for name, tensor in outputs.items():
        response.outputs.add(name=name, datatype="FP32", shape=list(tensor.shape))
        response.raw_output_contents.append(tensor.tobytes())
    return response


class Inference(pb_grpc.GRPCInferenceServiceServicer):
    async def ModelInfer(self, request, context):
        return grpc_infer(request)

    async def ModelStreamInfer(self, request_iterator, context):
        async for request in request_iterator:
            try:
                yield pb.ModelStreamInferResponse(infer_response=grpc_infer(request))
            except Exception as error:  # in-band, as Triton does
                yield pb.ModelStreamInferResponse(error_message=str(error))


async def main():
    server = grpc.aio.server()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(Inference(), server)
    server.add_insecure_port(f"127.0.0.1:{grpc_port}")
    await server.start()
    web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=http_port, log_level="warning"))
    asyncio.get_running_loop().call_later(1.0, lambda: print(f"listening {http_port} {grpc_port}", flush=True))
    await web.serve()


asyncio.run(main())
