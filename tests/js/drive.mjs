// Drive envreg sandboxes with the TypeScript MCP SDK, as a Node agent would.
//
//   node drive.mjs JOB.json
//
// JOB: {"sdk": "v1" | "v2", "era": "2025-11-25" | "2026-07-28",
//       "runs": [{"url": ..., "token": ..., "steps": [{"tool": ..., "arguments": {...}}]}]}
// Prints {"runs": [{"protocolVersion", "tools": [names], "outcomes": [...]}]} on stdout, where an
// outcome is {"isError", "text"} (the server's result, accepted by the client) or {"clientError"}
// (the client refused the result or the call failed, e.g. a result that breaks its output schema).

import { readFileSync } from "node:fs";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const info = { name: "envreg-tests", version: "1.0.0" };

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
for (const run of job.runs) {
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
