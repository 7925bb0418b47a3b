"""What a check is and what it reports: a named coroutine over a `Context`, giving pass / fail / skip with
the evidence (one line per fact a reviewer can act on)."""

from __future__ import annotations

import fnmatch
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envreg.validate.context import Context

MAX_EVIDENCE = 20
"""Evidence lines kept per check (the rest are counted)."""


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


@dataclass
class Outcome:
    """What a check found: its status, a one-line summary and the evidence behind it."""

    status: Status
    summary: str
    evidence: list[str] = field(default_factory=list)


def passed(summary: str, evidence: Iterable[str] = ()) -> Outcome:
    return Outcome(Status.PASS, summary, list(evidence))


def failed(summary: str, evidence: Iterable[str] = ()) -> Outcome:
    return Outcome(Status.FAIL, summary, list(evidence))


def skipped(summary: str, evidence: Iterable[str] = ()) -> Outcome:
    return Outcome(Status.SKIP, summary, list(evidence))


def verdict(problems: list[str], ok: str, bad: str, evidence: Iterable[str] = ()) -> Outcome:
    """Pass with `ok` when there are no problems, else fail with `bad` and the problems first."""
    if problems:
        return failed(bad, [*problems, *evidence])
    return passed(ok, evidence)


CheckFn = Callable[["Context"], Awaitable[Outcome]]


@dataclass(frozen=True)
class Check:
    """A named check: ``<group>.<name>``, what it proves, and the coroutine that proves it."""

    name: str
    description: str
    fn: CheckFn

    @property
    def group(self) -> str:
        return self.name.partition(".")[0]


GROUPS = ("manifest", "schemas", "scenarios", "state", "sandbox", "budgets")
CHECKS: dict[str, Check] = {}
"""Every check, in the order they are reported: by group (`GROUPS`), then in registration order."""


def check(name: str, description: str) -> Callable[[CheckFn], CheckFn]:
    """Register a check under `name` (``group.check``)."""

    def register(fn: CheckFn) -> CheckFn:
        if name in CHECKS:
            raise ValueError(f"check {name!r} is registered twice")
        new = Check(name, description, fn)
        if new.group not in GROUPS:
            raise ValueError(f"check {name!r}: its group is not one of {', '.join(GROUPS)}")
        ordered = sorted([*CHECKS.values(), new], key=lambda c: GROUPS.index(c.group))  # stable
        CHECKS.clear()
        CHECKS.update((c.name, c) for c in ordered)
        return fn

    return register


def select(only: Iterable[str] = (), skip: Iterable[str] = ()) -> tuple[list[Check], list[Check]]:
    """(checks to run, checks skipped on request: reported as skipped). Patterns are shell-style
    (``state.*``, ``*.determinism``) or a group name (``sandbox``); checks that `only` leaves out are
    not reported at all. Raises `ValueError` naming a pattern that matches no check."""
    only, skip = list(only), list(skip)

    def matches(pattern: str) -> set[str]:
        found = {n for n in CHECKS if fnmatch.fnmatchcase(n, pattern) or CHECKS[n].group == pattern}
        if not found:
            raise ValueError(f"{pattern!r} matches no check (checks: {', '.join(CHECKS)})")
        return found

    wanted = set().union(*(matches(p) for p in only)) if only else set(CHECKS)
    unwanted = set().union(*(matches(p) for p in skip)) if skip else set()
    run = [c for n, c in CHECKS.items() if n in wanted and n not in unwanted]
    dropped = [c for n, c in CHECKS.items() if n in wanted and n in unwanted]
    return run, dropped


@dataclass
class CheckResult:
    """One check's outcome for one image, with its wall time."""

    name: str
    status: Status
    summary: str
    evidence: list[str]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": str(self.status),
            "summary": self.summary,
            "evidence": self.evidence,
            "seconds": round(self.seconds, 3),
        }

    @classmethod
    def of(cls, name: str, outcome: Outcome, seconds: float) -> CheckResult:
        evidence = outcome.evidence
        if len(evidence) > MAX_EVIDENCE:
            evidence = [*evidence[:MAX_EVIDENCE], f"... and {len(evidence) - MAX_EVIDENCE} more"]
        return cls(name, outcome.status, outcome.summary, evidence, seconds)


@dataclass
class EnvReport:
    """Every check's result for one environment image."""

    target: str
    name: str | None = None
    version: str | None = None
    image_id: str | None = None
    manifest_digest: str | None = None
    results: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    """Why the image could not be checked (not found, not loadable), or could not be started: then the
    checks that need a container failed saying so."""

    @property
    def passed(self) -> bool:
        return self.error is None and all(r.status is not Status.FAIL for r in self.results)

    def count(self, status: Status) -> int:
        return sum(r.status is status for r in self.results)

    @property
    def label(self) -> str:
        return f"{self.name}:{self.version}" if self.name and self.version else self.target

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "name": self.name,
            "version": self.version,
            "image_id": self.image_id,
            "manifest_digest": self.manifest_digest,
            "passed": self.passed,
            "error": self.error,
            "seconds": round(self.seconds, 3),
            "counts": {str(s): self.count(s) for s in Status},
            "checks": [r.to_json() for r in self.results],
        }
