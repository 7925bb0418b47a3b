"""pass@k solving with an LLM: native tool calling against the sandboxes, traces kept turn by turn
only as far as each turn is verified against the executed oracle's.

For a chain executed as an oracle, QueryGen writes the user's queries; then `k` attempts each get
fresh sandboxes forked from the same initial snapshots, and the model solves the turns with native
tool calls, sent through the sandbox's MCP URL with the `mcp` SDK client (on the local tier, which
has no URL, straight to the sandbox). When the model answers in text, a simulated user (the same
LLM, told the turn's goal and the values the user knows) replies, or says the goal is met.
Every turn of an attempt is verified (`envreg.synth.verify`: format, execution, state, coverage,
judge); an attempt keeps the turns before its first rejected one, so a read the model skipped never
passes because a later turn reached the right state. The kept trace is the attempt that keeps the
most turns (then the fewest calls); the record notes pass@k and the verdicts.
"""

from __future__ import annotations

import json
import random
from contextlib import AsyncExitStack
from typing import Any

from envreg.canonical import canonical_json, sha256_hex
from envreg.http.client import async_client
from envreg.synth.execute import Skipped
from envreg.synth.llm import chat
from envreg.synth.query import generate_queries
from envreg.synth.records import ExecutedCall, Trajectory, Turn, function_name, split_function_name
from envreg.synth.verify import kept, verify_turns

MAX_STEPS = 12
DONE = "###DONE###"
USER_SYSTEM = (
    "You are simulating a user talking to an assistant. Your goal: {goal}\nDetails you know: {details}\n"
    "Reply in one or two sentences, giving only what the assistant asks for. If the assistant has done "
    f"what you wanted, reply exactly {DONE}."
)


class ToolSessions:
    """Tool calls per environment: through each sandbox's MCP URL (mcp SDK client), or in process."""

    def __init__(self, sandboxes: dict[str, Any]) -> None:
        self.sandboxes = sandboxes
        self.clients: dict[str, Any] = {}
        self.stack = AsyncExitStack()

    async def __aenter__(self) -> ToolSessions:
        for env, sandbox in self.sandboxes.items():
            if sandbox.mcp_url is None:
                continue
            from mcp import Client
            from mcp.client.streamable_http import streamable_http_client

            http = await self.stack.enter_async_context(
                async_client(headers={"authorization": f"Bearer {sandbox.token}"}, timeout=60)
            )
            transport = streamable_http_client(sandbox.mcp_url, http_client=http)
            self.clients[env] = await self.stack.enter_async_context(Client(transport))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stack.aclose()

    async def list_tools(self, env: str) -> list[dict[str, Any]]:
        if env in self.clients:
            result = await self.clients[env].list_tools()
            return [t.model_dump(by_alias=True, exclude_none=True) for t in result.tools]
        return await self.sandboxes[env].list_tools()

    async def call(self, env: str, tool: str, arguments: dict[str, Any]) -> tuple[bool, str, Any]:
        """(is_error, text, value) of one call."""
        if env in self.clients:
            result = await self.clients[env].call_tool(tool, arguments)
            text = result.content[0].text if result.content else ""
            if result.is_error:
                return True, text, None
            return False, text, json.loads(text) if text else None
        try:
            outcome = await self.sandboxes[env].call_tool(tool, arguments)
        except LookupError as exc:
            return True, str(exc), None
        return outcome.is_error, outcome.text, None if outcome.is_error else outcome.value


async def _openai_tools(sessions: ToolSessions, envs: list[str]) -> list[dict[str, Any]]:
    tools = []
    for env in envs:
        for tool in await sessions.list_tools(env):
            tools.append(
                {
                    "type": "function",
                    "function": {
                        "name": function_name(env, tool["name"], envs),
                        "description": tool.get("description", ""),
                        "parameters": tool.get("inputSchema", {"type": "object"}),
                    },
                }
            )
    return tools


def _user_details(turn: Turn, graph) -> dict[str, Any]:
    """The values a user knows for a turn: the user-providable arguments of its oracle calls."""
    details: dict[str, Any] = {}
    for call in turn.calls:
        for param in graph.inputs(f"{call.env}/{call.tool}"):
            node = graph.node(param)
            if node["user_providable"] and node["path"][0] in call.arguments:
                details[node["path"][0]] = call.arguments[node["path"][0]]
    return details


async def _attempt(synth, oracle: Trajectory, queries: list[str], goals: list[str]) -> dict[str, Any]:
    """One solving attempt in fresh sandboxes; returns its turns, the tool names it saw, and why it stopped."""
    llm = synth.llm
    envs = [e.name for e in oracle.envs]
    sandboxes: dict[str, Any] = {}
    turns: list[Turn] = []
    outcome: dict[str, Any] = {"turns": turns, "known": set(), "reason": ""}
    try:
        for env in envs:
            (sandboxes[env],) = await synth.rt.fork(oracle.snapshot_ids[env], 1, isolation=synth.isolation)
        async with ToolSessions(sandboxes) as sessions:
            tools = await _openai_tools(sessions, envs)
            known = outcome["known"] = {t["function"]["name"] for t in tools}
            history: list[dict[str, Any]] = [
                {
                    "role": "system",
                    "content": "You are a helpful assistant. Use the tools to do what the user asks.",
                }
            ]
            for k, (query, oracle_turn) in enumerate(zip(queries, oracle.turns, strict=True)):
                start = len(history)
                history.append({"role": "user", "content": query})
                calls: list[ExecutedCall] = []
                answer, replies = "", 0
                for _ in range(MAX_STEPS):
                    reply = await chat(llm, history, tools)
                    if reply.refused:
                        outcome["reason"] = "refused"
                        return outcome
                    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
                    raw_calls = reply.raw.get("tool_calls") or []
                    if raw_calls:
                        message["tool_calls"] = [
                            {
                                "id": c["id"],
                                "type": "function",
                                "function": {
                                    "name": c["function"]["name"],
                                    "arguments": c["function"]["arguments"],
                                },
                            }
                            for c in raw_calls
                        ]
                    history.append(message)
                    for bad in reply.malformed:
                        history.append(
                            {
                                "role": "tool",
                                "tool_call_id": bad["id"],
                                "content": f"Invalid tool call: the arguments are not a JSON object ({bad['error']}). Call again with valid JSON.",
                            }
                        )
                    for call in reply.tool_calls:
                        try:
                            env, tool = split_function_name(call["name"], envs)
                            if function_name(env, tool, envs) not in known:
                                raise ValueError(f"unknown tool {call['name']!r}")
                            is_error, text, value = await sessions.call(env, tool, call["arguments"])
                        except ValueError as exc:
                            env, tool, is_error, text, value = "", call["name"], True, str(exc), None
                        history.append({"role": "tool", "tool_call_id": call["id"], "content": text})
                        if env:
                            calls.append(
                                ExecutedCall(
                                    env=env,
                                    tool=tool,
                                    arguments=call["arguments"],
                                    masked=synth_masked(synth, env, tool, call["arguments"]),
                                    result=value,
                                    is_error=is_error,
                                )
                            )
                    if raw_calls:
                        continue
                    answer = reply.content
                    if replies >= synth.max_user_replies:
                        break
                    user = await _simulated_user(
                        llm, goals[k], _user_details(oracle_turn, synth.graph), history[start:]
                    )
                    if user is None or DONE in user:
                        break
                    history.append({"role": "user", "content": user})
                    replies += 1
                states = {env: await sb.state() for env, sb in sandboxes.items()}
                turns.append(
                    Turn(
                        query=query,
                        calls=calls,
                        state_sha256={e: sha256_hex(canonical_json(s)) for e, s in states.items()},
                        states=states,
                        answer=answer,
                        messages=history[start + 1 :],
                        facts=oracle_turn.facts,
                    )
                )
    finally:
        for sandbox in sandboxes.values():
            await sandbox.close()
    return outcome


def synth_masked(synth, env: str, tool: str, arguments: dict[str, Any]) -> list[str]:
    masked = []
    for param in synth.graph.inputs(f"{env}/{tool}"):
        node = synth.graph.node(param)
        if node["masked"] and node["path"][0] in arguments:
            masked.append(".".join(node["path"]))
    return sorted(set(masked))


async def _simulated_user(llm, goal: str, details: dict[str, Any], turn: list[dict[str, Any]]) -> str | None:
    transcript = "\n".join(
        f"{m['role']}: {m.get('content') or '[tool call]'}"
        for m in turn
        if m["role"] in ("user", "assistant")
    )
    reply = await chat(
        llm,
        [
            {
                "role": "system",
                "content": USER_SYSTEM.format(goal=goal, details=json.dumps(details, ensure_ascii=False)),
            },
            {"role": "user", "content": f"The conversation so far:\n{transcript}\n\nYour reply:"},
        ],
    )
    return None if reply.refused else reply.content.strip()


async def solve_with_llm(synth, oracle: Trajectory, rng: random.Random) -> Trajectory | Skipped:
    """LLM queries for an executed oracle, then pass@k solving; the passing trace with the fewest calls."""
    index = oracle.meta["index"]
    plain_turns = [[c.model_dump() for c in t.calls] for t in oracle.turns]
    examples = synth.seed_pool.sample(oracle.meta["chain_seed"])
    generated = await generate_queries(synth.llm, plain_turns, rng, examples)
    if generated is None:
        oracle.meta["query"] = {"fallback": "the LLM gave no valid queries; templates used"}
        return oracle
    attempts = [
        await _attempt(synth, oracle, generated["queries"], generated["subgoals"]) for _ in range(synth.k)
    ]
    for attempt in attempts:
        attempt["verdicts"] = await verify_turns(oracle, attempt["turns"], attempt["known"], synth.llm)
        attempt["kept"] = kept(attempt["verdicts"])
        rejected = next((v for v in attempt["verdicts"] if not v.passed), None)
        if rejected is not None:
            synth.rejections[rejected.level] += 1
            attempt["reason"] = f"turn {rejected.turn}: {rejected.level}: {rejected.reason}"
        elif attempt["kept"] < len(oracle.turns):
            attempt["reason"] = attempt["reason"] or f"stopped after {attempt['kept']} turns"
    best = max(attempts, key=lambda a: (a["kept"], -sum(len(t.calls) for t in a["turns"][: a["kept"]])))
    if best["kept"] == 0:
        return Skipped(index, "no pass@k attempt passed the verification of its first turn")
    turns: list[Turn] = best["turns"][: best["kept"]]
    complete = [a for a in attempts if a["kept"] == len(oracle.turns)]
    meta = {
        **oracle.meta,
        "query": {**{k: v for k, v in generated.items() if k != "queries"}, "examples": examples},
        "pass_at_k": {
            "k": synth.k,
            "passed": len(complete),
            "failures": [a["reason"] for a in attempts if a["kept"] < len(oracle.turns)],
        },
        "verification": {
            "kept_turns": len(turns),
            "oracle_turns": len(oracle.turns),
            "verdicts": [v.to_json() for v in best["verdicts"]],
        },
        "oracle": [
            {"env": c.env, "tool": c.tool, "arguments": c.arguments, "masked": c.masked}
            for t in oracle.turns[: len(turns)]
            for c in t.calls
        ],
        "llm": {"model": synth.llm.model, "base_url": synth.llm.base_url},
    }
    final = turns[-1].states
    body = {"oracle": oracle.id, "calls": [c.model_dump() for t in turns for c in t.calls]}
    return oracle.model_copy(
        update={
            "id": "traj_" + sha256_hex(canonical_json(body))[:16],
            "query_source": "llm",
            "turns": turns,
            "final_states": final,
            "final_state_sha256": {e: sha256_hex(canonical_json(s)) for e, s in final.items()},
            "meta": meta,
        }
    )
