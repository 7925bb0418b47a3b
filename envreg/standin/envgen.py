"""The stand-in model's EnvGen script: known-good environments written from metadata, each class of defect
EnvGen must catch, and their fixes.

`EnvGenScript(defects)` is a `Policy` for `StandInLLM` that answers EnvGen's three requests
(`envreg.envgen.prompts`):

- **write an environment** (first draft or revision): from the request's metadata it writes a working
  environment (a record store whose tools create, read, update and close records according to their names,
  with the metadata's exact parameters, the catalog's shared types for ``city``, ``email`` and ``currency``),
  a seed, scenarios that call every tool (with failing calls) and two rejected states. The draft of step *k*
  carries the *k*-th defect of its schedule (`DEFECTS`); a revision request whose report names the previous
  draft's defect (the check that must catch it, the tool) gets the next step, one whose report does not gets
  the same defect again (a model cannot fix what it is not told). After the schedule: the good draft.
- **write metadata** from a brief: a small record-keeping interface named after the brief.
- **propose** environments: metadata for domains the catalog in the request does not have.

```bash
python -m envreg.standin --script envgen --defects syntax,hang --port 8000
envreg envgen tests/fixtures/envgen/bookings.json --llm-base-url http://127.0.0.1:8000/v1 --model standin
```
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envreg.envgen.prompts import METADATA_SYSTEM, PROPOSE_SYSTEM, WRITE_SYSTEM, section
from envreg.envgen.spec import camel, identifier, kebab, tool_verb
from envreg.standin.server import text

DEFECTS = ("syntax", "schema", "uuid", "journal", "scenario", "hang")
"""syntax: a def without its colon; schema: a parameter typed unlike the metadata; uuid: ids from uuid4;
journal: a failing tool that first writes past the state journal (heapq); scenario: a predicted result that
is wrong; hang: a tool that never returns."""
MARKER = re.compile(r"^# stand-in draft: step=(\d+) defect=(\w+)$", re.MULTILINE)


# --------------------------------------------------------------------------------- the tools' shapes
@dataclass(frozen=True)
class Param:
    name: str
    schema: dict[str, Any]
    required: bool

    @property
    def kind(self) -> str:
        kind = self.schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), None)
        if kind is None and "enum" in self.schema:
            kind = "string"
        return kind or "any"

    @property
    def is_id(self) -> bool:
        return (
            self.kind == "string"
            and (self.name == "id" or self.name.endswith("_id"))
            and "enum" not in self.schema
        )

    def annotation(self) -> str:
        kind, name = self.kind, self.name
        if kind == "string":
            if "enum" in self.schema:
                return f"Literal[{', '.join(repr(v) for v in self.schema['enum'])}]"
            if name == "city":
                return "City"
            if name == "currency":
                return "Currency"
            if name == "email" or name.endswith("_email"):
                return "Email"
            return "str"
        if kind == "array":
            item = Param("item", self.schema.get("items") or {}, True)
            return f"list[{item.annotation() if item.kind in _SCALARS else 'Any'}]"
        return _SCALARS.get(kind, "Any")

    def example(self, record_id: str) -> Any:
        if self.is_id:
            return record_id
        if "enum" in self.schema:
            return self.schema["enum"][0]
        kind, name = self.kind, self.name
        if kind == "string":
            if name == "city":
                return "Paris"
            if name == "currency":
                return "EUR"
            if name == "email" or name.endswith("_email"):
                return "alex@mail.example"
            if "date" in name:
                return "2026-02-14"
            if "time" in name:
                return "10:30"
            return f"Sample {name.replace('_', ' ')}"
        if kind == "integer":
            low = self.schema.get("minimum")
            return max(2, int(low)) if isinstance(low, int | float) else 2
        if kind == "number":
            return 1.5
        if kind == "boolean":
            return True
        if kind == "array":
            return [Param("item", self.schema.get("items") or {"type": "string"}, True).example(record_id)]
        if kind == "object":
            return {"note": "sample"}
        return "sample"


_SCALARS = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "object": "dict[str, Any]",
}


@dataclass(frozen=True)
class ToolShape:
    name: str
    description: str
    params: tuple[Param, ...]

    @classmethod
    def of(cls, tool: dict[str, Any]) -> ToolShape:
        schema = tool.get("input_schema") or {}
        required = set(schema.get("required") or [])
        params = tuple(Param(n, s, n in required) for n, s in (schema.get("properties") or {}).items())
        return cls(tool["name"], " ".join(str(tool.get("description") or "").split()), params)

    @property
    def verb(self) -> str:
        return tool_verb(self.name) or "create"  # an action: recorded like a creation

    @property
    def id_param(self) -> Param | None:
        return next((p for p in self.params if p.is_id and p.required), None)

    @property
    def kind(self) -> str:
        """create, read (one record by id), search (records matching the arguments), update, delete."""
        verb = self.verb
        if verb == "read":
            return "read" if self.id_param else "search"
        if verb in ("update", "delete") and self.id_param is None:
            return "create"
        return verb

    @property
    def writes(self) -> bool:
        return self.kind not in ("read", "search")

    @property
    def text_param(self) -> Param | None:
        """A required free-text parameter: an empty value is refused (a failure path for the scenarios)."""
        return next((p for p in self.params if p.required and p.annotation() == "str" and not p.is_id), None)


def _doc(text_: str) -> str:
    return " ".join(text_.replace("\\", "/").replace('"""', "'").split()) or "No description."


# ---------------------------------------------------------------------------------- writing modules
def write_module(spec: dict[str, Any], defect: str = "good", step: int = 0) -> str:
    """The env.py of `spec` (EnvGen's prompt form of the metadata), with `defect` in it (or none: "good")."""
    cls = identifier(spec["class_name"]) + "State"
    tools = [ToolShape.of(t) for t in spec["tools"]]
    target = defect_target(tools, defect)
    if defect != "good" and target is None:
        defect = "good"  # nothing in this interface can carry that defect
    uses = {
        v
        for t in tools
        for p in t.params
        for v in ("City", "Currency", "Email")
        if re.search(rf"\b{v}\b", p.annotation())
    }
    lines = [
        f'"""{identifier(spec["class_name"])}: {_doc(spec["description"])}',
        "",
        "Written by envreg's stand-in model for EnvGen (a record store whose tools follow the metadata).",
        '"""',
        "",
        f"# stand-in draft: step={step} defect={defect}",
        "",
        "from __future__ import annotations",
        "",
        *(["import heapq"] if defect == "journal" else []),
        *(["import uuid"] if defect == "uuid" else []),
        "from typing import Any, Literal"
        if any("Literal[" in p.annotation() for t in tools for p in t.params)
        else "from typing import Any",
        "",
        "from pydantic import BaseModel, ConfigDict, Field, model_validator",
        "",
        "from envreg.env import Environment, EnvState, ToolError, id_problems",
        *([f"from envreg.env.vocab import {', '.join(sorted(uses))}"] if uses else []),
        "",
        "",
        "class Record(BaseModel):",
        '    """One record a tool made."""',
        "",
        '    model_config = ConfigDict(extra="forbid")',
        "",
        "    id: str",
        '    kind: str = Field(description="The tool that made it.")',
        "    fields: dict[str, Any] = {}",
        "    active: bool = True",
        "",
        "",
        f"class {cls}(EnvState):",
        "    records: dict[str, Record] = {}",
        "    history: list[str] = []",
        "",
        '    @model_validator(mode="after")',
        f"    def _ids(self) -> {cls}:",
        '        if problems := id_problems(self, {"rec": self.records}):',
        '            raise ValueError("; ".join(problems))',
        "        return self",
        "",
        "",
        f'env = Environment({spec["name"]!r}, {cls}, version="1.0.0", domain={spec["domain"]!r}, '
        f"description={_doc(spec['description'])!r})",
        "",
        "",
        f"def _record(state: {cls}, record_id: str) -> Record:",
        "    if record_id not in state.records:",
        '        raise ToolError(f"no record {record_id!r}; the list and search tools show the ids")',
        "    return state.records[record_id]",
        "",
        "",
        "def _matches(record: Record, wanted: dict[str, Any]) -> bool:",
        "    return record.active and all(record.fields.get(k) == v for k, v in wanted.items())",
    ]
    for tool in tools:
        code = _tool_code(tool, cls, defect if tool is target else "good")
        if any(p.name == "state" for p in tool.params):  # the state parameter takes another name
            code = [
                re.sub(
                    rf"\bstate(?=\.(records|history|new_id)\b|: {cls}\b)|(?<=_record\()state(?=, )",
                    "store",
                    ln,
                )
                for ln in code
            ]
        lines += ["", "", *code]
    return "\n".join(lines) + "\n"


def defect_target(tools: list[ToolShape], defect: str) -> ToolShape | None:
    """The tool that carries `defect` (None: no tool of this interface can)."""
    if defect == "good":
        return None
    if defect in ("syntax", "hang"):
        return tools[0]
    if defect == "schema":
        for kind in ("integer", "boolean", "number", "string"):
            found = next((t for t in tools if any(p.kind == kind for p in t.params)), None)
            if found:
                return found
        return None
    if defect in ("uuid", "scenario"):
        return next((t for t in tools if t.kind == "create"), None)
    if defect == "journal":
        return next((t for t in tools if t.writes and (t.id_param or t.text_param)), None)
    raise ValueError(f"unknown defect {defect!r}; choose from {', '.join(DEFECTS)}")


def _schema_defect(param: Param) -> str:
    return {"integer": "str", "boolean": "str", "number": "str"}.get(param.kind, "int")


def _tool_code(tool: ToolShape, cls: str, defect: str) -> list[str]:
    params = sorted(tool.params, key=lambda p: not p.required)
    wrong = (
        next((p for p in params if p.kind == defect_param_kind(tool)), None) if defect == "schema" else None
    )
    signature = [f"state: {cls}"]
    for p in params:
        annotation = _schema_defect(p) if p is wrong else p.annotation()
        signature.append(f"{p.name}: {annotation}" if p.required else f"{p.name}: {annotation} | None = None")
    returns = "list[Record]" if tool.kind == "search" else "Record"
    decorator = {
        "read": "@env.tool(read_only=True)",
        "search": "@env.tool(read_only=True)",
        "delete": "@env.tool(destructive=True)",
    }.get(tool.kind, "@env.tool")
    colon = "" if defect == "syntax" else ":"
    body = [
        decorator,
        f"def {tool.name}({', '.join(signature)}) -> {returns}{colon}",
        f'    """{_doc(tool.description)}',
    ]
    if params:
        body += ["", "    Args:"]
        body += [
            f"        {p.name}: {_doc(str(p.schema.get('description') or f'The {p.name}.'))}" for p in params
        ]
    body.append('    """')
    if defect == "hang":
        body += ["    while len(state.history) >= 0:  # waits for a change that never comes", "        pass"]
    pairs = ", ".join(f"{p.name!r}: {p.name}" for p in params)
    body.append(f"    _args = {{k: v for k, v in {{{pairs}}}.items() if v is not None}}")
    key = tool.id_param
    if defect == "journal":
        body.append(f"    heapq.heappush(state.history, {tool.name!r})  # in place: past the journal")
    if tool.text_param is not None:
        p = tool.text_param
        body += [
            f"    if not {p.name}.strip():",
            f"        raise ToolError({f'{p.name} must not be empty'!r})",
        ]
    kind = tool.kind
    if kind == "search":
        body.append("    return [r for r in state.records.values() if _matches(r, _args)]")
        return body
    if kind == "read":
        body.append(f"    return _record(state, {key.name})")
        return body
    if kind in ("update", "delete"):
        body.append(f"    _rec = _record(state, {key.name})")
        body += ["    if not _rec.active:", f'        raise ToolError(f"record {{{key.name}}} is closed")']
        if kind == "update":
            body.append(
                f"    _rec.fields = {{**_rec.fields, **{{k: v for k, v in _args.items() if k != {key.name!r}}}}}"
            )
        else:
            body.append("    _rec.active = False")
        body += [f'    state.history.append(f"{tool.name} {{_rec.id}}")', "    return _rec"]
        return body
    for p in params:
        if p.is_id:
            body.append(
                f"    _record(state, {p.name})"
                if p.required
                else f"    if {p.name} is not None:\n        _record(state, {p.name})"
            )
    new_id = 'f"rec_{uuid.uuid4().int % 10**8:08d}"' if defect == "uuid" else 'state.new_id("rec")'
    body += [
        f"    _rec = Record(id={new_id}, kind={tool.name!r}, fields=_args)",
        "    state.records[_rec.id] = _rec",
        f'    state.history.append(f"{tool.name} {{_rec.id}}")',
        "    return _rec",
    ]
    return body


def defect_param_kind(tool: ToolShape) -> str:
    for kind in ("integer", "boolean", "number", "string"):
        if any(p.kind == kind for p in tool.params):
            return kind
    return "string"


# -------------------------------------------------------------------------------- seeds, scenarios
def _seed_count(tools: list[ToolShape]) -> int:
    return max(2, 1 + sum(t.kind == "delete" for t in tools))


def write_seed(spec: dict[str, Any]) -> dict[str, Any]:
    tools = [ToolShape.of(t) for t in spec["tools"]]
    maker = next((t for t in tools if t.kind == "create"), None)
    n = _seed_count(tools)
    records = {}
    for i in range(1, n + 1):
        fields = {p.name: p.example("rec_0001") for p in (maker.params if maker else ()) if p.required}
        records[f"rec_{i:04d}"] = {"id": f"rec_{i:04d}", "kind": "seed", "fields": fields, "active": True}
    return {"now": "2026-01-05T09:00:00", "id_counters": {"rec": n}, "records": records, "history": []}


def write_scenarios(spec: dict[str, Any], defect: str = "good") -> dict[str, dict[str, Any]]:
    """A scenario calling every tool (closing tools last, each on its own seed record) and one of refusals."""
    tools = [ToolShape.of(t) for t in spec["tools"]]
    n = _seed_count(tools)
    steps, closing = [], 2
    predicted = False
    for tool in sorted(tools, key=lambda t: t.kind == "delete"):
        record_id = "rec_0001"
        if tool.kind == "delete":
            record_id, closing = f"rec_{closing:04d}", closing + 1
        arguments = {p.name: p.example(record_id) for p in tool.params if p.required}
        step: dict[str, Any] = {"tool": tool.name, "arguments": arguments}
        if tool.kind == "create" and not predicted:
            predicted = True
            new_id = (
                f"rec_{(1 if defect == 'scenario' else n + 1):04d}"  # the defect: forgets the seed's counter
            )
            step["expect"] = {"id": new_id, "kind": tool.name, "fields": arguments, "active": True}
        steps.append(step)
    refusals = []
    for tool in tools:
        if tool.id_param is not None:
            arguments = {p.name: p.example("rec_9999") for p in tool.params if p.required}
            refusals.append(
                {"tool": tool.name, "arguments": arguments, "expect_error": "no record 'rec_9999'"}
            )
        elif tool.text_param is not None and tool.writes:
            arguments = {p.name: p.example("rec_0001") for p in tool.params if p.required}
            arguments[tool.text_param.name] = " "
            refusals.append({"tool": tool.name, "arguments": arguments, "expect_error": "must not be empty"})
    scenarios = {
        "scenarios/every_tool.json": {
            "name": "every_tool",
            "description": "Each tool once, on the seed's records; closing tools last.",
            "steps": steps,
        }
    }
    if refusals:
        scenarios["scenarios/refusals.json"] = {
            "name": "refusals",
            "description": "Calls that must fail: unknown records, empty text. Nothing changes.",
            "steps": refusals,
        }
    return scenarios


def write_rejected(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    seed = write_seed(spec)
    first = dict(seed["records"]["rec_0001"], id="rec_0002")
    return {
        "scenarios/rejected/record_under_wrong_key.json": {
            "name": "record_under_wrong_key",
            "description": "rec_0001 holds the record rec_0002.",
            "state": {**seed, "records": {**seed["records"], "rec_0001": first}},
            "error": "must be stored under its own id",
        },
        "scenarios/rejected/counter_behind_ids.json": {
            "name": "counter_behind_ids",
            "description": "id_counters would hand out rec_0001 again.",
            "state": {**seed, "id_counters": {"rec": 0}},
            "error": "beyond id_counters",
        },
    }


def write_files(spec: dict[str, Any], defect: str = "good", step: int = 0) -> dict[str, Any]:
    """Every file of a draft (EnvGen's answer form)."""
    return {
        "env.py": write_module(spec, defect, step),
        "seed.json": write_seed(spec),
        **write_scenarios(spec, defect),
        **write_rejected(spec),
    }


# ------------------------------------------------------------------------------ reading the report
def names_defect(defect: str, report: list[dict[str, Any]], target: str | None) -> bool:
    """Whether a report says enough about `defect` (in the tool `target`) to fix it."""
    for f in report:
        check, message = f.get("check", ""), f.get("message", "")
        if defect == "syntax" and check == "envgen.import" and "SyntaxError" in message and "line" in message:
            return True
        if defect == "schema" and check == "envgen.metadata" and f.get("tool") == target:
            return True
        if defect == "hang" and check == "envgen.hang" and (f.get("tool") in (target, None)):
            return True
        if defect == "scenario" and check == "scenarios.results" and "expected" in f and f.get("step"):
            return True
        if defect == "uuid" and check == "state.determinism":
            return True
        if defect == "journal" and check == "state.transactional" and target in message:
            return True
    return False


# ---------------------------------------------------------------------------------------- the policy
class EnvGenScript:
    """A `Policy` answering EnvGen's requests (see the module docstring).

    `defects` is the schedule of every environment, or a mapping from environment name to its schedule
    (names it lacks get none)."""

    def __init__(self, defects: Sequence[str] | Mapping[str, Sequence[str]] = ()) -> None:
        schedules = dict(defects) if isinstance(defects, Mapping) else {"*": list(defects)}
        for schedule in schedules.values():
            for d in schedule:
                if d not in DEFECTS:
                    raise ValueError(f"unknown defect {d!r}; choose from {', '.join(DEFECTS)}")
        self.schedules = {k: list(v) for k, v in schedules.items()}

    def schedule(self, name: str) -> list[str]:
        return self.schedules.get(name, self.schedules.get("*", []))

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages") or []
        system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
        prompt = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
        if system == WRITE_SYSTEM:
            return text(json.dumps(self.draft(prompt)))
        if system == METADATA_SYSTEM:
            return text(json.dumps(metadata_for(prompt)))
        if system == PROPOSE_SYSTEM:
            count = int(m.group(1)) if (m := re.search(r"Propose (\d+) new", prompt)) else 3
            return text(json.dumps({"proposals": proposals(section(prompt, "Catalog") or {}, count)}))
        return text("The stand-in's EnvGen script answers EnvGen's requests only.")

    def draft(self, prompt: str) -> dict[str, Any]:
        spec = section(prompt, "Metadata")
        schedule = self.schedule(spec["name"])
        step = 0
        previous = section(prompt, "Your files")
        if previous is not None:
            m = MARKER.search(previous["files"].get("env.py", ""))
            last_step, last = (int(m.group(1)), m.group(2)) if m else (len(schedule), "good")
            tools = [ToolShape.of(t) for t in spec["tools"]]
            target = defect_target(tools, last) if last != "good" else None
            fixed = last == "good" or names_defect(
                last, section(prompt, "Report") or [], target and target.name
            )
            step = last_step + 1 if fixed else last_step
        defect = schedule[step] if step < len(schedule) else "good"
        note = "the environment" if defect == "good" else f"the environment (stand-in step {step}: {defect})"
        return {"files": write_files(spec, defect, step), "notes": f"wrote {note}"}


# ------------------------------------------------------------------------------- metadata, proposals
def _crud(entity: str, extra: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    key = f"{entity}_id"
    props = {"name": {"type": "string", "description": f"The {entity}'s name."}}
    props.update(dict(extra))
    return [
        {
            "name": f"create_{entity}",
            "description": f"Create a {entity}.",
            "input_schema": {"type": "object", "properties": props, "required": ["name"]},
        },
        {
            "name": f"search_{entity}s",
            "description": f"Find {entity}s by name.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "Exact name."},
                    "limit": {"type": "integer", "description": "At most this many."},
                },
            },
        },
        {
            "name": f"get_{entity}",
            "description": f"Get one {entity}.",
            "input_schema": {
                "type": "object",
                "properties": {key: {"type": "string", "description": f"The {entity}'s id."}},
                "required": [key],
            },
        },
        {
            "name": f"update_{entity}",
            "description": f"Rename a {entity}.",
            "input_schema": {
                "type": "object",
                "properties": {
                    key: {"type": "string", "description": f"The {entity}'s id."},
                    "name": {"type": "string", "description": "The new name."},
                },
                "required": [key],
            },
        },
        {
            "name": f"cancel_{entity}",
            "description": f"Cancel a {entity}.",
            "input_schema": {
                "type": "object",
                "properties": {key: {"type": "string", "description": f"The {entity}'s id."}},
                "required": [key],
            },
        },
    ]


def metadata_for(prompt: str) -> dict[str, Any]:
    """Metadata for a brief: a record-keeping interface named after its first line."""
    brief = prompt.split("## Brief\n", 1)[-1].split("\n\n", 1)[0].strip()
    title = " ".join(brief.splitlines()[0].split()[:3]) if brief else "Records"
    return {
        "class_name": camel(title),
        "description": " ".join(brief.split())[:400] or title,
        "domain": "general",
        "tools": _crud("item", [("city", {"type": "string", "description": "Where it is."})]),
    }


CANDIDATES = (
    ("Library", "education", "loan", [("email", {"type": "string", "description": "The member's email."})]),
    (
        "Parking",
        "transport",
        "permit",
        [
            ("city", {"type": "string", "description": "The city."}),
            ("hours", {"type": "integer", "description": "How long."}),
        ],
    ),
    (
        "Pharmacy",
        "health",
        "prescription",
        [
            ("email", {"type": "string", "description": "The patient's email."}),
            ("refills", {"type": "integer", "description": "Refills allowed."}),
        ],
    ),
    (
        "Insurance",
        "insurance",
        "claim",
        [
            ("amount", {"type": "number", "description": "Claimed amount."}),
            ("currency", {"type": "string", "description": "Its currency."}),
        ],
    ),
    (
        "Tickets",
        "entertainment",
        "ticket",
        [
            ("city", {"type": "string", "description": "Where the event is."}),
            ("date", {"type": "string", "description": "Its date."}),
        ],
    ),
    ("Gym", "sports", "membership", [("email", {"type": "string", "description": "The member's email."})]),
)


def proposals(catalog: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """Metadata for up to `count` domains the catalog (EnvGen's propose request) does not have."""
    have = {str(d).lower() for d in (catalog.get("domains") or {})}
    names = {str(e).lower() for e in (catalog.get("environments") or {})}
    out = []
    for title, domain, entity, extra in CANDIDATES:
        if domain in have or kebab(title) in names:
            continue
        out.append(
            {
                "class_name": title,
                "domain": domain,
                "description": f"{title}: {entity}s people create, look up, change and cancel.",
                "rationale": f"the catalog has no {domain} environment",
                "tools": _crud(entity, extra),
            }
        )
        if len(out) == count:
            break
    return out
