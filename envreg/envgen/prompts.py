"""What EnvGen tells the model: the environment contract with a worked example, and each request.

Every request is one user message made of ``## `` sections with JSON in fenced blocks (the metadata, the
previous revision's files, its report), so that any OpenAI-compatible model reads the same thing and the
stand-in (`envreg.standin.envgen`) can read it back.
"""

from __future__ import annotations

import json
from typing import Any, get_args

from envreg.env.vocab import CITIES, Currency

# a working environment in the contract's style: `tests/test_envgen.py` loads and plays it
EXAMPLE_ENV = '''"""Notes: a notebook of short notes with tags."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envreg.env import Environment, EnvState, ToolError, id_problems
from envreg.env.vocab import Email


class Note(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    text: Annotated[str, Field(min_length=1, max_length=2000)]
    author: Email
    tags: list[str] = []
    archived: bool = False


class NotesState(EnvState):
    notes: dict[str, Note] = {}

    @model_validator(mode="after")
    def _ids(self) -> NotesState:
        if problems := id_problems(self, {"note": self.notes}):
            raise ValueError("; ".join(problems))
        return self


env = Environment(
    "notes", NotesState, version="1.0.0", domain="office", description="A notebook of short notes with tags."
)


def _note(state: NotesState, note_id: str) -> Note:
    if note_id not in state.notes:
        raise ToolError(f"no note {note_id!r}; list_notes shows the ids")
    return state.notes[note_id]


@env.tool
def add_note(state: NotesState, text: str, author: Email, tags: list[str] | None = None) -> Note:
    """Add a note.

    Args:
        text: The note's text.
        author: The author's email address.
        tags: Tags to file it under.
    """
    note = Note(id=state.new_id("note"), text=text, author=author, tags=sorted(set(tags or [])))
    state.notes[note.id] = note
    return note


@env.tool(read_only=True)
def list_notes(state: NotesState, tag: str | None = None) -> list[Note]:
    """List the notes that are not archived, oldest first.

    Args:
        tag: Only the notes with this tag.
    """
    return [n for n in state.notes.values() if not n.archived and (tag is None or tag in n.tags)]


@env.tool(destructive=True)
def archive_note(state: NotesState, note_id: str) -> Note:
    """Archive a note.

    Args:
        note_id: The note's id (from add_note or list_notes).
    """
    note = _note(state, note_id)  # check everything first: a tool that raises must not have written
    if note.archived:
        raise ToolError(f"note {note_id} is already archived")
    note.archived = True
    return note
'''

EXAMPLE_SEED = {
    "now": "2026-01-05T09:00:00",
    "id_counters": {"note": 2},
    "notes": {
        "note_0001": {
            "id": "note_0001",
            "text": "Buy milk",
            "author": "sam@home.example",
            "tags": ["errands"],
            "archived": False,
        },
        "note_0002": {
            "id": "note_0002",
            "text": "Call the plumber",
            "author": "sam@home.example",
            "tags": [],
            "archived": False,
        },
    },
}

EXAMPLE_SCENARIO = {
    "name": "add_then_archive",
    "description": "Add a tagged note, list by tag, archive it, and archiving twice fails.",
    "steps": [
        {
            "tool": "add_note",
            "arguments": {"text": "Pay rent", "author": "sam@home.example", "tags": ["errands"]},
            "expect": {
                "id": "note_0003",
                "text": "Pay rent",
                "author": "sam@home.example",
                "tags": ["errands"],
                "archived": False,
            },
        },
        {"tool": "list_notes", "arguments": {"tag": "errands"}},
        {"tool": "archive_note", "arguments": {"note_id": "note_0003"}},
        {"tool": "archive_note", "arguments": {"note_id": "note_0003"}, "expect_error": "already archived"},
        {"tool": "archive_note", "arguments": {"note_id": "note_0099"}, "expect_error": "no note"},
    ],
}

EXAMPLE_REJECTED = {
    "name": "counter_behind_ids",
    "description": "id_counters would hand out note_0002 again.",
    "state": {**EXAMPLE_SEED, "id_counters": {"note": 1}},
    "error": "beyond id_counters",
}

WRITE_SYSTEM = f"""You write envreg environments: executable, stateful tool-use environments that agents are \
trained and evaluated in. An environment is a Python module env.py (a pydantic state model and tools), a seed \
state, validation scenarios and states that must be refused. envreg runs what you write in a container \
sandbox, builds it into an image and validates it; when something fails you get a report and write a revision.

Answer with one JSON object and nothing else:
{{"files": {{"env.py": "<the module's source>", "seed.json": {{...}}, "scenarios/<name>.json": {{...}}, \
"scenarios/rejected/<name>.json": {{...}}}}, "notes": "<one line: what you wrote or changed>"}}

env.py, the contract:
- `from envreg.env import Environment, EnvState, ToolError, id_problems`; pydantic for models. The state model \
subclasses EnvState, which already has `now` (the environment's clock, a naive datetime), `id_counters` and \
`state.new_id(prefix)`. Keep collections at the top level of the state, as dicts keyed by id.
- `env = Environment("<name>", <Name>State, version="1.0.0", domain="<domain>", description="...")`, with the \
name given.
- Each tool: `@env.tool(read_only=True)` when it only reads, `@env.tool` (optionally destructive=True) when it \
writes; a plain function whose first parameter is the state; every other parameter type-hinted and described \
in the docstring's `Args:` section (registration fails otherwise); the return type annotated (pydantic models, \
lists, dicts, str, int, float, bool).
- The tools, their parameter names, JSON types and which parameters are required are exactly the metadata's: an \
optional parameter is `name: T | None = None`. Where a parameter means a value the catalog shares, use its \
type: `from envreg.env.vocab import City, Currency, Email` (City: one of {", ".join(CITIES)}; \
Currency: {", ".join(get_args(Currency))}; Email: an address).
- Errors the caller can fix (a missing entity, a bad value, a rule): `raise ToolError("what is wrong and what \
to do")`. Check everything before writing anything: a tool that raises must leave the state as it was.
- The state is the only truth: no module-level variables, files, network, threads, wall clock (use \
state.now), or randomness. Ids only from `state.new_id("evt")`, which gives evt_0001, evt_0002, ...: \
`id_counters[prefix]` is the number of the last id handed out, so a seed holding evt_0001..evt_0003 has \
`"id_counters": {{"evt": 3}}`. Refuse bad states with a `model_validator(mode="after")` that raises ValueError \
(`id_problems(self, {{"evt": self.events}})` checks ids, keys and counters).
- Change state with assignment, `dict`/`list` methods and `del`; never with C functions that write into a state \
list in place (heapq, bisect.insort), never through vars() or __dict__.
- Times are naive (2026-01-07T13:00:00, no offset).

seed.json: a full state (every field, `now`, `id_counters`) with a few realistic entities.
scenarios/<name>.json: {{"name", "description", "steps": [{{"tool", "arguments", "expect"?, "expect_error"?}}]}}; \
without "initial_state" a scenario starts from the seed. Write 2-4 scenarios that together call every tool, \
including calls that must fail (`"expect_error": "<part of the message>"`). envreg plays them and records every \
result and the final state; any `expect` you write is checked against what the call returns, so write one only \
where you are sure (e.g. the first new id after the seed's counter).
scenarios/rejected/<name>.json: {{"name", "description", "state": <a full state that must be refused>, "error": \
"<part of the validation error>"}}; write at least 2.

An example environment ("notes"): env.py
```python
{EXAMPLE_ENV}```
seed.json: {json.dumps(EXAMPLE_SEED)}
scenarios/add_then_archive.json: {json.dumps(EXAMPLE_SCENARIO)}
scenarios/rejected/counter_behind_ids.json: {json.dumps(EXAMPLE_REJECTED)}
"""

METADATA_SYSTEM = """You write EnvFactory metadata for envreg environments: the interface of a stateful \
tool-use environment (an API an agent uses), from a short brief. Answer with one JSON object and nothing else:
{"class_name": "<CamelCase>", "description": "<two sentences: what it holds and does>", "domain": "<one word>", \
"tools": [{"name": "<snake_case>", "description": "<what it does, when it fails>", "input_schema": {"type": \
"object", "properties": {"<name>": {"type": "string|integer|number|boolean|array|object", "description": \
"..."}}, "required": [...]}}]}
Write 5-12 tools that create, read, change and remove the environment's entities; use the parameter names \
city, email, currency, date, amount, query and limit where they mean those things."""

PROPOSE_SYSTEM = """You extend envreg's catalog of tool-use environments. Given what it holds (domains, \
environments, tools) and where it is thin, propose new environments it lacks: domains with no environment, or \
tools its domains lack. Answer with one JSON object and nothing else:
{"proposals": [{"class_name": "<CamelCase>", "domain": "<one word>", "description": "<two sentences>", \
"rationale": "<which gap it fills>", "tools": [{"name": "<snake_case>", "description": "...", "input_schema": \
{"type": "object", "properties": {...}, "required": [...]}}]}]}
Each proposal has 5-12 tools; use the parameter names city, email, currency, date, amount, query and limit \
where they mean those things, so that its tools chain with the catalog's."""


def block(value: Any) -> str:
    """A fenced JSON block."""
    return f"```json\n{json.dumps(value, indent=1, ensure_ascii=False)}\n```"


def write_prompt(
    spec: dict[str, Any],
    revision: int,
    budget: int,
    previous: dict[str, Any] | None = None,
    report: list[dict[str, Any]] | None = None,
) -> str:
    """The request for revision `revision` (1: the first draft) of the environment `spec` describes."""
    parts = [
        f"## Metadata\nWrite the environment {spec['name']!r} (state class {spec['class_name']}State, domain "
        f"{spec['domain']!r}) with exactly these tools:\n{block(spec)}",
        f"## Revision\nThis is revision {revision} of at most {budget}.",
    ]
    if previous is not None and report is not None:
        parts.append(f"## Your files\nWhat you wrote in revision {revision - 1}:\n{block(previous)}")
        parts.append(
            f"## Report\nRevision {revision - 1} failed these checks (stage, check, tool, scenario, step, expected, "
            f"got, traceback):\n{block(report)}\nFix every failure and answer with all the files again."
        )
    return "\n\n".join(parts)


def metadata_prompt(brief: str, name: str | None) -> str:
    named = f" Name the class after {name!r}." if name else ""
    return f"## Brief\n{brief}\n\nWrite the metadata of this environment.{named}"


def propose_prompt(catalog: dict[str, Any], gaps: dict[str, Any], count: int) -> str:
    return (
        f"## Catalog\n{block(catalog)}\n\n## Gaps\n{block(gaps)}\n\n"
        f"Propose {count} new environments the catalog lacks (no name it already has)."
    )


def section(prompt: str, title: str) -> Any:
    """The JSON block of the ``## <title>`` section of a prompt, or None (what the stand-in reads)."""
    head = f"## {title}\n"
    if head not in prompt:
        return None
    rest = prompt.split(head, 1)[1].split("\n## ", 1)[0]
    if "```json\n" not in rest:
        return None
    return json.loads(rest.split("```json\n", 1)[1].split("\n```", 1)[0])
