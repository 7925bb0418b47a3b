"""The agent plane's fast path: what the lean path answers, answered off the socket (`envreg.http.fastpath`).

A tool call the lean path answers (`envreg.server.lean`) needs no ASGI scope, task or middleware: this
path parses it in uvicorn's protocol callbacks, checks what `AgentPlane` checks (the agent token, the
instance, a recycled server's lease), runs it and writes the answer in one piece. Whatever it does not take
(a request the lean path hands to the SDK, a refusal, a session-era request) goes to the ASGI planes, which
answer it as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envreg.http.auth import parse_bearer, tokens_match
from envreg.http.fastpath import Answer, FastPath, Head
from envreg.server.instances import instance_id_from_path

if TYPE_CHECKING:
    from envreg.server.agent import AgentPlane
    from envreg.server.recycle import Lease


class AgentLane(FastPath):
    """`plane`'s lean answers, for the requests `lease` (a recyclable server's) does not refuse."""

    def __init__(self, plane: AgentPlane, keep_alive: int, lease: Lease | None = None) -> None:
        super().__init__(plane.max_body, keep_alive)
        assert plane.lean is not None, "the agent lane serves the lean path's answers"
        self.plane = plane
        self.lean = plane.lean
        self.lease = lease

    def begin(self, head: Head, body: bytes) -> Answer | None:
        instance_id = instance_id_from_path(head.path.decode("latin-1"))
        if instance_id is None or instance_id not in self.plane.store:
            return None
        token = self.plane.token
        if token is not None and not tokens_match(parse_bearer(head.authorization), token):
            return None
        if self.lease is not None and self.lease.refusal(_scope(head)) is not None:
            return None
        answer = self.lean.answer(head.headers, body, instance_id)
        if answer is None:
            return None
        return Answer(*answer, keep_alive=head.keep_alive)


def _scope(head: Head) -> dict:
    """What `Lease.refusal` reads of a request."""
    return {"method": "POST", "path": head.path.decode("latin-1"), "headers": head.headers}
