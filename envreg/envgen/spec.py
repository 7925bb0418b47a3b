"""What EnvGen is asked to write: a `Spec` (name, description, domain, tools with parameter schemas), read from
EnvFactory's metadata JSON, an OpenAPI 3 document, or a short natural-language brief (`Brief`, which the LLM
first turns into metadata: `envreg.envgen.generate.write_metadata`).

Tool and parameter names must be Python identifiers, since they become the environment's functions and
parameters: a name that is not one (``pet-id``, ``from``) is renamed (``pet_id``, ``from_``) and the rename
is noted in `Spec.notes`.
"""

from __future__ import annotations

import json
import keyword
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envreg.errors import BadRequest

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
METHODS = ("get", "post", "put", "patch", "delete")
MAX_TOOLS = 40

# what a tool does to its entity, by the first word of its name
_VERBS = {
    "create": (
        "create add new book reserve schedule send post submit register open place make "
        "upload insert request order buy purchase apply invite save log record write issue "
        "transfer pay subscribe start generate rent hire"
    ),
    "read": (
        "get read show fetch retrieve view describe check lookup find search list query count "
        "browse track calculate estimate compare convert quote"
    ),
    "update": (
        "update edit modify change set rename move reschedule assign mark rate reply extend "
        "renew adjust approve confirm complete resolve"
    ),
    "delete": (
        "delete remove cancel close archive revoke unsubscribe void refund return reject "
        "decline end stop release"
    ),
}
VERB_OF = {word: verb for verb, words in _VERBS.items() for word in words.split()}


def tool_verb(name: str) -> str | None:
    """What a tool does to its entity by its name's first word: create, read, update, delete (None: unknown)."""
    return VERB_OF.get(snake(name).split("_", 1)[0])


class SpecProblem(BadRequest):
    """The input cannot be read as metadata, an OpenAPI document or a brief; the message says why."""


class ToolSpec(BaseModel):
    """One tool the environment must have: its name, what it does, its input schema (an object schema)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    output_schema: dict[str, Any] | None = None

    @property
    def parameters(self) -> dict[str, dict[str, Any]]:
        return dict(self.input_schema.get("properties") or {})

    @property
    def required(self) -> list[str]:
        return list(self.input_schema.get("required") or [])


class Spec(BaseModel):
    """The metadata of one environment to generate (EnvFactory's metadata, normalized)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Environment name, [a-z0-9][a-z0-9-]*.")
    class_name: str
    description: str
    domain: str = "general"
    tools: list[ToolSpec]
    source: Literal["envfactory", "openapi", "brief"] = "envfactory"
    notes: list[str] = Field(default_factory=list, description="What reading the input changed (renames).")

    def metadata(self) -> dict[str, Any]:
        """The spec in EnvFactory's metadata form (what `envreg envgen propose` writes and `envgen` reads)."""
        return {
            "class_name": self.class_name,
            "description": self.description,
            "domain": self.domain,
            "tools": [t.model_dump(exclude_none=True) for t in self.tools],
        }


class Brief(BaseModel):
    """A natural-language description of an environment, without tools: the LLM writes its metadata first."""

    name: str | None = None
    text: str


# ------------------------------------------------------------------------------------------ names
def check_name(name: str) -> str:
    """An environment name (`envreg.adapters.envfactory.check_name`'s rule), as a `SpecProblem` when it is not."""
    from envreg.adapters import envfactory  # imported when used: it imports jsonschema (seconds)

    try:
        return envfactory.check_name(name)
    except envfactory.ImportProblem:
        raise SpecProblem(
            f"{name!r} is not an environment name",
            "use lower-case letters, digits and '-', starting with a letter or digit, at most 63 characters "
            "(--name hotel-bookings)",
        ) from None


def kebab(text: str) -> str:
    """``HotelBookings`` -> ``hotel-bookings`` (`envreg.adapters.envfactory.kebab`)."""
    from envreg.adapters import envfactory

    return envfactory.kebab(text)


def camel(text: str) -> str:
    """``hotel-bookings`` / ``Hotel bookings`` -> ``HotelBookings``."""
    return "".join(w[:1].upper() + w[1:] for w in re.findall(r"[A-Za-z0-9]+", text)) or "Environment"


def snake(text: str) -> str:
    """``listPets`` / ``pet-id`` / ``GET /pets/{id}`` -> ``list_pets`` / ``pet_id`` / ``get_pets_id``."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text)
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def identifier(name: str) -> str:
    """`name` as a Python identifier that is not a keyword."""
    fixed = name if IDENTIFIER.match(name) and not name.startswith("_") else snake(name) or "value"
    if fixed[0].isdigit():
        fixed = f"n_{fixed}"
    if keyword.iskeyword(fixed):
        fixed += "_"
    return fixed[:64]


def _normalized(tools: list[dict[str, Any]], notes: list[str]) -> list[ToolSpec]:
    out: list[ToolSpec] = []
    seen: set[str] = set()
    for raw in tools:
        name = identifier(str(raw.get("name") or ""))
        while name in seen:
            name += "_2"
        if name != raw.get("name"):
            notes.append(f"tool {raw.get('name')!r} is named {name!r} (a Python identifier)")
        seen.add(name)
        schema = dict(
            raw.get("input_schema") or raw.get("inputSchema") or raw.get("parameters") or {"type": "object"}
        )
        schema.setdefault("type", "object")
        props, renamed = {}, {}
        for pname, pschema in (schema.get("properties") or {}).items():
            fixed = identifier(pname)
            if fixed != pname:
                renamed[pname] = fixed
                notes.append(f"tool {name!r}: parameter {pname!r} is named {fixed!r} (a Python identifier)")
            props[fixed] = pschema if isinstance(pschema, dict) else {}
        schema["properties"] = props
        schema["required"] = [
            renamed.get(r, r) for r in schema.get("required") or [] if renamed.get(r, r) in props
        ]
        if not schema["required"]:
            del schema["required"]
        output = raw.get("output_schema") or raw.get("outputSchema")
        out.append(
            ToolSpec(
                name=name,
                description=str(raw.get("description") or ""),
                input_schema=schema,
                output_schema=output if isinstance(output, dict) else None,
            )
        )
    if not out:
        raise SpecProblem(
            "the metadata lists no tools", "give each tool a name, a description and an input_schema"
        )
    if len(out) > MAX_TOOLS:
        raise SpecProblem(
            f"the metadata lists {len(out)} tools; EnvGen writes at most {MAX_TOOLS} per environment"
        )
    return out


# ---------------------------------------------------------------------------------------- readers
def from_metadata(data: dict[str, Any], *, name: str | None = None, domain: str | None = None) -> Spec:
    """EnvFactory's metadata: ``class_name``, ``description``, ``tools`` (name, description, input_schema)."""
    if not isinstance(data.get("class_name"), str) or not isinstance(data.get("tools"), list):
        raise SpecProblem(
            "not EnvFactory metadata: it needs class_name (a string) and tools (a list)",
            "give EnvFactory's metadata JSON, an OpenAPI 3 document (JSON) or a brief (a .txt or .md file)",
        )
    notes: list[str] = []
    tools = _normalized(data["tools"], notes)
    return Spec(
        name=check_name(name or kebab(data["class_name"])),
        class_name=identifier(camel(data["class_name"])),
        description=str(data.get("description") or data["class_name"]),
        domain=domain or str(data.get("domain") or "general"),
        tools=tools,
        source="envfactory",
        notes=notes,
    )


def _resolve(doc: dict[str, Any], node: Any, depth: int = 0) -> Any:
    """`node` with the document's local ``$ref``s put in place (a cycle, or past 6 levels: a plain object)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            if not ref.startswith("#/") or depth > 6:
                return {"type": "object"}
            target: Any = doc
            for part in ref[2:].split("/"):
                target = (
                    target.get(part.replace("~1", "/").replace("~0", "~"), {})
                    if isinstance(target, dict)
                    else {}
                )
            return _resolve(doc, target, depth + 1)
        return {k: _resolve(doc, v, depth) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(doc, v, depth) for v in node]
    return node


def _json_content(body: Any) -> dict[str, Any] | None:
    content = (body or {}).get("content") or {}
    for media, entry in content.items():
        if "json" in media and isinstance(entry, dict) and isinstance(entry.get("schema"), dict):
            return entry["schema"]
    return None


def from_openapi(doc: dict[str, Any], *, name: str | None = None, domain: str | None = None) -> Spec:
    """An OpenAPI 3 document: one tool per operation (its operationId, else method and path), the path and
    query parameters and a JSON body's properties as its parameters, the JSON success response as its output."""
    if not str(doc.get("openapi", "")).startswith("3"):
        raise SpecProblem(
            f"not an OpenAPI 3 document (openapi: {doc.get('openapi') or doc.get('swagger')!r})",
            "convert Swagger 2.0 documents to OpenAPI 3 first",
        )
    info = doc.get("info") or {}
    tools: list[dict[str, Any]] = []
    for path, item in (doc.get("paths") or {}).items():
        item = _resolve(doc, item)
        shared = item.get("parameters") or []
        for method in METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            props: dict[str, Any] = {}
            required: list[str] = []
            for param in [*shared, *(op.get("parameters") or [])]:
                if param.get("in") not in ("path", "query"):
                    continue
                schema = dict(param.get("schema") or {"type": "string"})
                if param.get("description"):
                    schema.setdefault("description", param["description"])
                props[param["name"]] = schema
                if param.get("required") or param.get("in") == "path":
                    required.append(param["name"])
            body = _json_content(op.get("requestBody"))
            if body is not None:
                if body.get("type", "object") == "object" and body.get("properties"):
                    props.update(body["properties"])
                    required += list(body.get("required") or [])
                else:
                    props["body"] = body
                    required.append("body")
            responses = op.get("responses") or {}
            output = next(
                (
                    s
                    for code in ("200", "201", "202")
                    if (s := _json_content(responses.get(code))) is not None
                ),
                None,
            )
            summary = (
                " ".join(x for x in (op.get("summary"), op.get("description")) if x)
                or f"{method.upper()} {path}"
            )
            tools.append(
                {
                    "name": snake(op.get("operationId") or f"{method} {path}"),
                    "description": summary,
                    "input_schema": {
                        "type": "object",
                        "properties": props,
                        **({"required": required} if required else {}),
                    },
                    "output_schema": output,
                }
            )
    title = str(info.get("title") or "api")
    notes: list[str] = []
    spec_tools = _normalized(tools, notes)
    return Spec(
        name=check_name(name or kebab(title)),
        class_name=identifier(camel(title)),
        description=str(info.get("description") or title),
        domain=domain or str(info.get("x-domain") or "general"),
        tools=spec_tools,
        source="openapi",
        notes=notes,
    )


def read_input(path: Path, *, name: str | None = None, domain: str | None = None) -> Spec | Brief:
    """Read `path`: EnvFactory metadata or an OpenAPI 3 document (JSON), or a brief (any other text file)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecProblem(f"cannot read {path}: {exc}") from None
    if path.suffix.lower() != ".json":
        if not text.strip():
            raise SpecProblem(
                f"{path} is empty", "a brief is a few sentences saying what the environment holds and does"
            )
        return Brief(name=check_name(name) if name else None, text=text.strip())
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecProblem(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SpecProblem(f"{path} holds a JSON {type(data).__name__}, not an object")
    try:
        if "openapi" in data or "swagger" in data:
            return from_openapi(data, name=name, domain=domain)
        return from_metadata(data, name=name, domain=domain)
    except ValidationError as exc:
        raise SpecProblem(f"{path}: {exc.errors(include_url=False)[0]['msg']}") from None
