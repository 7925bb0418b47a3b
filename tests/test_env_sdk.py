"""The authoring SDK: schemas from code, transactional tools, deterministic state."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated

import pytest
from conftest import COUNTER
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, ValidationError, model_validator

from envreg.canonical import canonical_json, canonical_value, digest
from envreg.env import Environment, EnvState, ToolError, UnknownToolError, load_environment
from envreg.env.scenario import states_equal, strip_volatile, without_volatile


class Item(BaseModel):
    id: str
    name: str
    qty: int

    @model_validator(mode="after")
    def quantity_is_not_negative(self) -> Item:
        if self.qty < 0:
            raise ValueError(f"item {self.id} has a negative quantity")
        return self


class ShopState(EnvState):
    items: dict[str, Item] = {}

    @model_validator(mode="after")
    def at_most_three_items(self) -> ShopState:
        """A whole-state invariant: checked when a state is loaded, and after each call with check_state="full"."""
        if len(self.items) > 3:
            raise ValueError("the shop holds at most 3 items")
        return self


def make_env(check_state: bool | str = True) -> Environment:
    env = Environment(
        "shop",
        ShopState,
        version="0.1.0",
        domain="retail",
        description="A tiny shop.",
        check_state=check_state,
    )

    @env.tool
    def add_item(state: ShopState, name: str, qty: Annotated[int, Field(ge=0)] = 1) -> Item:
        """Add an item to the shop.

        Args:
            name: What the item is called.
            qty: How many are in stock.
        """
        item = Item(id=state.new_id("itm"), name=name, qty=qty)
        state.items[item.id] = item
        return item

    @env.tool(destructive=True)
    def take(state: ShopState, item_id: str, qty: int) -> Item:
        """Take items out of stock.

        Args:
            item_id: The id that add_item returned.
            qty: How many to take.
        """
        if item_id not in state.items:
            raise ToolError(f"no item {item_id!r}; list items first")
        state.items[item_id].qty -= qty
        state.now = datetime(2030, 1, 1)
        return state.items[item_id]

    @env.tool(read_only=True)
    def count(state: ShopState) -> int:
        """How many distinct items there are."""
        return len(state.items)

    return env


def test_schemas_come_from_hints_and_docstrings() -> None:
    env = make_env()
    add = {t["name"]: t for t in env.list_tools()}["add_item"]
    assert add["description"] == "Add an item to the shop."
    props = add["inputSchema"]["properties"]
    assert props["name"]["description"] == "What the item is called."
    assert props["qty"]["minimum"] == 0 and props["qty"]["default"] == 1
    assert add["inputSchema"]["required"] == ["name"]
    assert add["inputSchema"]["additionalProperties"] is False
    assert add["outputSchema"]["properties"]["qty"]["type"] == "integer"
    count = {t["name"]: t for t in env.list_tools()}["count"]
    assert count["outputSchema"]["properties"]["result"]["type"] == "integer"
    assert count["annotations"] == {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
    }
    take = {t["name"]: t for t in env.list_tools()}["take"]
    assert take["annotations"]["destructiveHint"] is True and take["annotations"]["readOnlyHint"] is False


def test_a_tool_without_docstring_or_parameter_description_is_refused() -> None:
    env = make_env()
    with pytest.raises(TypeError, match="docstring"):

        @env.tool
        def nodoc(state: ShopState) -> None:
            pass

    with pytest.raises(TypeError, match="describe parameter 'x'"):

        @env.tool
        def undocumented(state: ShopState, x: int) -> None:
            """Does something."""


def test_a_tool_builds_its_models_on_first_use_and_once() -> None:
    """A server starts without building every tool's pydantic models and schemas: a call builds its own
    tool's, a listing builds them all, and nothing is built twice."""
    env = make_env()
    assert all(tool.built is None for tool in env.tools.values())
    instance = env.instance()
    assert instance.call_tool("add_item", {"name": "pen"}).error is None
    assert [name for name, tool in env.tools.items() if tool.built is not None] == ["add_item"]
    built = env.tools["add_item"].built
    env.list_tools()
    assert all(tool.built is not None for tool in env.tools.values())
    assert env.tools["add_item"].built is built


def test_a_failing_tool_leaves_the_state_byte_identical() -> None:
    env = make_env()
    instance = env.instance()
    item = instance.call_tool("add_item", {"name": "pen", "qty": 2}).value
    before = instance.state.canonical()
    missing = instance.call_tool("take", {"item_id": "itm_9999", "qty": 1})
    assert missing.is_error and "itm_9999" in missing.text
    # passes the tool, then fails the changed item's own validator: rolled back too, clock included
    negative = instance.call_tool("take", {"item_id": item["id"], "qty": 5})
    assert negative.is_error and "negative quantity" in negative.text
    assert instance.state.canonical() == before


def test_whole_state_validators_run_on_load_and_after_calls_when_asked() -> None:
    state = {"items": {f"itm_{i:04d}": {"id": f"itm_{i:04d}", "name": "x", "qty": 1} for i in range(4)}}
    with pytest.raises(ValidationError, match="at most 3 items"):
        make_env().instance(state)
    changed_only, full = make_env().instance(), make_env(check_state="full").instance()
    for _ in range(3):
        assert not changed_only.call_tool("add_item", {"name": "pen"}).is_error
        assert not full.call_tool("add_item", {"name": "pen"}).is_error
    before = full.state.canonical()
    refused = full.call_tool("add_item", {"name": "pen"})
    assert refused.is_error and "at most 3 items" in refused.text and full.state.canonical() == before
    # by default a call validates what it changed, not the whole state: O(change), not O(state)
    assert not changed_only.call_tool("add_item", {"name": "pen"}).is_error


def test_bad_arguments_are_error_results_that_name_the_argument() -> None:
    instance = make_env().instance()
    before = instance.state.sha256()
    result = instance.call_tool("add_item", {"name": "pen", "qty": -1, "colour": "red"})
    assert result.is_error
    assert "qty" in result.text and "colour: unexpected argument" in result.text
    missing = instance.call_tool("add_item", {})
    assert "name: missing required argument" in missing.text
    assert instance.state.sha256() == before


def test_unknown_tool_raises() -> None:
    with pytest.raises(UnknownToolError, match="no_such"):
        make_env().instance().call_tool("no_such", {})


def test_ids_and_results_are_deterministic() -> None:
    env = make_env()
    runs = []
    for _ in range(2):
        instance = env.instance()
        for name in ("a", "b", "c"):
            instance.call_tool("add_item", {"name": name})
        runs.append(instance.state.sha256())
    assert runs[0] == runs[1]
    assert list(instance.state.items) == ["itm_0001", "itm_0002", "itm_0003"]


def test_mcp_result_shape() -> None:
    instance = make_env().instance()
    ok = instance.call_tool("count", {}).to_mcp()
    assert ok == {
        "content": [{"type": "text", "text": "0"}],
        "isError": False,
        "structuredContent": {"result": 0},
    }
    err = instance.call_tool("take", {"item_id": "x", "qty": 1}).to_mcp()
    assert err["isError"] is True and "structuredContent" not in err


def test_canonical_json_is_stable() -> None:
    assert canonical_json({"b": 1, "a": [1.0, 2.5, "é"]}) == '{"a":[1,2.5,"é"],"b":1}'
    assert digest({"a": 1, "b": 2}) == digest({"b": 2, "a": 1})
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_canonical_value_is_what_canonical_json_reads_back_and_a_fresh_copy() -> None:
    state = {"b": (1.0, {"c": [2.5, None, True]}), 7: "x"}
    value = canonical_value(state)
    assert value == json.loads(canonical_json(state)) == {"b": [1, {"c": [2.5, None, True]}], "7": "x"}
    assert type(value["b"][0]) is int and canonical_json(value, normalized=True) == canonical_json(state)
    value["b"][1]["c"].clear()
    assert state["b"][1]["c"] == [2.5, None, True], "the copy shares no container with the state"
    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        canonical_value({"tags": {"a"}})


def test_state_validation_errors_are_raised_and_parse_round_trips() -> None:
    env = load_environment(COUNTER)
    with pytest.raises(ValidationError):
        env.parse_state({"value": "many"})
    with pytest.raises(ValidationError):
        env.parse_state({"value": 1, "unexpected": True})
    state = env.parse_state({"value": 3})
    assert env.parse_state(json.loads(state.canonical())).sha256() == state.sha256()


def test_volatile_paths_are_ignored_by_state_equivalence() -> None:
    a = {"now": "2026-01-01T00:00:00", "items": [{"id": 1, "seen": 5}, {"id": 2, "seen": 6}]}
    b = {"now": "2027-01-01T00:00:00", "items": [{"id": 1, "seen": 7}, {"id": 2, "seen": 8}]}
    assert not states_equal(a, b)
    assert states_equal(a, b, ["now", "items.*.seen"])
    assert strip_volatile(a, ["items.*.seen"])["items"] == [{"id": 1}, {"id": 2}]


@pytest.mark.parametrize(
    "paths",
    [
        [],
        ["now"],
        ["items.*.seen"],
        ["items.*"],
        ["tags"],
        ["missing.x", "now.x"],
        ["now", "items.*.seen", "*"],
    ],
)
def test_a_state_without_volatile_paths_is_strip_volatile_without_copying_the_rest(paths) -> None:
    """The comparisons' form of `strip_volatile`: the same JSON, the input left as it was, and only what lies
    on a path copied."""
    state = {
        "now": "2026-01-01T00:00:00",
        "items": [{"id": 1, "seen": 5}, {"id": 2, "seen": 6, "tags": ["a"]}],
        "tags": {"x": {"n": 1.0}},
        "shared": {"deep": [1, 2]},
    }
    before = json.dumps(state, sort_keys=True)
    stripped = without_volatile(state, paths)
    assert canonical_json(stripped) == canonical_json(strip_volatile(state, paths))
    assert json.dumps(state, sort_keys=True) == before
    if "*" not in paths:
        assert stripped["shared"] is state["shared"]


class _Item(BaseModel):
    id: str


class _Tables(EnvState):
    items: dict[str, _Item] = Field(default_factory=dict)


def test_id_problems_names_misfiled_foreign_and_colliding_ids() -> None:
    from envreg.env import id_problems

    state = _Tables(id_counters={"itm": 2}, items={"itm_0001": _Item(id="itm_0001")})
    assert id_problems(state, {"itm": state.items}) == []
    state.items = {
        "itm_0001": _Item(id="itm_0002"),
        "itm_0003": _Item(id="itm_0003"),
        "x": _Item(id="evt_0001"),
    }
    problems = id_problems(state, {"itm": state.items})
    assert problems == [
        "key 'itm_0001' holds 'itm_0002': each entry must be stored under its own id",
        "id itm_0003 is beyond id_counters['itm']=2: new ids would collide",
        "key 'x' holds 'evt_0001': each entry must be stored under its own id",
        "id 'evt_0001' must look like itm_0001",
    ]


def test_text_matching_ignores_case_accents_and_punctuation() -> None:
    from envreg.env import fold, matches, words

    assert fold("Café Zürich") == "cafe zurich"
    assert words("Sobrino de Botín, Calle 17") == ["sobrino", "de", "botin", "calle", "17"]
    assert matches("botin", "Sobrino de Botín")
    assert matches("art mus", "Art Institute", "museum")  # every word starts a word of some field
    assert not matches("art gallery", "Art Institute", "museum")
    assert not matches("useum", "museum")  # prefixes, not substrings
    assert matches("", "anything")


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_folding_is_case_and_accent_blind_on_any_text(text: str) -> None:
    """`fold` takes a short way for ASCII text; on any text it is NFKD without combining marks, casefolded."""
    import unicodedata

    from envreg.env import fold

    decomposed = unicodedata.normalize("NFKD", text)
    assert fold(text) == "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
