"""Shared by the synthesis tests: the catalog's tool graph, built once per test process with the
real default embedding model (embeddings cached by content digest in `CACHE`, kept between runs)."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest
from conftest import EMBEDDINGS, installed

# torch, sentence-transformers and networkx come with envreg's synth extra: `scripts/bootstrap` installs it
# (CI), `scripts/bootstrap --light` does not, and every module that imports these helpers then skips
SYNTH_EXTRA = "needs envreg's synth extra (torch, sentence-transformers, networkx): run scripts/bootstrap"
if not installed("numpy", "networkx", "sentence_transformers"):
    pytest.skip(SYNTH_EXTRA, allow_module_level=True)

from envreg.manifest import Manifest  # noqa: E402
from envreg.standin import text, tool_calls  # noqa: E402
from envreg.synth.embed import make_embedder  # noqa: E402
from envreg.synth.graph import ToolGraph, build_graph, load_manifests  # noqa: E402
from envreg.synth.records import function_name  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "manifests"
CACHE = EMBEDDINGS


@cache
def catalog_manifests() -> tuple[Manifest, ...]:
    return tuple(load_manifests(MANIFESTS))


@cache
def catalog_graph() -> ToolGraph:
    return build_graph(catalog_manifests(), make_embedder(cache_dir=CACHE))


def manifests_by_name() -> dict[str, Manifest]:
    return {m.name: m for m in catalog_manifests()}


CALLS = re.compile(r"\[\[calls: (.*)\]\]", re.S)
DESCRIBED = re.compile(r"^\s+- ([\w-]+)\.(\w+)\((.*)\) -> ", re.M)


class ScriptedModel:
    """Answers each kind of prompt the pipeline sends; its solver replays the calls hidden in the queries.

    Solving attempts behave in turn: one sends malformed tool-call JSON first and then recovers, one
    refuses, one answers without calling anything; ``skip_reads`` answers "Done!" to a turn that
    only reads (its calls all list_, get_, find_ or search_) and makes the other turns' calls.
    """

    def __init__(
        self, behaviours=("malformed", "refuse", "lazy"), refuse_all: bool = False, judge_ok: bool = True
    ) -> None:
        self.behaviours = behaviours
        self.refuse_all = refuse_all
        self.judge_ok = judge_ok
        self.attempts = 0
        self.graph_answers = 0
        self.judged: list[str] = []

    def __call__(self, body: dict) -> dict:
        messages = body["messages"]
        if self.refuse_all:
            return text("I'm sorry, but I can't help with that request.")
        if body.get("tools"):
            return self.solve(messages)
        if messages[0]["content"].startswith("You review conversations"):
            self.judged.append(messages[1]["content"])
            return text(json.dumps({"ok": self.judge_ok, "reason": "scripted verdict"}))
        if messages[0]["content"].startswith("You are simulating a user"):
            transcript = messages[-1]["content"]
            if "Which one do you mean?" in transcript and "go ahead" not in transcript:
                return text("The one I described, please go ahead.")
            return text("###DONE###")
        prompt = messages[1]["content"]
        if "say whether a user could provide" in prompt:
            return self.mark(prompt, retry=len(messages) > 2)
        if "list the candidate outputs" in prompt:
            return self.refine(prompt)
        described = prompt.split("Executed calls:\n", 1)[-1]
        turns = [block for block in re.split(r"^Turn \d+:\n", described, flags=re.M)[1:]]
        if "Write the scenario" in prompt:
            return text('Here it is: {"scenario": "Someone sorting out their week."}')
        if "one subgoal per turn" in prompt:
            return text(json.dumps({"subgoals": [f"subgoal {i}" for i in range(len(turns))]}))
        if "write the user's request" in prompt:
            envs = list(dict.fromkeys(m.group(1) for m in DESCRIBED.finditer(described)))
            queries = []
            for block in turns:
                calls = [
                    {"name": function_name(m.group(1), m.group(2), envs), "arguments": json.loads(m.group(3))}
                    for m in DESCRIBED.finditer(block)
                ]
                queries.append(f"Could you do this for me? [[calls: {json.dumps(calls)}]]")
            return text(json.dumps({"queries": queries}))
        if "Rewrite each request" in prompt:
            requests = json.loads(re.search(r"Requests: (\[.*?\])\n\n", prompt, re.S).group(1))
            return text("```json\n" + json.dumps({"queries": [f"Hi! {q}" for q in requests]}) + "\n```")
        raise AssertionError(f"unexpected prompt: {prompt[:200]}")

    def mark(self, prompt: str, retry: bool) -> dict:
        self.graph_answers += 1
        if self.graph_answers == 1:
            return text("Sure! Most of them are user-provided.")  # no JSON: must be retried
        lines = re.findall(r"^(\d+): \w+\.([\w.]+) ", prompt, re.M)
        return text(json.dumps({i: not (path.endswith("_id") or path == "iban") for i, path in lines}))

    def refine(self, prompt: str) -> dict:
        inputs = re.findall(r"^(\d+): ", prompt, re.M)
        if prompt.startswith("Environment bank."):
            return text(json.dumps({i: [] for i in inputs}))
        return text(json.dumps({i: [0] for i in inputs}))

    def solve(self, messages: list[dict]) -> dict:
        if len(messages) == 2:
            self.attempts += 1
        behaviour = self.behaviours[(self.attempts - 1) % len(self.behaviours)]
        if behaviour == "refuse":
            return text("I'm sorry, but I can't help with that.")
        if behaviour == "lazy":
            return text("Done!")
        start = max(
            i for i, m in enumerate(messages) if m["role"] == "user" and "[[calls:" in (m["content"] or "")
        )
        calls = json.loads(CALLS.search(messages[start]["content"]).group(1))
        reads = ("list_", "get_", "find_", "search_")
        if behaviour == "skip_reads" and all(c["name"].split("__")[-1].startswith(reads) for c in calls):
            return text("Done!")
        after = messages[start + 1 :]
        issued = sum(
            1 for m in after if m["role"] == "tool" and not m["content"].startswith("Invalid tool call")
        )
        malformed = any(m["role"] == "tool" and m["content"].startswith("Invalid tool call") for m in after)
        asked = any(m["role"] == "assistant" and m.get("content") == "Which one do you mean?" for m in after)
        if behaviour == "malformed" and not asked and issued == 0 and not malformed:
            return text("Which one do you mean?")  # a question: the simulated user answers it
        if behaviour == "malformed" and not malformed and issued == 0 and calls:
            return tool_calls((calls[0]["name"], '{"oops": not json'))
        if issued < len(calls):
            return tool_calls((calls[issued]["name"], json.dumps(calls[issued]["arguments"])))
        results = [
            m["content"] for m in after if m["role"] == "tool" and not m["content"].startswith("Invalid")
        ]
        return text("All done: everything you asked for is taken care of. I got: " + " ".join(results))
