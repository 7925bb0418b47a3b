"""A tau2 airline call on the local tier: the committed database (envreg) against a rebuild and dump per call.

`.venv/bin/python bench/bench_tau2.py` (needs `pip install 'envreg[tau2]'`). Now: `envreg.adapters.tau2`,
whose state is tau2's FlightDB committed (a call journals what it writes). Before: the generic class adapter's
way (issue 23), the 7 MB database rebuilt from the state and dumped again on every call. Prints, never asserts.
"""

from __future__ import annotations

import logging
import statistics
import time

logging.disable(logging.WARNING)


def main() -> None:
    from loguru import logger

    logger.remove()
    from envreg.adapters import tau2

    env = tau2.environment("airline")
    ref = tau2.reference("airline")
    user = next(iter(ref.tools.db.users))
    reservation = ref.tools.db.users[user].reservations[0]
    calls = [
        ("get_user_details", {"user_id": user}),
        ("get_reservation_details", {"reservation_id": reservation}),
        (
            "update_reservation_baggages",
            {
                "reservation_id": reservation,
                "total_baggages": 1,
                "nonfree_baggages": 0,
                "payment_id": next(iter(ref.tools.db.users[user].payment_methods)),
            },
        ),
    ]
    instance = env.instance()
    for name, args in calls:  # warm: models built, the seed committed
        instance.call_tool(name, args)
    rows = []
    for name, args in calls:
        now = []
        for _ in range(50):
            started = time.perf_counter()
            result = instance.call_tool(name, args)
            now.append((time.perf_counter() - started) * 1000)
        assert not result.is_error, result.error
        db_cls = type(ref.tools.db)
        data = tau2.state_of(ref)
        before = []
        for _ in range(3):
            started = time.perf_counter()
            db = db_cls.model_validate(data)  # the state rebuilt into tau2's database ...
            env_obj = tau2.DOMAIN_INFO["airline"].environment_module().get_environment(db=db)
            env_obj.make_tool_call(name, **args)
            data = db.model_dump(mode="json")  # ... and dumped again
            before.append((time.perf_counter() - started) * 1000)
        rows.append((name, statistics.median(now), statistics.median(before)))
    print("| tool | now (committed state) ms p50 | before (rebuild + dump) ms p50 | x |")
    print("| --- | --- | --- | --- |")
    for name, now_ms, before_ms in rows:
        print(f"| {name} | {now_ms:.3f} | {before_ms:.0f} | {before_ms / now_ms:,.0f}x |")


if __name__ == "__main__":
    main()
