// The image's HEALTHCHECK: healthy when the server says it is ready, on the KServe HTTP
// port (GET /v2/health/ready) or, for a SageMaker container started with `serve`, on the
// SageMaker port (GET /ping). SEQSERVE_HEALTH_URL names another URL to ask instead.

const urls = process.env.SEQSERVE_HEALTH_URL
  ? [process.env.SEQSERVE_HEALTH_URL]
  : [
      "http://127.0.0.1:8000/v2/health/ready",
      `http://127.0.0.1:${process.env.SAGEMAKER_BIND_TO_PORT || 8080}/ping`,
    ];

let healthy = false;
for (const url of urls) {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(2000) });
    await response.body?.cancel();
    if (response.ok) {
      healthy = true;
      break;
    }
  } catch {
    // Nothing listens there, or no answer in time: try the next.
  }
}
process.exit(healthy ? 0 : 1);
