// Node's server.close() waits for every connection to end but closes only those idle at
// that moment: a kept-alive connection whose request is still being answered stays open
// after its answer until its keep-alive timeout (--http-keepalive-timeout-secs, set above
// a load balancer's idle timeout by many users), holding the shutdown all that while.
// Until the server has closed, each connection is closed as soon as it falls idle.

/** How often a closing server looks for connections answered since it last looked. */
const IDLE_CHECK_MS = 20;

interface ClosingServer {
  closeIdleConnections(): void;
  once(event: "close", listener: () => void): unknown;
}

/** Call when the server's close begins. */
export function closeConnectionsOnceIdle(server: ClosingServer): void {
  server.closeIdleConnections();
  // Referenced: a kept-alive connection may hold nothing else alive (node need not keep
  // the process running for an idle one), and the close must still end.
  const timer = setInterval(() => server.closeIdleConnections(), IDLE_CHECK_MS);
  server.once("close", () => clearInterval(timer));
}
