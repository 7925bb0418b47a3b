"""Run the checks: one runtime and one TypeScript worker for the whole run, every check of an image at once
(they share the image's containers and recorded runs through its `Context`), `jobs` images at a time."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack

import anyio

from envreg.errors import EnvregError
from envreg.runtime import Runtime
from envreg.validate.context import Context, NoContainer
from envreg.validate.core import CHECKS, Check, CheckResult, EnvReport, failed, select, skipped
from envreg.validate.target import Target, resolve
from envreg.validate.ts import SchemaWorker

CHECK_TIMEOUT = 600.0

Listener = Callable[[EnvReport, CheckResult | None], None]
"""Told of every finished check (`CheckResult`) and every finished image (None)."""


async def validate(
    targets: Sequence[str],
    *,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    jobs: int = 1,
    listener: Listener | None = None,
    runtime: Runtime | None = None,
    worker: SchemaWorker | None = None,
) -> list[EnvReport]:
    """Validate every target (an environment folder, a name or an image reference); one report each, in order.

    `only` / `skip` select checks by name pattern (`envreg.validate.core.select`); skipped checks are
    reported as skipped. Raises `ValueError` for a pattern that matches no check. A `runtime` or a
    `worker` given is used (and left open) instead of new ones.
    """
    checks, dropped = select(only, skip)
    from envreg.docker_engine import docker_client

    client = await anyio.to_thread.run_sync(docker_client)
    reports: list[EnvReport] = [EnvReport(t) for t in targets]
    limiter = anyio.Semaphore(max(1, jobs))

    async def one(rt: Runtime, worker: SchemaWorker, i: int) -> None:
        async with limiter:
            await validate_one(rt, client, worker, reports[i], checks, dropped, listener)

    try:
        async with AsyncExitStack() as stack:
            rt = runtime or await stack.enter_async_context(Runtime())
            w = worker or await stack.enter_async_context(SchemaWorker())
            async with anyio.create_task_group() as tg:
                for i in range(len(targets)):
                    tg.start_soon(one, rt, w, i)
    finally:
        client.close()
    return reports


async def validate_one(
    rt: Runtime,
    client: object,
    worker: SchemaWorker,
    report: EnvReport,
    checks: list[Check],
    dropped: list[Check],
    listener: Listener | None = None,
) -> EnvReport:
    """Fill `report` with every check of one target."""
    t0 = time.perf_counter()
    try:
        target = Target.parse(report.target)
        image = await anyio.to_thread.run_sync(resolve, client, target)
    except Exception as exc:  # an environment folder that does not load, an image that cannot be used
        report.error = str(exc) if isinstance(exc, EnvregError) else f"{type(exc).__name__}: {exc}"
        report.seconds = time.perf_counter() - t0
        if listener:
            listener(report, None)
        return report
    report.name, report.version, report.image_id = image.name, image.version, image.id
    report.manifest_digest = image.manifest_label
    ctx = Context(rt, target, image, worker)
    results: dict[str, CheckResult] = {
        c.name: CheckResult.of(c.name, skipped("skipped on request (--skip)"), 0.0) for c in dropped
    }

    async def run(c: Check) -> None:
        started = time.perf_counter()
        try:
            with anyio.fail_after(CHECK_TIMEOUT):
                outcome = await c.fn(ctx)
        except TimeoutError:
            outcome = failed(f"the check did not finish within {CHECK_TIMEOUT:.0f}s")
        except NoContainer as exc:
            outcome = failed(str(exc))
        except Exception as exc:
            outcome = failed(f"the check could not run: {type(exc).__name__}: {exc}")
        results[c.name] = CheckResult.of(c.name, outcome, time.perf_counter() - started)
        if listener:
            listener(report, results[c.name])

    try:
        async with anyio.create_task_group() as tg:
            for c in checks:
                tg.start_soon(run, c)
    finally:
        await ctx.close()
    report.results = [results[name] for name in CHECKS if name in results]
    report.error = ctx.start_error
    report.seconds = time.perf_counter() - t0
    if listener:
        listener(report, None)
    return report
