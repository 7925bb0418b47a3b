// Drive envreg sandboxes with the TypeScript MCP SDK, as a Node agent would.
//
//   node drive.mjs JOB.json
//
// JOB: {"sdk": "v1" | "v2", "era": "2025-11-25" | "2026-07-28", "sync": optional boolean,
//       "runs": [{"url": ..., "token": ..., "steps": [{"tool": ..., "arguments": {...}}]}]}
// Prints {"runs": [{"protocolVersion", "tools": [names], "outcomes": [...]}]} on stdout, where an
// outcome is {"isError", "text"} (the server's result, accepted by the client) or {"clientError"}
// (the client refused the result or the call failed, e.g. a result that breaks its output schema).
// With "sync", before each run it writes `envreg-run <index>` on a line of stderr and waits for a line on
// stdin: the caller sets the sandbox up for that run (one sandbox serves many runs, one after another).

import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const info = { name: "envreg-tests", version: "1.0.0" };
const lines = job.sync ? createInterface({ input: process.stdin })[Symbol.asyncIterator]() : null;

async function connect(url, token) {
  const requestInit = { headers: { Authorization: `Bearer ${token}` } };
  if (job.sdk === "v1") {
    const { Client } = await import("@modelcontextprotocol/sdk/client/index.js");
    const { StreamableHTTPClientTransport } = await import("@modelcontextprotocol/sdk/client/streamableHttp.js");
    const client = new Client(info);
    const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit });
    await client.connect(transport);
    return { client, version: () => transport.protocolVersion };
  }
  const { Client, StreamableHTTPClientTransport } = await import("@modelcontextprotocol/client");
  const mode = job.era === "2026-07-28" ? { pin: "2026-07-28" } : "legacy";
  const client = new Client(info, { versionNegotiation: { mode } });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit }));
  return { client, version: () => client.getNegotiatedProtocolVersion() };
}

const runs = [];
for (const [index, run] of job.runs.entries()) {
  if (lines) {
    process.stderr.write(`envreg-run ${index}\n`);
    await lines.next();
  }
  const { client, version } = await connect(run.url, run.token);
  const tools = (await client.listTools()).tools.map((t) => t.name);
  const outcomes = [];
  for (const step of run.steps) {
    try {
      const result = await client.callTool({ name: step.tool, arguments: step.arguments });
      outcomes.push({ isError: Boolean(result.isError), text: result.content?.[0]?.text ?? "" });
    } catch (error) {
      outcomes.push({ clientError: `${error?.name ?? "Error"}: ${error?.message ?? error}` });
    }
  }
  runs.push({ protocolVersion: version(), tools, outcomes });
  await client.close();
}
process.stdout.write(JSON.stringify({ runs }));
if (lines) {
  await lines.return();
  process.stdin.destroy();
}
