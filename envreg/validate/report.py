"""Reports in machine form: JSON (``envreg validate --json``) and JUnit XML (``--junit FILE``) for CI."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from envreg.validate.core import EnvReport, Status

FORMAT = "envreg.validate"
VERSION = 1


def to_json(reports: list[EnvReport], seconds: float) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "passed": all(r.passed for r in reports),
        "seconds": round(seconds, 3),
        "environments": [r.to_json() for r in reports],
    }


def to_junit(reports: list[EnvReport], seconds: float) -> bytes:
    """One <testsuite> per environment, one <testcase> per check (a failure's evidence as its text)."""
    root = ET.Element("testsuites", name="envreg validate", time=f"{seconds:.3f}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for report in reports:
        suite = ET.SubElement(root, "testsuite", name=f"envreg validate {report.label}")
        if report.image_id:
            props = ET.SubElement(suite, "properties")
            for key in ("target", "image_id", "manifest_digest"):
                ET.SubElement(props, "property", name=key, value=str(getattr(report, key) or ""))
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        if report.error is not None:
            case = ET.SubElement(suite, "testcase", classname=report.target, name="image", time="0")
            ET.SubElement(case, "error", message=report.error).text = report.error
            counts["tests"] += 1
            counts["errors"] += 1
        for result in report.results:
            case = ET.SubElement(
                suite, "testcase", classname=report.label, name=result.name, time=f"{result.seconds:.3f}"
            )
            counts["tests"] += 1
            body = "\n".join(result.evidence)
            if result.status is Status.FAIL:
                ET.SubElement(case, "failure", message=result.summary).text = body
                counts["failures"] += 1
            elif result.status is Status.SKIP:
                ET.SubElement(case, "skipped", message=result.summary)
                counts["skipped"] += 1
            elif body:
                ET.SubElement(case, "system-out").text = f"{result.summary}\n{body}"
        suite.set("time", f"{report.seconds:.3f}")
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
