// A sequence over KServe HTTP as a client of several replicas behind a balancer sends it
// (docs/scale-out.md): the sequence id in X-Sequence-Id, where the balancer hashes on it,
// and each request numbered with sequence_step. A request that fails in a way that may be
// retried (a lost connection, a 502 from the balancer, a 503) is sent again with the same
// number: if the first attempt was applied, the server answers it from its recorded answer
// instead of adding the value twice.
//
//   node --import tsx examples/clients/http-sequence-retry.ts 127.0.0.1:8000   # 5, 8, 18, 20, 27

const address = process.argv[2] ?? "127.0.0.1:8000";
const id = String(1_000_000 + Math.floor(Math.random() * 1_000_000));

async function step(value: number, number: number, end: boolean): Promise<number> {
  const body = JSON.stringify({
    parameters: { sequence_step: number, sequence_start: number === 1, sequence_end: end },
    inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }],
  });
  for (let attempt = 1; ; attempt++) {
    try {
      const response = await fetch(`http://${address}/v2/models/accumulator/infer`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-sequence-id": id },
        body,
      });
      const answer = (await response.json()) as { outputs?: { data: number[] }[]; error?: string };
      if (response.ok) return answer.outputs![0]!.data[0]!;
      if (![502, 503, 504].includes(response.status) || attempt === 5) throw new Error(answer.error);
    } catch (error) {
      if (!(error instanceof TypeError) || attempt === 5) throw error; // fetch's network errors
    }
    await new Promise((resolve) => setTimeout(resolve, 100 * attempt));
  }
}

const values = [5, 3, 10, 2, 7];
for (let i = 0; i < values.length; i++) {
  console.log(`running sum: ${await step(values[i]!, i + 1, i === values.length - 1)}`);
}
