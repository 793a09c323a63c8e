# seqserve as a SageMaker inference container.
#
#   docker build -t seqserve .
#   docker run -p 8080:8080 -v "$PWD/examples/models:/opt/ml/model:ro" seqserve   # as SageMaker runs it: `<image> serve`
#
# SageMaker starts the image with the argument `serve`, mounts the model artifacts
# (model.tar.gz unpacked: a Triton-style model repository) at /opt/ml/model, sets
# SAGEMAKER_BIND_TO_PORT when the port is not 8080, probes GET /ping and sends
# POST /invocations. Stopping sends SIGTERM: live sessions get --exit-timeout-secs to end.
FROM node:20-bookworm-slim

WORKDIR /opt/seqserve
ENV NODE_ENV=production

# Dependencies first, so code changes reuse this layer. .npmrc skips onnxruntime-node's
# install step: the CPU build ships inside the package.
COPY package.json package-lock.json .npmrc ./
RUN npm ci --omit=dev && npm cache clean --force

COPY bin ./bin
COPY src ./src
COPY proto ./proto

EXPOSE 8080
ENTRYPOINT ["node", "/opt/seqserve/bin/seqserve.js"]
CMD ["serve"]
