"""Replay: run a trajectory's calls again from its initial states and check every result, every
per-turn state hash and the final states, byte for byte (canonical JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field

from envreg.canonical import canonical_json, sha256_hex
from envreg.synth.records import Trajectory


@dataclass
class ReplayReport:
    trajectory: str
    calls: int = 0
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches


async def replay(rt, trajectory: Trajectory, isolation: str = "local") -> ReplayReport:
    """Replay `trajectory` in fresh sandboxes of `rt` on `isolation`; the report lists every difference."""
    report = ReplayReport(trajectory.id)
    sandboxes = {}
    try:
        for ref in trajectory.envs:
            sandboxes[ref.name] = await rt.sandbox(
                ref.name, isolation=isolation, state=trajectory.initial_states[ref.name]
            )
            if sandboxes[ref.name].env_digest != ref.manifest_digest:
                report.mismatches.append(
                    f"{ref.name}: sandbox runs {sandboxes[ref.name].env_digest[:19]}, the record was made with {ref.manifest_digest[:19]}"
                )
        for k, turn in enumerate(trajectory.turns):
            for call in turn.calls:
                report.calls += 1
                result = await sandboxes[call.env].call_tool(call.tool, call.arguments)
                if result.is_error != call.is_error or (
                    not result.is_error and canonical_json(result.value) != canonical_json(call.result)
                ):
                    report.mismatches.append(
                        f"turn {k} {call.env}.{call.tool}: result differs: {result.text[:160]}"
                    )
            for env, expected in turn.state_sha256.items():
                actual = await sandboxes[env].state_sha256()
                if actual != expected:
                    report.mismatches.append(
                        f"turn {k}: {env} state {actual[:12]} != recorded {expected[:12]}"
                    )
        for env, expected in trajectory.final_states.items():
            actual = canonical_json(await sandboxes[env].state())
            if actual != canonical_json(expected):
                report.mismatches.append(f"final state of {env} differs from the record")
            if sha256_hex(actual) != trajectory.final_state_sha256.get(env):
                report.mismatches.append(f"final state hash of {env} differs from the record")
    finally:
        for sandbox in sandboxes.values():
            await sandbox.close()
    return report
