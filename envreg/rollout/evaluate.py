"""`envreg eval`'s core: k trials per task, pass@1 and pass^k, tables by environment and domain,
a results folder that a run resumes from, JSON and JUnit reports.

The folder holds ``eval.json`` (what was run: model, endpoint, tasks, trials, tier, sampling) and
``records.jsonl`` (one `EpisodeRecord` per finished episode, appended as each ends). A run on a folder
that has both plays only the (task, trial) pairs it lacks; a folder of another configuration is refused.

pass^k is tau2's: for a task with n trials of which c passed, C(c, k) / C(n, k), averaged over the
tasks; pass^1 is pass@1, the mean share of passing trials.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from envreg.canonical import canonical_json, sha256_hex
from envreg.errors import Conflict
from envreg.rollout.record import EpisodeRecord
from envreg.rollout.task import Task, domain_of

FORMAT = "envreg.eval"
VERSION = 1
RECORDS = "records.jsonl"
CONFIG = "eval.json"


class EvalConfig(BaseModel):
    """What an eval ran; a results folder belongs to exactly one."""

    model: str
    base_url: str
    isolation: str
    trials: int = Field(ge=1)
    sampling: dict[str, Any] = Field(default_factory=dict)
    tasks_sha256: str = Field(description="sha256 of the canonical task list.")
    tasks: int


def tasks_digest(tasks: Sequence[Task]) -> str:
    return sha256_hex(canonical_json([t.model_dump(mode="json") for t in tasks]))


class ResultsFolder:
    """``eval.json`` + ``records.jsonl`` under `path`; `open` checks the configuration, keeps what is done."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.records: dict[tuple[str, int], EpisodeRecord] = {}

    def open(self, config: EvalConfig) -> ResultsFolder:
        self.path.mkdir(parents=True, exist_ok=True)
        config_path = self.path / CONFIG
        if config_path.exists():
            old = EvalConfig.model_validate_json(config_path.read_text())
            if old != config:
                changed = [k for k in EvalConfig.model_fields if getattr(old, k) != getattr(config, k)]
                raise Conflict(
                    f"{self.path} holds an eval of another configuration ({', '.join(changed)} differ)",
                    "give another --out folder, or --restart to discard its records",
                )
        else:
            config_path.write_text(config.model_dump_json(indent=1) + "\n")
        self.records = {(r.task_id, r.trial): r for r in self._read()}
        return self

    def _read(self) -> list[EpisodeRecord]:
        path = self.path / RECORDS
        if not path.exists():
            return []
        records, good = [], 0
        text = path.read_text()
        for line in text.splitlines(keepends=True):
            try:
                records.append(EpisodeRecord.model_validate_json(line))
            except ValidationError:
                break  # a line cut by an interrupted run: it and anything after it are played again
            good += len(line.encode())
        if good != len(text.encode()):
            with path.open("r+b") as f:
                f.truncate(good)
        return records

    def add(self, record: EpisodeRecord) -> None:
        self.records[(record.task_id, record.trial)] = record
        with (self.path / RECORDS).open("a") as f:
            f.write(record.model_dump_json() + "\n")

    def restart(self) -> None:
        for name in (RECORDS, CONFIG):
            (self.path / name).unlink(missing_ok=True)

    def missing(self, tasks: Iterable[Task], trials: int) -> list[tuple[Task, int]]:
        return [(t, k) for t in tasks for k in range(trials) if (t.id, k) not in self.records]


def pass_hat(n: int, c: int, k: int) -> float:
    """tau2's pass^k for one task: the chance that k trials drawn from its n all passed."""
    return math.comb(c, k) / math.comb(n, k) if n >= k else float("nan")


def _group(tasks: Sequence[Task], records: dict[tuple[str, int], EpisodeRecord], trials: int) -> dict:
    per_task = {}
    for task in tasks:
        done = [records[(task.id, k)] for k in range(trials) if (task.id, k) in records]
        per_task[task.id] = done
    return per_task


def _row(label: str, task_records: list[list[EpisodeRecord]], trials: int) -> dict[str, Any]:
    complete = [rs for rs in task_records if len(rs) == trials]
    episodes = [r for rs in task_records for r in rs]
    row: dict[str, Any] = {
        "name": label,
        "tasks": len(task_records),
        "episodes": len(episodes),
        "errors": sum(1 for r in episodes if r.error),
        "mean_reward": _mean([r.reward.reward for r in episodes if r.reward is not None]),
        "pass@1": _mean([sum(r.passed for r in rs) / len(rs) for rs in task_records if rs]),
    }
    for k in range(1, trials + 1):
        row[f"pass^{k}"] = _mean([pass_hat(len(rs), sum(r.passed for r in rs), k) for rs in complete])
    return row


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def summarize(
    tasks: Sequence[Task],
    records: dict[tuple[str, int], EpisodeRecord],
    config: EvalConfig,
    seconds: float = 0.0,
) -> dict[str, Any]:
    """The whole eval, by environment and by domain, as JSON."""
    per_task = _group(tasks, records, config.trials)
    by_env: dict[str, list] = defaultdict(list)
    by_domain: dict[str, list] = defaultdict(list)
    domains: dict[str, str] = {}
    for task in tasks:
        envs = "+".join(task.envs)
        by_env[envs].append(per_task[task.id])
        for env in task.envs:
            domains.setdefault(env, task.domains.get(env) or domain_of(env) or "-")
        by_domain["+".join(sorted({domains[e] for e in task.envs}))].append(per_task[task.id])
    return {
        "format": FORMAT,
        "version": VERSION,
        "config": config.model_dump(),
        "seconds": round(seconds, 3),
        "overall": _row("all", list(per_task.values()), config.trials),
        "environments": [_row(k, v, config.trials) for k, v in sorted(by_env.items())],
        "domains": [_row(k, v, config.trials) for k, v in sorted(by_domain.items())],
        "tasks": [
            {
                "id": t.id,
                "envs": t.envs,
                "trials": len(per_task[t.id]),
                "passed": sum(r.passed for r in per_task[t.id]),
                "rewards": [r.reward.reward if r.reward else None for r in per_task[t.id]],
                "errors": [r.error for r in per_task[t.id] if r.error],
            }
            for t in tasks
        ],
    }


def to_junit(summary: dict[str, Any]) -> bytes:
    """One <testsuite> per environment, one <testcase> per task: it fails unless every trial passed."""
    root = ET.Element("testsuites", name="envreg eval", time=f"{summary['seconds']:.3f}")
    suites: dict[str, ET.Element] = {}
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for task in summary["tasks"]:
        envs = "+".join(task["envs"])
        if envs not in suites:
            suites[envs] = ET.SubElement(root, "testsuite", name=f"envreg eval {envs}")
        suite = suites[envs]
        case = ET.SubElement(suite, "testcase", classname=envs, name=task["id"])
        totals["tests"] += 1
        message = f"{task['passed']}/{task['trials']} trials passed; rewards {task['rewards']}"
        if task["errors"]:
            ET.SubElement(case, "error", message=task["errors"][0][:500]).text = "\n".join(task["errors"])
            totals["errors"] += 1
        elif task["passed"] < task["trials"] or not task["trials"]:
            ET.SubElement(case, "failure", message=message).text = message
            totals["failures"] += 1
        else:
            ET.SubElement(case, "system-out").text = message
    for suite in suites.values():
        cases = suite.findall("testcase")
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
        suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def write_summary(folder: Path, summary: dict[str, Any]) -> Path:
    path = folder / "summary.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")
    return path
