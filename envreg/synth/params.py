"""Tool parameters, flattened one level, and the explicit rules that say which ones a user can provide.

Inputs are the top-level properties of a tool's input schema; an object (or list of objects)
contributes its fields instead (``passengers.first_name``). Outputs are the fields of the result
(``*.id`` for every item of a list, ``cabins.economy`` one level down), so that a value can be
picked out of a real result by its path.

Every input gets a **kind** by rule (`classify`); every kind but ``id`` is *user-providable*:
a user can say a name, a date, an email, an amount or an enum value, but not ``evt_0007``, which
only a tool hands out.

Every parameter also gets a **value kind** (`value_kind`), a typed kind that says what its values
denote: a person's email or name, a city, a street address, coordinates, a ticker symbol, an
airport code, a birth, due or expiry date, the days of a booking, or nothing shared (``local``:
statuses, titles, amounts, counts, generic names...). Only the `SHARED_KINDS` link environments:
an account's currency, a ride's distance or a workout's start mean something only where they come
from, while an email or a city names the same thing in every system.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

Direction = Literal["in", "out"]

#: kinds a user can provide; ``id`` (produced by tools) is the only one that is not
KINDS = (
    "id",
    "enum",
    "boolean",
    "number",
    "date",
    "datetime",
    "time",
    "email",
    "search",
    "free_text",
    "name",
    "location",
    "value",
)
SEARCH_NAMES = {"query", "q", "search", "keyword", "keywords", "term", "terms", "text_query"}
FREE_TEXT_NAMES = {
    "title",
    "description",
    "memo",
    "reference",
    "note",
    "notes",
    "body",
    "subject",
    "comment",
    "message",
    "text",
    "content",
    "label",
    "bio",
    "summary",
    "instructions",
    "reason",
}
NAME_NAMES = {"name", "first_name", "last_name", "full_name", "display_name", "username"}
LOCATION_NAMES = {"city", "address", "country", "location", "lat", "lng", "latitude", "longitude", "place"}
MASKED_KINDS = {"free_text", "search"}
PERSON_NOUNS = (
    "customer", "contact", "payee", "passenger", "traveler", "traveller", "user", "author", "attendee",
    "member", "person", "owner", "assignee", "guest", "recipient", "employee", "profile", "driver",
)  # fmt: skip
BOOKED_DATES = ("nights", "check_in", "check_out", "travel_date", "departure_date", "arrival_date", "stay")
UNDOING = ("cancel", "delete", "remove", "void")  # tools whose results are about what no longer holds
CREDENTIALS = ("login", "authenticate", "sign_in", "signin")  # tools that take the user's own credentials
#: value kinds that name the same thing in every system: only these link environments
SHARED_KINDS = frozenset(
    {
        "email", "phone", "address", "city", "geo.lat", "geo.lng", "person.name", "person.first_name",
        "person.last_name", "person.username", "stock.symbol", "airport", "card.number", "text.content", "date.birth",
        "date.due", "date.expiry", "date.booked",
    }
)  # fmt: skip
_ID_PATTERN = re.compile(r"^\^?\(?([a-z]{2,8})_")
_ID_EXAMPLE = re.compile(r"\b([a-z]{2,8})_(?:\d{2,}|\.\.\.)")
_SAMPLES = {
    "date": "2026-01-06",
    "datetime": "2026-01-06T09:30:00",
    "time": "09:30:00",
    "time_short": "09:30",
}


@dataclass(frozen=True, slots=True)
class Param:
    """One input or output parameter of one tool."""

    env: str
    tool: str
    direction: Direction
    path: tuple[str, ...]
    schema: dict[str, Any] = field(compare=False, hash=False)
    description: str = field(default="", compare=False)
    required: bool = field(default=False, compare=False)
    entity: str | None = field(default=None, compare=False)
    entity_description: str = field(default="", compare=False)
    in_list: bool = field(default=False, compare=False)

    @property
    def key(self) -> str:
        """The graph node id, e.g. ``calendar/get_event:in:event_id`` or ``calendar/list_events:out:*.id``."""
        return f"{self.env}/{self.tool}:{self.direction}:{'.'.join(self.path) or '$'}"

    @property
    def name(self) -> str:
        """The leaf name (``first_name`` for ``passengers.first_name``; the tool name for a bare result)."""
        names = [p for p in self.path if p != "*"]
        return names[-1] if names else self.tool

    @property
    def type(self) -> str:
        return json_type(self.schema)

    @property
    def kind(self) -> str:
        return classify(self)

    @property
    def user_providable(self) -> bool:
        return self.kind != "id"

    @property
    def id_prefix(self) -> str | None:
        return id_prefix(self)

    def name_text(self) -> str:
        """What the name/type half of the similarity embeds: ``contact id (string)``."""
        name = self.name
        if self.direction == "out" and name == "id" and self.entity:
            name = f"{self.entity}_id"
        label = self.type + (f", {self.schema['format']}" if "format" in self.schema else "")
        return f"{humanize(name)} ({label})"

    def description_text(self) -> str:
        """What the description half embeds: the parameter's description, or its entity's."""
        if self.direction == "in":
            return self.description or humanize(self.name)
        # outputs are described the way inputs refer to them: "The event's id, e.g. "evt_0004" (from list_events)."
        owner = f"The {humanize(self.entity)}'s " if self.entity else "The "
        text = owner + humanize(self.name)
        if prefix := id_prefix(self):
            text += f', e.g. "{prefix}_0001"'
        text += f" (from {self.tool})."
        extra = self.description or self.entity_description
        return f"{text} {extra}".strip()


def humanize(name: str) -> str:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return spaced.replace("_", " ").replace("-", " ").strip().lower()


def json_type(schema: dict[str, Any]) -> str:
    if "enum" in schema and "type" not in schema:
        return "string"
    kind = schema.get("type", "object" if "properties" in schema else "any")
    return kind if isinstance(kind, str) else "/".join(kind)


def resolve(schema: dict[str, Any], root: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Follow ``$ref`` and unwrap ``anyOf: [X, null]``; returns (schema, nullable)."""
    nullable = False
    for _ in range(16):
        if "$ref" in schema:
            ref = schema["$ref"].split("/")[-1]
            merged = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**root.get("$defs", {}).get(ref, {}), **merged}
            continue
        options = schema.get("anyOf") or schema.get("oneOf")
        if options:
            non_null = [o for o in options if o.get("type") != "null"]
            nullable = nullable or len(non_null) < len(options)
            if len(non_null) == 1:
                rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
                schema = {**non_null[0], **{k: v for k, v in rest.items() if k in ("description", "title")}}
                continue
        if "allOf" in schema and len(schema["allOf"]) == 1:
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            schema = {**schema["allOf"][0], **rest}
            continue
        return schema, nullable
    return schema, nullable


def _is_object(schema: dict[str, Any]) -> bool:
    return bool(schema.get("properties")) and schema.get("type", "object") == "object"


def input_params(env: str, tool: dict[str, Any]) -> list[Param]:
    """The tool's inputs, one level flattened (an object's or a list of objects' fields)."""
    root = tool.get("inputSchema") or {}
    required = set(root.get("required", []))
    params: list[Param] = []
    for name, raw in (root.get("properties") or {}).items():
        schema, _ = resolve(raw, root)
        description = schema.get("description", raw.get("description", ""))
        item = (
            resolve(schema["items"], root)[0] if schema.get("type") == "array" and "items" in schema else None
        )
        inner = item if item is not None and _is_object(item) else schema if _is_object(schema) else None
        if inner is None:
            params.append(Param(env, tool["name"], "in", (name,), schema, description, name in required))
            continue
        inner_required = set(inner.get("required", []))
        for sub, sub_raw in inner["properties"].items():
            sub_schema, _ = resolve(sub_raw, root)
            sub_description = sub_schema.get("description") or f"{humanize(sub)} of each of: {description}"
            params.append(
                Param(
                    env,
                    tool["name"],
                    "in",
                    (name, sub),
                    sub_schema,
                    sub_description,
                    name in required and sub in inner_required,
                    entity=inner.get("title"),
                    entity_description=inner.get("description", ""),
                    in_list=item is not None and inner is item,
                )
            )
    return params


def output_params(env: str, tool: dict[str, Any]) -> list[Param]:
    """The fields of the tool's result, one level flattened, each with the path that finds it."""
    root = tool.get("outputSchema")
    if not root:
        return []
    schema, _ = resolve(root, root)
    props = schema.get("properties") or {}
    if set(props) == {"result"} and schema.get("required") == ["result"]:
        schema, _ = resolve(props["result"], root)
    prefix: tuple[str, ...] = ()
    if schema.get("type") == "array" and "items" in schema:
        schema, _ = resolve(schema["items"], root)
        prefix = ("*",)
    if not _is_object(schema):
        return [Param(env, tool["name"], "out", prefix, schema, schema.get("description", ""))]
    params: list[Param] = []
    _object_fields(env, tool["name"], schema, root, prefix, params, depth=0)
    return params


def _object_fields(
    env: str,
    tool: str,
    schema: dict[str, Any],
    root: dict[str, Any],
    prefix: tuple[str, ...],
    out: list[Param],
    depth: int,
) -> None:
    entity, entity_description = schema.get("title"), schema.get("description", "")
    for name, raw in schema["properties"].items():
        sub, _ = resolve(raw, root)
        item = resolve(sub["items"], root)[0] if sub.get("type") == "array" and "items" in sub else None
        if depth == 0 and _is_object(sub):
            _object_fields(env, tool, sub, root, (*prefix, name), out, depth + 1)
        elif depth == 0 and item is not None and _is_object(item):
            _object_fields(env, tool, item, root, (*prefix, name, "*"), out, depth + 1)
        else:
            out.append(
                Param(
                    env,
                    tool,
                    "out",
                    (*prefix, name),
                    sub,
                    sub.get("description", ""),
                    entity=entity,
                    entity_description=entity_description,
                )
            )


def _pattern_kind(pattern: str) -> str | None:
    try:
        regex = re.compile(pattern)
    except re.error:
        return None
    for kind, sample in _SAMPLES.items():
        if regex.search(sample):
            return "time" if kind == "time_short" else kind
    return None


def id_prefix(param: Param) -> str | None:
    """The prefix of the ids a parameter holds (``con`` for ``con_0003``), from its pattern or example."""
    if m := _ID_PATTERN.match(param.schema.get("pattern", "")):
        return m.group(1)
    is_id_name = param.name == "id" or param.name.endswith(("_id", "_ids"))
    if is_id_name and (m := _ID_EXAMPLE.search(param.description)):
        return m.group(1)
    return None


def is_id(param: Param) -> bool:
    name = param.name
    if name == "id" or name.endswith(("_id", "_ids", "Id", "Ids")):
        return True
    return bool(_ID_PATTERN.match(param.schema.get("pattern", "")))


def classify(param: Param) -> str:
    """The kind of a parameter, by explicit rules (see the module docstring and README)."""
    schema, name = param.schema, param.name.lower()
    if is_id(param):
        return "id"
    if "enum" in schema or "const" in schema:
        return "enum"
    kind = json_type(schema)
    if kind == "boolean":
        return "boolean"
    if kind in ("integer", "number"):
        return "number"
    fmt = schema.get("format")
    if fmt in ("date", "date-time", "time"):
        return {"date": "date", "date-time": "datetime", "time": "time"}[fmt]
    if (
        fmt == "email"
        or name == "email"
        or name.endswith("_email")
        or name in ("to", "cc", "bcc", "recipient")
    ):
        return "email"
    if "pattern" in schema and (pk := _pattern_kind(schema["pattern"])):
        return pk
    if name in SEARCH_NAMES:
        return "search"
    if name in FREE_TEXT_NAMES:
        return "free_text"
    if name in NAME_NAMES or name.endswith("_name"):
        return "name"
    if name in LOCATION_NAMES:
        return "location"
    return "value"


def masked(param: Param) -> bool:
    """Free text and search queries: values the trace reward ignores (any phrasing is right)."""
    return classify(param) in MASKED_KINDS


def _date_like(param: Param) -> bool:
    return classify(param) in ("date", "datetime") or (
        json_type(param.schema) == "string"
        and bool(re.search(r"date|day|birth|expir|expires", param.name.lower()))
    )


def _person(param: Param) -> bool:
    """Whether the parameter belongs to a person (a contact, a customer, a passenger...)."""
    words = [param.entity or "", *param.path[:-1], param.tool]
    if param.direction == "in":
        words.append(param.description.lower())
    text = " ".join(w.lower() for w in words)
    return any(noun in text for noun in PERSON_NOUNS)


def value_kind(param: Param) -> str:
    """The typed kind of a parameter's values (see the module docstring); ``local`` when nothing shared."""
    name = param.name.lower()
    kind = classify(param)
    if kind == "id":
        return "id"
    if kind == "email":
        return "email"
    if json_type(param.schema) in ("number", "integer"):
        if name in ("lat", "latitude") or name.endswith(("_lat", "_latitude")):
            return "geo.lat"
        if name in ("lng", "lon", "long", "longitude") or name.endswith(("_lng", "_lon", "_longitude")):
            return "geo.lng"
        return "local"
    if _date_like(param):
        if "birth" in name or name == "dob":
            return "date.birth"
        if name.startswith("due"):
            return "date.due"
        if name.startswith(("expir", "expires")):
            return "date.expiry"
        if (
            param.direction == "out"
            and any(part in BOOKED_DATES for part in (*param.path, name))
            and not param.tool.startswith(UNDOING)
        ):
            return "date.booked"
        return "date.day"
    if name.endswith("first_name"):
        return "person.first_name"
    if name.endswith("last_name"):
        return "person.last_name"
    if name in ("full_name", "name") and _person(param):
        return "person.name"
    if name in ("username", "user_name", "user") and not any(w in param.tool for w in CREDENTIALS):
        return "person.username"
    if name == "phone" or name.endswith("_phone"):
        return "phone"
    if name == "address" or (name.endswith("_address") and "email" not in name):
        return "address"
    if name.startswith("city") or name.endswith(("_city", "cities", "citya", "cityb")):
        return "city"
    if name in ("symbol", "ticker") or name.endswith("_symbol"):
        return "stock.symbol"
    if name == "card_number":
        return "card.number"
    if name in ("content", "file_content"):
        return "text.content"
    airport_words = f"{param.description} {param.schema.get('description', '')}".lower()
    if (
        param.schema.get("pattern") == "^[A-Z]{3}$"
        or "iata" in airport_words
        or "airport code" in airport_words
    ):
        return "airport"
    return "local"


def kind_linkable(out_kind: str, in_kind: str) -> bool:
    """Whether values of `out_kind` in one environment may feed `in_kind` in another: the same shared
    value kind, or the days of a booking into any day."""
    if out_kind == "date.booked":
        return in_kind in ("date.day", "date.booked")
    return out_kind == in_kind and out_kind in SHARED_KINDS


def linkable(out: Param, inp: Param) -> bool:
    """Whether an output of one environment may feed an input of another (`kind_linkable`)."""
    return kind_linkable(value_kind(out), value_kind(inp))
