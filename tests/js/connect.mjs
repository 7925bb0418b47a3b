// Connect to one MCP URL with a TypeScript SDK client and list its tools, reporting what the client says.
//
//   node connect.mjs JOB.json
//
// JOB: {"sdk": "v1" | "v2", "era": "2025-11-25" | "2026-07-28" | "auto", "url": ..., "token": ...,
//       "sessionId": optional, v1 only: resume a session as a client that kept its id does,
//       "then": optional, a file: once connected and listed, wait until it exists and list again}
// Prints {"tools": [names]} or {"error": "<name>: <message> (cause: ...)"} on stdout, and
// {"connected": true} first on stderr once the first listing is done when there is a "then".

import { existsSync, readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const info = { name: "envreg-tests", version: "1.0.0" };
const requestInit = { headers: { Authorization: `Bearer ${job.token}` } };

function describe(error) {
  let text = `${error?.name ?? "Error"}: ${error?.message ?? error}`;
  for (let cause = error?.cause; cause; cause = cause.cause) {
    text += ` (cause: ${cause?.message ?? cause})`;
  }
  if (error?.data?.text) text += ` (body: ${error.data.text})`;
  return text;
}

let client;
try {
  if (job.sdk === "v1") {
    const { Client } = await import("@modelcontextprotocol/sdk/client/index.js");
    const { StreamableHTTPClientTransport } = await import("@modelcontextprotocol/sdk/client/streamableHttp.js");
    client = new Client(info);
    const options = { requestInit, ...(job.sessionId ? { sessionId: job.sessionId } : {}) };
    await client.connect(new StreamableHTTPClientTransport(new URL(job.url), options));
  } else {
    const { Client, StreamableHTTPClientTransport } = await import("@modelcontextprotocol/client");
    const mode = job.era === "2026-07-28" ? { pin: "2026-07-28" } : job.era === "auto" ? "auto" : "legacy";
    client = new Client(info, { versionNegotiation: { mode } });
    await client.connect(new StreamableHTTPClientTransport(new URL(job.url), { requestInit }));
  }
  let tools = (await client.listTools()).tools.map((t) => t.name);
  if (job.then) {
    process.stderr.write(JSON.stringify({ connected: true }) + "\n");
    while (!existsSync(job.then)) await sleep(20);
    tools = (await client.listTools()).tools.map((t) => t.name);
  }
  process.stdout.write(JSON.stringify({ tools }));
} catch (error) {
  process.stdout.write(JSON.stringify({ error: describe(error) }));
} finally {
  await client?.close().catch(() => {});
}
