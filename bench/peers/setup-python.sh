#!/usr/bin/env bash
# The Python peer's environment, from pip's configured package index (PyPI itself is not
# needed): a virtual environment in .bench/venv and the KServe v2 gRPC stubs generated
# from proto/grpc_service.proto into .bench/python-stubs. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/python/venv.sh .bench/venv "import fastapi, uvicorn, grpc, grpc_tools, onnxruntime, numpy" \
  fastapi uvicorn grpcio grpcio-tools onnxruntime numpy >/dev/null
mkdir -p .bench/python-stubs
.bench/venv/bin/python -m grpc_tools.protoc -Iproto --python_out=.bench/python-stubs \
  --grpc_python_out=.bench/python-stubs proto/grpc_service.proto proto/model_config.proto
echo ".bench/venv ready"
