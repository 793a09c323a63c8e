# seqserve as a container image: the compiled server and its production dependencies on
# an official Node.js slim image, run as the unprivileged `node` user.
#
#   docker build -t seqserve .
#   docker run -p 8000:8000 -p 8001:8001 -p 8002:8002 -v "$PWD/examples/models:/models:ro" seqserve
#
# By default it serves the Triton-style model repository mounted at /models: KServe v2 HTTP
# on 8000, gRPC on 8001, metrics on 8002. Arguments replace the default command, so any
# flag works (`docker run … seqserve --model-repository /models --log-verbose 1`), and so
# does Amazon SageMaker's `docker run <image> serve`: the SageMaker API on 8080
# ($SAGEMAKER_BIND_TO_PORT), the models from /opt/ml/model. Stopping sends SIGTERM: live
# sequences get --exit-timeout-secs to finish.

ARG NODE_IMAGE=node:22-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /build
# Dependencies first, so a code change reuses this layer. Install steps are skipped:
# onnxruntime-node's CPU build is in its package (its step would only download GPU
# libraries), and the build needs no other.
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
# Then production dependencies only, and of onnxruntime-node's libraries (it ships every
# platform's) only this platform's.
RUN npm run build \
 && npm prune --omit=dev --ignore-scripts \
 && arch="$(node -p process.arch)" \
 && find node_modules/onnxruntime-node/bin/napi-v6 -mindepth 1 -maxdepth 1 ! -name linux -exec rm -rf {} + \
 && find node_modules/onnxruntime-node/bin/napi-v6/linux -mindepth 1 -maxdepth 1 ! -name "$arch" -exec rm -rf {} +

FROM ${NODE_IMAGE}
ENV NODE_ENV=production
WORKDIR /opt/seqserve
COPY --from=build /build/node_modules ./node_modules
COPY --from=build /build/dist ./dist
COPY package.json ./
COPY bin ./bin
COPY proto ./proto
COPY docker/healthcheck.mjs ./docker/
# `seqserve` on the PATH, as `tritonserver` is in Triton's images: manifests and launch
# scripts that name the command (Kubernetes' `command:` replaces the entrypoint) run it.
RUN ln -s /opt/seqserve/bin/seqserve.js /usr/local/bin/seqserve
USER node
EXPOSE 8000 8001 8002 8080
# Ready as /v2/health/ready says (or SageMaker's /ping when started with `serve`).
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["node", "/opt/seqserve/docker/healthcheck.mjs"]
ENTRYPOINT ["node", "/opt/seqserve/bin/seqserve.js"]
CMD ["--model-repository", "/models"]
