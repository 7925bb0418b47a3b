"""BFCL multi-turn environments (the `bfcl-eval` package, Apache-2.0) served unchanged as envreg environments.

Each of BFCL's eight multi-turn classes (GorillaFileSystem, MathAPI, ...) becomes one environment,
``bfcl-<class in kebab case>``: tools are the class's public methods with the schemas of BFCL's
function docs (``"type": "dict"`` -> ``object``, ``float`` -> ``number``), the state is a snapshot
of everything the object holds (`envreg.adapters.objects`), and BFCL's private attributes (what its
checker does not compare: the current directory, random generators, timestamps) are volatile.

Arguments are checked against the published schemas, with BFCL's own leniency by default
(``coercion="bfcl"``): BFCL's harness hands a method whatever the model wrote, and some methods
convert a parameter themselves (``budget_limit = float(budget_limit)``), so there a number written as a
string (``'2857.14'``) is accepted and reaches the method as it came, exactly as under BFCL. Every other
type mismatch is refused. ``coercion="strict"`` refuses every argument the published schema refuses
(for training, where the schema is the contract).

`bfcl-eval` is installed without its dependencies (``pip install --no-deps bfcl-eval==2026.3.23
mpmath``): only its multi-turn classes, data files and checker are used.
"""

from __future__ import annotations

import ast
import copy
import datetime
import importlib
import inspect
import json
import re
import textwrap
import types
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from envreg.adapters.objects import SnapshotError, dump_object, load_object
from envreg.adapters.pyclass import ClassEnvironment, Method, class_environment
from envreg.env import Environment
from envreg.errors import EnvregError

BFCL_VERSION = "2026.3.23"
CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
#: BFCL class -> envreg domain; the environment is named bfcl-<class in kebab case>
CLASSES = {
    "GorillaFileSystem": "filesystem",
    "MathAPI": "math",
    "MessageAPI": "messaging",
    "TwitterAPI": "social",
    "TicketAPI": "support",
    "TradingBot": "finance",
    "TravelAPI": "travel",
    "VehicleControlAPI": "vehicle",
}
VOLATILE = ["private"]  # BFCL's checker compares public attributes only
#: Methods whose result is not always an object, so BFCL's "response" doc cannot be their output
#: schema (read from BFCL's source; every ground-truth and tour result is validated in the tests).
NOT_OBJECT_RESULTS = {
    ("GorillaFileSystem", "mkdir"): "None on success",
    ("GorillaFileSystem", "touch"): "None on success",
    ("GorillaFileSystem", "echo"): "None when it writes to a file",
    ("TwitterAPI", "get_user_tweets"): "a list",
    ("TwitterAPI", "search_tweets"): "a list",
    ("TwitterAPI", "get_tweet_comments"): "a list",
    ("TicketAPI", "get_user_tickets"): "a list",
    ("TradingBot", "get_watchlist"): "a list in long-context entries and when logged out",
    ("TradingBot", "get_order_history"): "a list when logged out",
    ("TradingBot", "get_transaction_history"): "a list when logged out",
    ("TravelAPI", "list_all_airports"): "a list",
}
#: Response fields that BFCL's docs type wrongly: (class, method) -> {field: the schema of what it returns}
RESPONSE_FIELD_FIXES: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    ("MessageAPI", "send_message"): {
        "message_id": {
            "type": "object",
            "description": 'The id of the sent message, as {"new_id": <int>}.',
            "properties": {"new_id": {"type": "integer"}},
        }
    },
    ("TradingBot", "get_stock_info"): {
        "MA(5)": {
            "type": ["number", "array"],
            "items": {"type": "number"},
            "description": "5-day moving average (a series in long-context entries).",
        },
        "MA(20)": {
            "type": ["number", "array"],
            "items": {"type": "number"},
            "description": "20-day moving average (a series in long-context entries).",
        },
    },
}
_JSON_TYPES = {"dict": "object", "float": "number", "tuple": "array"}
Coercion = Literal["bfcl", "strict"]
COERCIONS: tuple[Coercion, ...] = ("bfcl", "strict")
#: what a method may call on a parameter to turn a string into the number it documents
_CONVERTERS = frozenset({"float", "int", "Decimal"})


class BfclNotInstalled(EnvregError, ImportError):
    """bfcl-eval (the BFCL classes) is not installed; the hint says how to install it."""


def _bfcl() -> Any:
    try:
        import bfcl_eval
        from bfcl_eval.constants import executable_backend_config
    except ImportError as exc:
        raise BfclNotInstalled(
            f"bfcl-eval is not installed ({exc})",
            "install it without its dependencies (they pull torch): pip install --no-deps --require-hashes "
            f"-r images/base/bfcl-requirements.lock (bfcl-eval=={BFCL_VERSION} and mpmath)",
        ) from None
    return bfcl_eval, executable_backend_config


def data_dir() -> Path:
    return Path(_bfcl()[0].__file__).parent / "data"


def env_name(class_name: str) -> str:
    """``GorillaFileSystem`` -> ``bfcl-gorilla-file-system``; ``MathAPI`` -> ``bfcl-math-api``."""
    words = re.findall(r"[A-Z]+(?=[A-Z][a-z]|$)|[A-Z][a-z]*|[a-z]+", class_name)
    return "bfcl-" + "-".join(w.lower() for w in words)


@cache
def bfcl_class(class_name: str) -> type:
    """The BFCL class, from a module whose wall clock is `FIXED_CLOCK` (`fix_clock`)."""
    if class_name not in CLASSES:
        raise KeyError(f"unknown BFCL class {class_name!r}; known: {', '.join(CLASSES)}")
    config = _bfcl()[1]
    module = importlib.import_module(config.CLASS_FILE_PATH_MAPPING[class_name])
    fix_clock(module)
    return getattr(module, class_name)


FIXED_CLOCK = datetime.datetime(2024, 1, 1)
"""What ``datetime.datetime.now()`` gives in BFCL's classes: GorillaFileSystem stamps each file with the
wall clock (``_last_modified``, which BFCL's checker never compares and no tool shows), so without it the
same calls give another state hash and snapshot id on every replay."""


class _FixedDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz: datetime.tzinfo | None = None) -> datetime.datetime:  # type: ignore[override]
        return FIXED_CLOCK.replace(tzinfo=tz)

    @classmethod
    def today(cls) -> datetime.datetime:  # type: ignore[override]
        return FIXED_CLOCK


def fix_clock(module: Any) -> None:
    """Give `module` a ``datetime`` whose ``datetime.now()`` is `FIXED_CLOCK` (idempotent)."""
    if getattr(module, "datetime", None) is datetime:
        module.datetime = types.SimpleNamespace(**{**vars(datetime), "datetime": _FixedDatetime})


def is_stateless(class_name: str) -> bool:
    return class_name in _bfcl()[1].STATELESS_CLASSES


# ------------------------------------------------------------------------------------------- schemas
def json_schema(doc: dict[str, Any]) -> dict[str, Any]:
    """One schema of a BFCL function doc as JSON Schema (2020-12)."""
    out: dict[str, Any] = {}
    kind = doc.get("type")
    if isinstance(kind, str) and kind != "any":
        out["type"] = _JSON_TYPES.get(kind, kind)
    for key in ("description", "enum"):
        if key in doc:
            out[key] = doc[key]
    if "default" in doc and doc["default"] != "None":  # "None" stands for Python's None: no JSON default
        out["default"] = doc["default"]
    if "properties" in doc:
        out["properties"] = {name: json_schema(sub) for name, sub in doc["properties"].items()}
    if doc.get("required"):
        out["required"] = list(doc["required"])
    if "items" in doc:
        out["items"] = json_schema(doc["items"])
    return out


@cache
def function_docs(class_name: str) -> list[dict[str, Any]]:
    config = _bfcl()[1]
    path = data_dir() / "multi_turn_func_doc" / config.MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def output_schema(class_name: str, doc: dict[str, Any]) -> dict[str, Any] | None:
    """BFCL's response doc as an output schema, where it is honest (see `NOT_OBJECT_RESULTS`)."""
    if (class_name, doc["name"]) in NOT_OBJECT_RESULTS or not doc.get("response"):
        return None
    schema = json_schema(doc["response"])
    schema["type"] = "object"
    for name, fixed in RESPONSE_FIELD_FIXES.get((class_name, doc["name"]), {}).items():
        schema.setdefault("properties", {})[name] = fixed
    return schema


@cache
def converted_parameters(class_name: str, method: str) -> frozenset[str]:
    """The parameters `method` converts itself, read from BFCL's source: passed to ``float``, ``int``,
    ``Decimal`` or an ``mpmath`` function, or set as ``mpmath.mp.dps``. There BFCL's harness, which hands
    the method what the model wrote, works with a number written as a string."""
    fn = getattr(bfcl_class(class_name), method)
    params = set(inspect.signature(fn).parameters) - {"self"}

    def converting(target: ast.expr) -> bool:
        name = ast.unparse(target)
        return name in _CONVERTERS or name.startswith("mpmath.")

    found = set()
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(fn)))):
        if isinstance(node, ast.Call) and converting(node.func):
            found |= {a.id for a in node.args if isinstance(a, ast.Name) and a.id in params}
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Name)
            and node.value.id in params
            and any(isinstance(t, ast.Attribute) and converting(t) for t in node.targets)
        ):
            found.add(node.value.id)
    return frozenset(found)


def lenient_schema(class_name: str, method: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    """`schema` accepting a string for each number the method converts itself; None when there is none."""
    lenient = copy.deepcopy(schema)
    widened = False
    for name in converted_parameters(class_name, method):
        prop = lenient.get("properties", {}).get(name)
        if prop is not None and prop.get("type") in ("number", "integer"):
            prop["type"] = [prop["type"], "string"]
            widened = True
    return lenient if widened else None


def methods(class_name: str, coercion: Coercion = "bfcl") -> list[Method]:
    """The class's public methods as tools, described by BFCL's function docs (in the docs' order)."""
    if coercion not in COERCIONS:
        raise ValueError(f"unknown coercion {coercion!r}; known: {', '.join(COERCIONS)}")
    cls = bfcl_class(class_name)
    out = []
    for doc in function_docs(class_name):
        if not callable(getattr(cls, doc["name"], None)):
            raise ValueError(f"BFCL documents {class_name}.{doc['name']}, which the class lacks")
        params = json_schema(doc["parameters"])
        params["type"] = "object"
        params["additionalProperties"] = False
        response = output_schema(class_name, doc)
        accepts = lenient_schema(class_name, doc["name"], params) if coercion == "bfcl" else None
        out.append(Method(doc["name"], doc["description"], params, response, accepts=accepts))
    return out


# --------------------------------------------------------------------------------------------- state
@dataclass(frozen=True)
class BfclForm:
    """A BFCL object's state: `envreg.adapters.objects` snapshots of everything it holds."""

    class_name: str
    fields = {
        "public": "The object's public attributes (what BFCL's checker compares), nested objects in place.",
        "private": "Everything else the object holds: private attributes, dict orders, float markers.",
    }

    @property
    def cls(self) -> type:
        return bfcl_class(self.class_name)

    def new(self) -> Any:
        obj = bfcl_class(self.class_name)()
        if not is_stateless(self.class_name):
            obj._load_scenario({}, long_context=False)
        return obj

    def dump(self, obj: Any) -> dict[str, Any]:
        return dump_object(obj)

    def load(self, data: dict[str, Any]) -> Any:
        try:
            return load_object(data, bfcl_class(self.class_name))
        except SnapshotError:
            raise
        except RecursionError:
            raise SnapshotError("the snapshot nests too deeply") from None


def initial_state(class_name: str, config: dict[str, Any], long_context: bool = False) -> dict[str, Any]:
    """The envreg state of a BFCL object loaded the way BFCL's harness loads it (`_load_scenario`)."""
    obj = bfcl_class(class_name)()
    if not is_stateless(class_name):
        obj._load_scenario(copy.deepcopy(config.get(class_name, {})), long_context=long_context)
    return dump_object(obj)


@cache
def environment(class_name: str, coercion: Coercion = "bfcl") -> Environment:
    """The envreg environment of one BFCL class, built once per process (the replay's local tier)."""
    return build_environment(class_name, coercion)


def build_environment(class_name: str, coercion: Coercion = "bfcl") -> Environment:
    """A new envreg environment of one BFCL class (what images/bfcl-*/env.py serves); `coercion`: see above."""
    cls = bfcl_class(class_name)
    probe = cls()
    description = getattr(probe, "_api_description", "") or (inspect.getdoc(cls) or "").split("\n")[0]
    return class_environment(
        ClassEnvironment(
            name=env_name(class_name),
            form=BfclForm(class_name),
            methods=methods(class_name, coercion),
            version=BFCL_VERSION,
            description=f"{description} (BFCL multi-turn class {class_name}, bfcl-eval {BFCL_VERSION})",
            domain=CLASSES[class_name],
            volatile=VOLATILE,
        )
    )


# --------------------------------------------------------------------------------------------- calls
@dataclass(frozen=True)
class Call:
    """One BFCL call string as a named-argument tool call."""

    source: str
    tool: str
    arguments: dict[str, Any]


def parse_call(source: str, class_names: list[str]) -> tuple[str, Call]:
    """``sort('final_report.pdf')`` -> (``GorillaFileSystem``, sort with ``{"file_name": ...}``).

    The method is looked up on the involved classes (the last one wins, as in BFCL's harness);
    positional arguments get their parameter names from the method's signature.
    """
    try:
        node = ast.parse(source.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"{source!r} is not a call: {exc.msg}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"{source!r} is not a call of a method by name")
    name = node.func.id
    owner = None
    for class_name in class_names:
        if not name.startswith("_") and callable(getattr(bfcl_class(class_name), name, None)):
            owner = class_name
    if owner is None:
        raise ValueError(f"{source!r}: no involved class ({', '.join(class_names)}) has a method {name!r}")
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    except ValueError as exc:
        raise ValueError(f"{source!r}: arguments must be literals ({exc})") from None
    signature = inspect.signature(getattr(bfcl_class(owner), name))
    try:
        bound = signature.bind(None, *args, **kwargs)
    except TypeError as exc:
        raise ValueError(f"{source!r}: {exc}") from None
    arguments = {k: _jsonable(v) for k, v in list(bound.arguments.items())[1:]}
    return owner, Call(source, name, arguments)


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


# ------------------------------------------------------------------------------------------- entries
@dataclass(frozen=True)
class Entry:
    """One multi-turn entry with its ground truth: a list of turns, each a list of call strings."""

    id: str
    category: str
    classes: list[str]
    initial_config: dict[str, Any]
    ground_truth: list[list[str]]
    raw: dict[str, Any]

    @property
    def long_context(self) -> bool:
        test_category = self.id.rsplit("_", 1)[0]  # as BFCL's checker derives it
        return "long_context" in test_category or "composite" in test_category


def load_entries(categories: tuple[str, ...] | list[str] = CATEGORIES) -> list[Entry]:
    """BFCL's multi-turn entries of `categories` (200 each), with their ground truth."""
    root = data_dir()
    out = []
    for category in categories:
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r}; known: {', '.join(CATEGORIES)}")
        prompts = (root / f"BFCL_v4_multi_turn_{category}.json").read_text().splitlines()
        answers = (root / "possible_answer" / f"BFCL_v4_multi_turn_{category}.json").read_text().splitlines()
        truth = {a["id"]: a["ground_truth"] for a in map(json.loads, filter(None, answers))}
        for raw in map(json.loads, filter(None, prompts)):
            out.append(
                Entry(
                    id=raw["id"],
                    category=category,
                    classes=list(raw["involved_classes"]),
                    initial_config=raw.get("initial_config", {}),
                    ground_truth=truth[raw["id"]],
                    raw=raw,
                )
            )
    return out
