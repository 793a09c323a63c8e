"""A SageMaker stateful session with boto3, as AWS documents it, pointed at seqserve.

    npx seqserve --model-repository examples/models --allow-sagemaker true   # one terminal
    python3 examples/clients/sagemaker_session.py [host:port]

It opens a session on the `accumulator` example model, sends values that add to the sum
the server keeps for the session, and closes it. Against a real endpoint, create the
client without endpoint_url and the dummy credentials.
"""

import json
import sys

import boto3

address = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8080"
runtime = boto3.client(
    "sagemaker-runtime",
    endpoint_url=f"http://{address}",
    region_name="us-east-1",
    aws_access_key_id="any",  # seqserve does not check signatures
    aws_secret_access_key="any",
)


def invoke(body, session_id):
    return runtime.invoke_endpoint(
        EndpointName="seqserve",
        TargetModel="accumulator",
        ContentType="application/json",
        SessionId=session_id,
        Body=json.dumps(body),
    )


def inputs(value):
    return [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [value]}]


# Open: the NEW_SESSION header and body; the id comes back with its expiry.
response = invoke({"requestType": "NEW_SESSION"}, "NEW_SESSION")
header = response["ResponseMetadata"]["HTTPHeaders"]["x-amzn-sagemaker-new-session-id"]
session_id = header.split(";")[0].strip()
print(f"session expires: {header.split('Expires=')[1]}")

for value in [5, 3, 10, 2, 7]:
    answer = json.loads(invoke({"inputs": inputs(value)}, session_id)["Body"].read())
    print(f"running sum: {answer['outputs'][0]['data'][0]}")

closed = invoke({"requestType": "CLOSE"}, session_id)
print(f"closed: {closed['ResponseMetadata']['HTTPHeaders']['x-amzn-sagemaker-closed-session-id'] == session_id}")
