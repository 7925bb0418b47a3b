"""The catalog (issue 10): totals and per-environment floors read from the committed manifests, the shared
parameter conventions that let tools chain across environments, the README table, and `envreg search`
finding tools across the built catalog."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any, get_args

import pytest
from conftest import REFERENCE_ENVS, ROOT
from typer.testing import CliRunner

from envreg import catalog
from envreg.adapters.bfcl import CLASSES as BFCL_CLASSES
from envreg.adapters.bfcl import env_name as bfcl_env_name
from envreg.adapters.tau2 import DOMAINS as TAU2_DOMAINS
from envreg.adapters.tau2 import env_name as tau2_env_name
from envreg.canonical import canonical_json
from envreg.cli.main import app
from envreg.env import load_environment, load_scenarios
from envreg.env.vocab import CITIES, Currency
from envreg.manifest import Manifest

runner = CliRunner()
# BFCL's classes served unchanged (envreg.adapters): BFCL's code, not held to the catalog's authoring rules
FOREIGN = {bfcl_env_name(c) for c in BFCL_CLASSES} | {tau2_env_name(d) for d in TAU2_DOMAINS}
CATALOG_ENVS = [name for name in REFERENCE_ENVS if name not in FOREIGN]
MANIFESTS = ROOT / "manifests"

DOMAINS = {"commerce", "finance", "travel", "office", "lifestyle", "research", "utilities"}
CURRENCIES = set(get_args(Currency))
# The reference environments of wave 1 predate issue 10's floors (6 scenarios, 9-14 tools, bounded strings).
WAVE_1 = {"calendar", "airline", "bank"}
# Chains across environments through shared parameter names: an output of the first feeds an input of the second.
CHAINS = [
    ("maps", "hotel", {"city", "lat", "lng", "address"}),
    ("maps", "rides", {"city", "lat", "lng", "address"}),
    ("maps", "weather", {"city"}),
    ("calendar", "email", {"email"}),
    ("calendar", "tasks", {"email"}),
    ("calendar", "weather", {"email"}),
    ("shop", "payments", {"amount", "currency", "email"}),
]


def load_manifests() -> dict[str, Manifest]:
    """The committed manifests of the catalog, each verified; read again only when a file changed (the tests
    here ask for them about sixty times per process). Shared: a test that changes one copies it first."""
    files = sorted(MANIFESTS.glob("*.json"))
    return dict(_verified_manifests(tuple((p, (st := p.stat()).st_mtime_ns, st.st_size) for p in files)))


@cache
def _verified_manifests(files: tuple[tuple[Path, int, int], ...]) -> dict[str, Manifest]:
    out = {}
    for path, _, _ in files:
        manifest = Manifest.loads(path.read_bytes())
        manifest.verify()
        if manifest.name not in FOREIGN:
            out[manifest.name] = manifest
    return out


def schema_nodes(schema: Any) -> list[dict[str, Any]]:
    """Every JSON-Schema object inside `schema` (itself included)."""
    found, stack = [], [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.append(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def property_names(schema: Any) -> set[str]:
    return {name for node in schema_nodes(schema) for name in (node.get("properties") or {})}


def bounded_pattern(pattern: str | None) -> bool:
    """An anchored pattern without unbounded repetition (``*``, ``+``, ``{n,}``) bounds a string's length."""
    if not pattern or not (pattern.startswith("^") and pattern.endswith("$")):
        return False
    plain = re.sub(r"\[(?:\\.|[^\]])*\]", "C", re.sub(r"\\.", "E", pattern))  # drop escapes and [classes]
    return re.search(r"[*+]|\{\d+,\}", plain) is None


def variants(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The non-null alternatives of a (possibly optional) property schema."""
    options = schema.get("anyOf", [schema])
    return [o for o in options if o.get("type") != "null"]


# ---- totals and floors ----------------------------------------------------------------------------------


def test_manifests_are_the_environments_under_images() -> None:
    assert sorted(load_manifests()) == CATALOG_ENVS


def test_catalog_totals_meet_the_issue() -> None:
    """16 environments across the 7 domains with at least 150 tools (issue 10)."""
    manifests = load_manifests()
    domains = {m.domain for m in manifests.values()}
    tools = sum(len(m.tools) for m in manifests.values())
    assert len(manifests) == 16, f"{len(manifests)} environments: {sorted(manifests)}"
    assert domains == DOMAINS, (
        f"missing domains: {sorted(DOMAINS - domains)}, unknown: {sorted(domains - DOMAINS)}"
    )
    assert tools >= 150, f"{tools} tools"


@pytest.mark.parametrize("name", CATALOG_ENVS)
def test_environment_meets_the_catalog_floor(name: str) -> None:
    manifest = load_manifests()[name]
    env = load_environment(name)
    scenarios, rejected = load_scenarios(env.folder)
    assert manifest.domain in DOMAINS
    assert manifest.scenarios == len(scenarios) and manifest.rejected_states == len(rejected)
    failing = [s for sc in scenarios for s in sc.steps if s.expect_error is not None]
    assert failing, "no scenario step checks a failing call"
    assert all(sc.final_state is not None for sc in scenarios), "every scenario checks its final state"
    if name in WAVE_1:
        return
    assert 9 <= len(manifest.tools) <= 14
    assert len(scenarios) >= 6 and len(rejected) >= 3
    assert any(sc.initial_state is None for sc in scenarios), "no scenario starts from the seed"


def unbounded_strings(manifest: Manifest) -> list[str]:
    """Strings in the state and tool arguments without a maxLength that are not enums, dates, times or
    fixed-size patterns."""
    schemas = {"state": manifest.state_schema} | {t.name: t.input_schema for t in manifest.tools}
    found = []
    for where, schema in schemas.items():
        for node in schema_nodes(schema):
            if node.get("type") != "string" or "enum" in node or "const" in node:
                continue
            if node.get("format") in ("date", "date-time", "time") or "maxLength" in node:
                continue
            if not bounded_pattern(node.get("pattern")):
                found.append(f"{where}: {node.get('title') or node}")
    return found


@pytest.mark.parametrize("name", sorted(set(CATALOG_ENVS) - WAVE_1))
def test_every_string_is_bounded(name: str) -> None:
    assert unbounded_strings(load_manifests()[name]) == []


def test_an_unbounded_string_is_named() -> None:
    manifest = load_manifests()["maps"].model_copy(deep=True)
    geocode = next(t for t in manifest.tools if t.name == "geocode")
    geocode.input_schema["properties"]["address"] = {"type": "string", "title": "Address"}
    assert unbounded_strings(manifest) == ["geocode: Address"]


# ---- shared parameters and chains ---------------------------------------------------------------------


def parameter_problems(manifest: Manifest) -> list[str]:
    problems = []
    for tool in manifest.tools:
        for param, schema in (tool.input_schema.get("properties") or {}).items():
            where = f"{manifest.name}.{tool.name}({param})"
            for v in variants(schema):
                kind = v.get("type")
                if param == "city" and not (
                    kind == "string" and set(v.get("enum", [])) <= set(CITIES) and v.get("enum")
                ):
                    problems.append(f"{where}: city must be an enum of the twelve city names, got {v}")
                elif param == "date" and (kind, v.get("format")) != ("string", "date"):
                    problems.append(f"{where}: date must be an ISO date, got {v}")
                elif param in ("email", "address", "query") and kind != "string":
                    problems.append(f"{where}: {param} must be a string, got {v}")
                elif param == "currency" and not (
                    kind == "string" and set(v.get("enum", CURRENCIES)) <= CURRENCIES
                ):
                    problems.append(
                        f"{where}: currency must be an ISO 4217 code of {sorted(CURRENCIES)}, got {v}"
                    )
                elif param == "amount" and kind != "number":
                    problems.append(f"{where}: amount must be a number in major units, got {v}")
                elif param in ("lat", "lng") and not (
                    kind == "number" and v.get("minimum") is not None and v.get("maximum") is not None
                ):
                    problems.append(f"{where}: {param} must be a number of degrees with its range, got {v}")
                elif param == "limit" and not (kind == "integer" and v.get("minimum", 0) >= 1):
                    problems.append(f"{where}: limit must be a positive integer, got {v}")
    return problems


@pytest.mark.parametrize("name", CATALOG_ENVS)
def test_shared_parameters_mean_the_same_everywhere(name: str) -> None:
    assert parameter_problems(load_manifests()[name]) == []


def test_a_parameter_breaking_the_convention_is_named() -> None:
    manifest = load_manifests()["maps"].model_copy(deep=True)
    geocode = next(t for t in manifest.tools if t.name == "geocode")
    geocode.input_schema["properties"]["city"] = {"type": "string", "enum": ["Springfield"]}
    assert parameter_problems(manifest) == [
        "maps.geocode(city): city must be an enum of the twelve city names, got "
        "{'type': 'string', 'enum': ['Springfield']}"
    ]


@pytest.mark.parametrize(("source", "target", "names"), CHAINS, ids=[f"{a}-{b}" for a, b, _ in CHAINS])
def test_tools_chain_across_environments(source: str, target: str, names: set[str]) -> None:
    manifests = load_manifests()
    missing = [n for n in (source, target) if n not in manifests]
    assert not missing, f"{', '.join(missing)} not in the catalog yet"
    produced = set().union(*(property_names(t.output_schema or {}) for t in manifests[source].tools)) & names
    consumed = {
        (t.name, p)
        for t in manifests[target].tools
        for p in (t.input_schema.get("properties") or {})
        if p in produced
    }
    assert produced, f"no output of {source} has any of {sorted(names)}"
    assert consumed, f"no tool of {target} takes {sorted(produced)} as an argument"


# ---- random calls never crash a tool ---------------------------------------------------------------


def known_ids(data: Any) -> list[str]:
    """Every id-looking string (``prefix_0001``) in a state, for calls that should hit real entities."""
    found: set[str] = set()
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str) and re.fullmatch(r"[a-z]+_\d{4,}", node):
            found.add(node)
    return sorted(found)


def random_value(
    schema: dict[str, Any], defs: dict[str, Any], rng: random.Random, ids: list[str], name: str
) -> Any:
    """A value of the schema's shape, biased to the edges (bounds, empty and longest strings, known ids)."""
    if "$ref" in schema:
        return random_value(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, rng, ids, name)
    if "anyOf" in schema:
        return random_value(rng.choice(schema["anyOf"]), defs, rng, ids, name)
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    if kind in ("integer", "number"):
        lo = schema.get("minimum", schema.get("exclusiveMinimum", -5))
        hi = schema.get("maximum", schema.get("exclusiveMaximum", 100))
        value = rng.choice([lo, hi, hi, (lo + hi) / 2, lo + 1, 1])
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        items = schema.get("items", {})
        return [random_value(items, defs, rng, ids, name) for _ in range(rng.choice([0, 1, 2, 3]))]
    if kind == "object":
        required = set(schema.get("required", []))
        props = schema.get("properties", {})
        return {
            k: random_value(v, defs, rng, ids, k)
            for k, v in props.items()
            if k in required or rng.random() < 0.5
        }
    if kind == "string":
        if schema.get("format") == "date":
            return rng.choice(
                ["2026-01-05", "2026-01-04", "2026-01-07", "2025-12-01", "2026-03-31", "1999-01-01"]
            )
        if schema.get("format") == "date-time" or "T" in schema.get("pattern", ""):
            return rng.choice(
                ["2026-01-05T09:00:00", "2026-01-04T23:30:00", "2026-01-06T07:00:00", "2026-01-03T08:45:00"]
            )
        if schema.get("format") == "time" or str(schema.get("pattern", "")).startswith("^\\d{2}:"):
            return rng.choice(["00:00:00", "09:00:00", "23:59:00"])
        options = [
            "",
            " ",
            "x",
            "a" * schema.get("maxLength", 50),
            "Zürich café",
            "alex.morgan@northwind.example",
        ]
        if ids and name.endswith("id"):
            options += ids * 3
        return rng.choice(options)
    return None


@pytest.mark.parametrize("name", CATALOG_ENVS)
def test_random_calls_never_fail_with_an_internal_error(name: str) -> None:
    """Arguments that fit the input schemas, at their edges and in random sequences, get a result or a
    ToolError that says what to fix: never a crash of the tool or a state its own validators refuse."""
    env = load_environment(name)
    rng = random.Random(name)
    instance = env.instance()
    tools = list(env.tools.values())
    ids = known_ids(instance.state.to_json())
    crashes: dict[str, tuple[dict[str, Any], str]] = {}
    for i in range(60 * len(tools)):
        tool = tools[i % len(tools)] if i < 30 * len(tools) else rng.choice(tools)
        if i % 25 == 0:
            ids = known_ids(instance.state.to_json())
        schema = {**tool.input_schema, "type": "object"}
        arguments = random_value(schema, tool.input_schema.get("$defs", {}), rng, ids, "")
        result = instance.call_tool(tool.name, arguments)
        if result.is_error and "internal error" in result.text:
            crashes.setdefault(tool.name, (arguments, result.text[:300]))
    assert not crashes, json.dumps(crashes, ensure_ascii=False, indent=1)


# ---- the README table (`envreg catalog`) --------------------------------------------------------------


def test_readme_catalog_table_is_current() -> None:
    readme = (ROOT / "README.md").read_text()
    table = catalog.markdown(catalog.load(MANIFESTS))
    assert catalog.replace_section(readme, table) == readme, "run `envreg catalog --readme README.md`"
    for name in CATALOG_ENVS:
        assert f"| `{name}` |" in readme


def test_catalog_rows_come_from_the_manifests() -> None:
    result = runner.invoke(app, ["catalog", "--manifests", str(MANIFESTS), "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    for name, m in load_manifests().items():
        assert rows[name]["tools"] == len(m.tools)
        assert rows[name]["scenarios"] == m.scenarios
        assert rows[name]["domain"] == m.domain
        assert m.description.startswith(rows[name]["summary"])


def test_check_catches_a_stale_table_and_rewriting_fixes_it(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    original = (ROOT / "README.md").read_text()
    readme.write_text(original.replace("| `maps` | utilities |", "| `maps` | toys |"))
    args = ["catalog", "--manifests", str(MANIFESTS), "--readme", str(readme)]
    result = runner.invoke(app, [*args, "--check"])
    assert result.exit_code == 1 and "stale" in result.output and "envreg catalog --readme" in result.output
    assert "toys" in readme.read_text(), "--check writes nothing"
    assert runner.invoke(app, args).exit_code == 0
    assert readme.read_text() == original
    assert runner.invoke(app, [*args, "--check"]).exit_code == 0


def test_missing_markers_and_tampered_manifests_are_refused(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# no table here\n")
    result = runner.invoke(app, ["catalog", "--manifests", str(MANIFESTS), "--readme", str(readme)])
    assert result.exit_code == 1 and "catalog markers are missing" in result.output
    assert readme.read_text() == "# no table here\n"

    folder = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, folder)
    data = json.loads((folder / "maps.json").read_text())
    data["description"] = "Something else entirely."
    (folder / "maps.json").write_text(json.dumps(data))
    result = runner.invoke(app, ["catalog", "--manifests", str(folder)])
    assert result.exit_code == 1
    assert "maps.json" in result.output and "does not match its content" in result.output


def test_summary_is_the_first_sentence() -> None:
    assert (
        catalog.summary_line("A bank: accounts, cards.\nMoney is integer cents.")
        == "A bank: accounts, cards."
    )
    assert (
        catalog.summary_line("Maps (e.g. Paris) by Jane Q. Public. More.")
        == "Maps (e.g. Paris) by Jane Q. Public."
    )


# ---- envreg search across the built catalog -----------------------------------------------------------


@pytest.mark.docker
def test_search_finds_each_tool_in_the_right_environments_after_build(
    docker_engine, envreg_home: Path
) -> None:
    """`envreg build` records the images in the local index; a search for any tool name finds exactly the
    environments that have a tool (or a name or description) containing it."""
    from envreg.registry.search import search

    proc = subprocess.run(
        [sys.executable, "-m", "envreg.cli.main", "build", "--json", *CATALOG_ENVS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, f"envreg build failed:\n{proc.stdout}\n{proc.stderr}"
    manifests = load_manifests()
    for name, manifest in manifests.items():
        for tool in manifest.tools:
            hits = search(tool.name)
            found = {h.name for h in hits if h.where == "local"}
            text = tool.name.lower()
            expected = {
                other
                for other, m in manifests.items()
                if text in m.name.lower()
                or text in m.description.lower()
                or any(text in t.name.lower() or text in t.description.lower() for t in m.tools)
            }
            assert found == expected, (
                f"search {tool.name!r}: found {sorted(found)}, expected {sorted(expected)}"
            )
            hit = next(h for h in hits if h.name == name)
            assert f"tool:{tool.name}" in hit.matched and hit.tools == [t.name for t in manifest.tools]

    table = subprocess.run(
        [sys.executable, "-m", "envreg.cli.main", "search", "get_directions"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()[1:] if line.strip()]
    assert [(r[0], r[2], r[3]) for r in rows] == [("maps", "local", "tool:get_directions")]


@pytest.mark.parametrize("name", REFERENCE_ENVS)
def test_results_depend_on_the_canonical_state_only(name: str) -> None:
    """The same state with its keys in another order (as a snapshot restored from canonical JSON has
    them) gives the same results: no tool may list a dict in its insertion order."""
    env = load_environment(name)
    for scenario in load_scenarios(env.folder)[0]:
        if scenario.initial_state is None:
            continue
        as_written = env.instance(scenario.initial_state)
        sorted_keys = env.instance(json.loads(canonical_json(scenario.initial_state)))
        for i, step in enumerate(scenario.steps):
            a = as_written.call_tool(step.tool, step.arguments)
            b = sorted_keys.call_tool(step.tool, step.arguments)
            assert (a.is_error, a.text) == (b.is_error, b.text), f"{scenario.name}, step {i} ({step.tool})"
