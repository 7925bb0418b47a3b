"""EnvGen: environments written by an LLM from API metadata, every revision executed and validated.

The input is EnvFactory's metadata (class name, description, tools with parameter schemas), an OpenAPI 3
document or a short brief (`envreg.envgen.spec`). An OpenAI-compatible model writes the state model, the
tools (envreg's SDK, the catalog's shared vocabulary), a seed, scenarios and rejected states
(`envreg.envgen.prompts`); `envreg.envgen.loop` runs each revision in a container sandbox
(`envreg.envgen.inspect`), builds its image, runs `envreg validate` on it, and sends the failures back as a
structured report (`envreg.envgen.report`) until a revision passes or the budget is spent.
`envreg.envgen.propose` reads the catalog and proposes the domains and tools it lacks as metadata files.

```bash
envreg envgen metadata.json --llm-base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-32B --out out/
envreg envgen propose --llm-base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-32B --out proposals/
```
"""
