// The TypeScript MCP SDKs' own JSON Schema validators, run over an environment's tool schemas.
//
//   node check_schemas.mjs        (a worker: one JSON job per stdin line, one JSON answer per stdout line)
//
// JOB: {"tools": [{"name", "inputSchema", "outputSchema"?}],
//       "arguments": [{"tool", "where", "value"}],   arguments the environment accepted
//       "results": [{"tool", "where", "value"}]}     structuredContent the environment returned
// ANSWER: {"clients": {...}, "compiled": n, "validated": n, "warnings": [...],
//          "problems": [{"client", "tool", "where", "kind", "error"}]}
//
// Each client is the SDK's `AjvJsonSchemaValidator` exactly as the SDK constructs it by default (v1: Ajv
// draft-07; v2: Ajv 2020-12; both strict: false, validateFormats: true, validateSchema: false,
// allErrors: true, with ajv-formats): the validator a TypeScript MCP client uses on tool results.

import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { AjvJsonSchemaValidator as V2 } from "@modelcontextprotocol/client/validators/ajv";
import { AjvJsonSchemaValidator as V1 } from "@modelcontextprotocol/sdk/validation/ajv";

const here = new URL(".", import.meta.url);
const version = (pkg) =>
  JSON.parse(readFileSync(new URL(`node_modules/${pkg}/package.json`, here), "utf8")).version;
const CLIENTS = {
  v1: { label: `@modelcontextprotocol/sdk ${version("@modelcontextprotocol/sdk")} (Ajv draft-07)`, make: () => new V1() },
  v2: { label: `@modelcontextprotocol/client ${version("@modelcontextprotocol/client")} (Ajv 2020-12)`, make: () => new V2() },
};

function check(job) {
  const problems = [];
  const warnings = new Set();
  let compiled = 0;
  let validated = 0;
  const warn = console.warn;
  console.warn = (...args) => warnings.add(args.map(String).join(" "));
  try {
    for (const [client, { make }] of Object.entries(CLIENTS)) {
      const validator = make();
      const compiledFor = { inputSchema: {}, outputSchema: {} };
      for (const tool of job.tools) {
        for (const kind of ["inputSchema", "outputSchema"]) {
          if (!tool[kind]) continue;
          try {
            compiledFor[kind][tool.name] = validator.getValidator(tool[kind]);
            compiled += 1;
          } catch (error) {
            problems.push({ client, tool: tool.name, where: kind, kind: `${kind} refused`, error: String(error?.message ?? error) });
          }
        }
      }
      for (const [items, kind, label] of [
        [job.arguments ?? [], "inputSchema", "arguments refused"],
        [job.results ?? [], "outputSchema", "result refused"],
      ]) {
        for (const item of items) {
          const validate = compiledFor[kind][item.tool];
          if (!validate) continue;
          validated += 1;
          const outcome = validate(item.value);
          if (!outcome.valid) {
            problems.push({ client, tool: item.tool, where: item.where, kind: label, error: outcome.errorMessage });
          }
        }
      }
    }
  } finally {
    console.warn = warn;
  }
  const clients = Object.fromEntries(Object.entries(CLIENTS).map(([k, v]) => [k, v.label]));
  return { clients, compiled, validated, warnings: [...warnings], problems };
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  let answer;
  try {
    answer = check(JSON.parse(line));
  } catch (error) {
    answer = { error: String(error?.stack ?? error) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
