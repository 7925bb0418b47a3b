// Open many MCP sessions with the TypeScript SDK (v1), as RL workers opening a conversation per episode
// do: connect, list the tools, close. The SDK never DELETEs a session at close.
//
//   node flood.mjs JOB.json
//
// JOB: {"url": ..., "token": ..., "sessions": N, "concurrency": C}
// Prints {"opened": n, "failed": n, "errors": [the first 20]} on stdout.

import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const requestInit = { headers: { Authorization: `Bearer ${job.token}` } };
// Every Client compiles each tool's output schema with Ajv when it lists the tools (about 23 ms of CPU a
// session for the calendar's tools, which made this script, not the server, the bottleneck of the flood).
// The clients share the SDK's own validator here, compiled once per distinct schema.
const ajv = new AjvJsonSchemaValidator();
const compiled = new Map();
const jsonSchemaValidator = {
  getValidator(schema) {
    const key = JSON.stringify(schema);
    if (!compiled.has(key)) compiled.set(key, ajv.getValidator(schema));
    return compiled.get(key);
  },
};
let next = 0;
let opened = 0;
const errors = [];

async function worker() {
  while (next < job.sessions) {
    next += 1;
    const client = new Client({ name: "envreg-flood", version: "1.0.0" }, { jsonSchemaValidator });
    try {
      await client.connect(new StreamableHTTPClientTransport(new URL(job.url), { requestInit }));
      await client.listTools();
      opened += 1;
    } catch (error) {
      errors.push(`${error?.name ?? "Error"}: ${error?.message ?? error}`);
    } finally {
      await client.close();
    }
  }
}

await Promise.all(Array.from({ length: job.concurrency }, worker));
process.stdout.write(JSON.stringify({ opened, failed: errors.length, errors: errors.slice(0, 20) }));
