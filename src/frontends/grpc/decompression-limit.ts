import {
  ServerInterceptingCall,
  type ServerInterceptingCallInterface,
  type ServerInterceptor,
  status,
} from "@grpc/grpc-js";
import type { Refusals } from "../../core/refusals.ts";
import type { DecodeRefusal } from "./decoded-size.ts";
import { statusTableOf } from "./service-status-table.ts";

// What one gzip or deflate message may inflate to. grpc-js checks an inflating message
// against the call's receive limit only, which is --grpc-max-message-bytes (INT32_MAX, as
// Triton, since tensors are large): a 1 MB message of zeros could take 1 GiB before any
// check. grpc-js reads that limit from its call object when it inflates (after it has
// checked the compressed frame's length against the same limit), so lowering it there
// bounds inflation and nothing else; uncompressed messages keep the full limit.
//
// This reaches into grpc-js's call (`maxReceiveMessageSize`, `sendStatus`), which its
// public API does not offer; the version is pinned, and a test sends a gzip bomb.

interface InflatingCall {
  maxReceiveMessageSize: number;
  sendStatus(status: Parameters<ServerInterceptingCallInterface["sendStatus"]>[0]): void;
}

function isInflatingCall(call: unknown): call is InflatingCall {
  const c = call as Partial<InflatingCall>;
  return typeof c.maxReceiveMessageSize === "number" && typeof c.sendStatus === "function";
}

/**
 * Must come first among the server's interceptors: it needs grpc-js's own call. A
 * message refused by its deserializer for what it would decode to (decoded-size.ts) is
 * answered with RESOURCE_EXHAUSTED and the reason `decoded` holds, as the same limit.
 */
export function decompressionLimit(
  maxBytes: number,
  refusals?: Refusals,
  decoded?: DecodeRefusal,
): ServerInterceptor {
  return (method, call: ServerInterceptingCallInterface) => {
    if (!isInflatingCall(call)) {
      throw new Error(
        "grpc-js changed: its call no longer has the receive limit seqserve bounds inflation with",
      );
    }
    const current = call.maxReceiveMessageSize;
    if (current === -1 || current > maxBytes) call.maxReceiveMessageSize = maxBytes;
    const send = call.sendStatus.bind(call);
    call.sendStatus = (sent) => {
      if (sent.code === status.RESOURCE_EXHAUSTED && sent.details?.includes("decompresses") === true) {
        refusals?.refused("grpc_decompressed_bytes");
        send({
          ...sent,
          details: `the request message inflates to more than ${maxBytes} bytes, the most a compressed message may (--grpc-max-decompressed-bytes)`,
        });
        return;
      }
      const why = sent.code === status.INTERNAL ? decoded?.take() : undefined;
      if (why !== undefined) {
        refusals?.refused("grpc_decompressed_bytes");
        send({ ...sent, code: statusTableOf(method.path).RESOURCE_EXHAUSTED, details: why });
        return;
      }
      send(sent);
    };
    return new ServerInterceptingCall(call);
  };
}
