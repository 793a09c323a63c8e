#!/usr/bin/env bash
# The Python peer's environment, from pip's local package index (PyPI itself is not
# needed): a virtual environment in .bench/venv and the KServe v2 gRPC stubs generated
# from proto/grpc_service.proto into .bench/python-stubs. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
INDEX="${PIP_INDEX_URL:-file:///opt/pypi/simple}"
EXTRA="${PIP_EXTRA_INDEX_URL:-file:///opt/pypi-more/simple}"
if [ ! -x .bench/venv/bin/python ]; then
  python3 -m venv .bench/venv
  .bench/venv/bin/pip install --quiet --index-url "$INDEX" --extra-index-url "$EXTRA" \
    fastapi uvicorn grpcio grpcio-tools onnxruntime numpy
fi
mkdir -p .bench/python-stubs
.bench/venv/bin/python -m grpc_tools.protoc -Iproto --python_out=.bench/python-stubs \
  --grpc_python_out=.bench/python-stubs proto/grpc_service.proto proto/model_config.proto
echo ".bench/venv ready"
