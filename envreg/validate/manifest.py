"""Manifest checks: the manifest is sound, matches the image's label and the shipped source, and is what a real
MCP client sees (both protocol eras), before and after a restart."""

from __future__ import annotations

from typing import Any

import anyio

from envreg.validate.context import Context, Listing
from envreg.validate.core import Outcome, check, failed, passed, skipped, verdict
from envreg.validate.jsondiff import describe
from envreg.validate.mcp_clients import TOOL_FIELDS


@check("manifest.valid", "The image's /env/manifest.json is a manifest whose digest covers its content.")
async def manifest_valid(ctx: Context) -> Outcome:
    if ctx.manifest is None:
        return failed(ctx.manifest_problem or "no manifest")
    m = ctx.manifest
    problems = []
    try:
        m.verify()
    except ValueError as exc:
        problems.append(str(exc))
    if m.name != ctx.image.name or m.version != ctx.image.version:
        problems.append(
            f"the manifest is {m.name}:{m.version} but the image's labels say {ctx.image.name}:{ctx.image.version}"
        )
    if ctx.scenarios_problem:
        problems.append(ctx.scenarios_problem)
    elif (m.scenarios, m.rejected_states) != (len(ctx.scenarios), len(ctx.rejected)):
        problems.append(
            f"the manifest counts {m.scenarios} scenarios and {m.rejected_states} rejected states, the image "
            f"ships {len(ctx.scenarios)} and {len(ctx.rejected)}"
        )
    evidence = [
        f"{m.name}:{m.version}, {len(m.tools)} tools, {m.scenarios} scenarios, {m.rejected_states} rejected states",
        f"manifest digest {m.digest}",
    ]
    return verdict(problems, "manifest is sound and self-consistent", "manifest is not sound", evidence)


@check("manifest.label", "The manifest digest equals the image's io.envreg.manifest.digest label.")
async def manifest_label(ctx: Context) -> Outcome:
    if ctx.manifest is None:
        return failed(ctx.manifest_problem or "no manifest")
    label, recorded, actual = ctx.image.manifest_label, ctx.manifest.digest, ctx.manifest.body_digest()
    evidence = [f"label {label}", f"manifest {recorded}"]
    if label != recorded:
        return failed("the image's label does not match its manifest", evidence)
    if label != actual:
        return failed(
            f"the label matches the recorded digest, but the manifest's content hashes to {actual}", evidence
        )
    return passed("label matches the manifest", evidence)


@check(
    "manifest.source",
    "The manifest's source digest covers every file shipped under /env (and, for a folder, the folder's files).",
)
async def manifest_source(ctx: Context) -> Outcome:
    if ctx.manifest is None:
        return failed(ctx.manifest_problem or "no manifest")
    try:
        from envreg.registry.engine import verify_image_source
        from envreg.source import source_differences, source_hashes, summarize
    except ImportError:
        return skipped(
            "this envreg's manifests record no source digests (needs manifest format 2: digests.source)"
        )
    from envreg.docker_engine import docker_client
    from envreg.errors import EnvregError

    m = ctx.manifest_json
    files: dict[str, str] = m.get("source_files") or {}
    if not files or not (m.get("digests") or {}).get("source"):
        return failed("the manifest records no source files (source_files, digests.source)")
    problems = []
    try:
        await anyio.to_thread.run_sync(
            lambda: verify_image_source(docker_client(), ctx.image.id, ctx.target.ref)
        )
    except EnvregError as exc:
        problems.append(str(exc))
    evidence = [f"{len(files)} files under /env covered by {m['digests']['source']}"]
    if "env.py" not in files:
        problems.append("env.py is not among the manifest's source files")
    if ctx.target.folder is not None:
        local = source_hashes(ctx.target.folder)
        drift = source_differences(files, local)
        if drift:
            problems.append(
                f"the image was not built from {ctx.target.folder} as it is now ({summarize(drift)}): "
                f"rebuild it with `envreg build {ctx.image.name}`"
            )
        else:
            evidence.append(f"{ctx.target.folder} holds exactly these files")
    return verdict(problems, "the source digest covers what the image runs", "source mismatch", evidence)


@check(
    "manifest.image",
    "The whole image (every layer and its config, through the image ID) is the one this host records for its "
    "name and version: the local index, else envreg.lock.",
)
async def manifest_image(ctx: Context) -> Outcome:
    from envreg.errors import EnvregError
    from envreg.runtime.images import recorded_as

    try:
        how = recorded_as(ctx.image.id, ctx.image.labels, ctx.target.ref)
    except EnvregError as exc:
        return failed(str(exc))
    if how is None:
        return skipped(
            f"this host records no image for {ctx.image.name}:{ctx.image.version}: only /env is verified "
            "(record it with `envreg build`, `envreg pull` or `envreg load`)"
        )
    return passed(f"image {ctx.image.id[:19]} is what {how} records", [f"image ID {ctx.image.id}"])


def tool_drift(expected: list[dict[str, Any]], served: list[dict[str, Any]], what: str) -> list[str]:
    """How the `served` tool list differs from the `expected` one, one line per tool and field."""
    problems = []
    want = {t["name"]: t for t in expected}
    have = {t["name"]: t for t in served}
    for name in have.keys() - want.keys():
        problems.append(f"{what}: tool {name!r} is served but not in the manifest")
    for name in want.keys() - have.keys():
        problems.append(f"{what}: tool {name!r} is in the manifest but not served")
    for name in want.keys() & have.keys():
        for key in TOOL_FIELDS:
            left, right = want[name].get(key), have[name].get(key)
            if left != right:
                diff = describe(right, left, ("served", "manifest")) if key != "description" else ""
                problems.append(
                    f"{what}: tool {name!r}: {key} differs from the manifest" + (f" ({diff})" if diff else "")
                )
    common = [n for n in have if n in want]
    if not problems and common != [n for n in want if n in have]:
        problems.append(f"{what}: tools are served in another order than the manifest's: {', '.join(have)}")
    return sorted(problems)


def _manifest_tools(ctx: Context) -> list[dict[str, Any]]:
    return [{k: t[k] for k in TOOL_FIELDS if k in t} for t in ctx.tools.values()]


def _compare(ctx: Context, listings: list[Listing], where: str) -> tuple[list[str], list[str]]:
    expected = _manifest_tools(ctx)
    problems, evidence = [], []
    for listing in listings:
        label = f"{where}, protocol {listing.era}"
        if listing.protocol != listing.era:
            problems.append(f"{label}: the client negotiated protocol {listing.protocol}")
        problems += tool_drift(expected, listing.tools, label)
        evidence.append(f"{label}: {len(listing.tools)} tools listed by the mcp SDK client")
    return problems, evidence


@check(
    "manifest.tools",
    "A real MCP client's tools/list equals the manifest (names, schemas, annotations), both eras.",
)
async def manifest_tools(ctx: Context) -> Outcome:
    if ctx.manifest is None:
        return failed(ctx.manifest_problem or "no manifest")
    problems, evidence = _compare(ctx, await ctx.listings("main"), "container 1")
    return verdict(
        problems,
        "tools/list equals the manifest in both eras",
        "tools/list drifts from the manifest",
        evidence,
    )


@check("manifest.restart", "A fresh container of the image lists the same tools, in the same order.")
async def manifest_restart(ctx: Context) -> Outcome:
    if ctx.manifest is None:
        return failed(ctx.manifest_problem or "no manifest")
    problems, evidence = _compare(ctx, await ctx.listings("second"), "container 2")
    return verdict(
        problems,
        "a fresh process lists the same tools",
        "a fresh container's tools/list drifts from the manifest",
        evidence,
    )
