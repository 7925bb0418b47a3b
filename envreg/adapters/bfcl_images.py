"""The images/bfcl-*/ folders: one envreg environment per BFCL class, with scenarios made from BFCL data.

`write_folders` (``envreg adapters bfcl generate``) writes, for each class, ``env.py`` (the class
served through `envreg.adapters.bfcl`), ``requirements.lock`` (bfcl-eval and mpmath, hash-pinned,
installed into the image without their dependencies), scenarios made from BFCL's ground truth
(the calls of a few base entries that reach the class, picked to cover the most tools) plus a
"tour" of the tools no ground truth calls, and two states the environment must refuse. Expected
results and final states are what the environment returned when the folder was generated: the
scenarios pin its behaviour across tiers and rebuilds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envreg.adapters import bfcl
from envreg.adapters.generated import sync_folder
from envreg.env.state import DEFAULT_EPOCH

#: Calls that reach the tools the picked ground-truth entries do not call, per class (on the first entry's state).
TOURS: dict[str, list[str]] = {
    "GorillaFileSystem": ["pwd()", "mkdir(dir_name='tour')", "ls(a=True)"],
    "MathAPI": [
        "absolute_value(number=-7.5)",
        "add(a=2, b=3.5)",
        "divide(a=7, b=2)",
        "divide(a=1, b=0)",
        "imperial_si_conversion(value=3, unit_in='ft', unit_out='m')",
        "max_value(numbers=[3, 9.5, -1])",
        "min_value(numbers=[3, 9.5, -1])",
        "multiply(a=4, b=2.5)",
        "percentage(part=3, whole=12)",
        "power(base=2, exponent=10)",
        "round_number(number=3.14159, decimal_places=2)",
        "si_unit_conversion(value=1500, unit_in='m', unit_out='km')",
        "square_root(number=2, precision=10)",
        "subtract(a=10, b=4.25)",
        "sum_values(numbers=[1, 2, 3.5])",
    ],
    "MessageAPI": [
        "list_users()",
        "message_get_login_status()",
        "message_login(user_id='USR001')",
        "search_messages(keyword='budget')",
        "get_message_stats()",
    ],
    "TicketAPI": [
        "ticket_get_login_status()",
        "ticket_login(username='tour', password='tour123')",
        "create_ticket(title='Tour ticket', description='made by the tour', priority=2)",
        "get_user_tickets()",
        "get_user_tickets(status='Open')",
        "logout()",
        "ticket_get_login_status()",
    ],
    "TradingBot": [
        "trading_get_login_status()",
        "trading_login(username='tour', password='tour123')",
        "get_symbol_by_name(name='Nvidia')",
        "filter_stocks_by_price(stocks=['NVDA', 'AAPL', 'ZETA'], min_price=50, max_price=300)",
        "notify_price_change(stocks=['NVDA', 'ZETA'], threshold=0.1)",
        "get_order_history()",
        "get_transaction_history(start_date='2024-01-01', end_date='2024-12-31')",
        "get_current_time()",
        "trading_logout()",
    ],
    "TravelAPI": [
        "travel_get_login_status()",
        "get_all_credit_cards()",
        "get_budget_fiscal_year()",
        "get_booking_history(access_token='tour-token')",
        "register_credit_card(access_token='tour-token', card_number='4111111111111111', expiration_date='12/2030', cardholder_name='Tour Guide', card_verification_number=123)",
    ],
    "TwitterAPI": [
        "posting_get_login_status()",
        "get_tweet(tweet_id=0)",
        "get_tweet_comments(tweet_id=0)",
        "follow_user(username_to_follow='tour_user')",
        "list_all_following()",
        "unfollow_user(username_to_unfollow='tour_user')",
        "get_user_stats(username='tour_user')",
        "search_tweets(keyword='report')",
        "get_user_tweets(username='tour_user')",
    ],
    "VehicleControlAPI": [
        "adjustClimateControl(temperature=22.5, unit='celsius', fanSpeed=40, mode='cool')",
        "get_current_speed()",
        "get_outside_temperature_from_weather_com()",
        "releaseBrakePedal()",
        "get_outside_temperature_from_google()",
        "setCruiseControl(speed=60, activate=True, distanceToNextVehicle=100)",
        "display_log(messages=['tour started', 'tour ended'])",
    ],
}
#: Classes whose tour starts from the default state (BFCL's TicketAPI.get_user_tickets raises KeyError on
#: the entries' tickets, which lack "created_by"; on tickets it created itself it answers)
TOUR_ON_DEFAULT_STATE = {"TicketAPI"}
#: Tools whose result depends on the wall clock: called in scenarios, their result is not pinned.
WALL_CLOCK_RESULTS = {("TravelAPI", "verify_traveler_information"): "computes an age from datetime.today()"}
SCENARIO_ENTRIES = 4
REJECTED = [
    {
        "name": "foreign_class",
        "description": "A nested object of a class outside the BFCL module is never instantiated.",
        "state": {"public": {"payload": {"$object": "os:_wrap_close"}}, "private": {"attributes": {}}},
        "error": "is not allowed in this snapshot",
    },
    {
        "name": "dangling_reference",
        "description": "A $ref must point at a value of the snapshot.",
        "state": {"public": {"alias": {"$ref": "/public/nowhere"}}, "private": {"attributes": {}}},
        "error": "nothing there",
    },
]

ENV_PY = '''"""BFCL multi-turn class {cls} (bfcl-eval {version}) as an envreg environment.

Generated by `envreg adapters bfcl generate`; the class runs unchanged from the bfcl-eval wheel
(requirements.lock). See envreg/adapters/bfcl.py.
"""

from envreg.adapters.bfcl import build_environment

env = build_environment("{cls}")
'''


def _pin_clock(node: Any) -> Any:
    """Wall-clock timestamps of the snapshot (GorillaFileSystem's File._last_modified) set to one instant."""
    if isinstance(node, dict):
        if set(node) == {"$datetime"}:
            return {"$datetime": DEFAULT_EPOCH.isoformat()}
        return {k: _pin_clock(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_pin_clock(v) for v in node]
    return node


def _scenario(
    class_name: str, name: str, description: str, config: dict[str, Any], calls: list[str]
) -> dict[str, Any]:
    env = bfcl.build_environment(class_name)
    state = _pin_clock(bfcl.initial_state(class_name, config))
    instance = env.instance(state)
    steps = []
    for source in calls:
        _, call = bfcl.parse_call(source, [class_name])
        result = instance.call_tool(call.tool, call.arguments)
        step: dict[str, Any] = {"tool": call.tool, "arguments": call.arguments}
        if result.is_error:
            step["expect_error"] = result.error
        elif (class_name, call.tool) not in WALL_CLOCK_RESULTS:
            step["expect"] = result.value
        steps.append(step)
    final = instance.state.to_json()
    return {
        "name": name,
        "description": description,
        "initial_state": state,
        "steps": steps,
        "final_state": {"public": final["public"]},  # private parts are volatile (BFCL does not compare them)
    }


def scenarios(class_name: str) -> list[dict[str, Any]]:
    """Base entries' ground truth for the class (most new tools first), then the tour."""
    candidates = []
    for entry in bfcl.load_entries(["base"]):
        if class_name not in entry.classes:
            continue
        calls = [
            s
            for turn in entry.ground_truth
            for s in turn
            if bfcl.parse_call(s, entry.classes)[0] == class_name
        ]
        if calls:
            candidates.append((entry, calls))
    picked: list[tuple[bfcl.Entry, list[str]]] = []
    covered: set[str] = set()
    while candidates and len(picked) < SCENARIO_ENTRIES:
        best = max(
            candidates, key=lambda c: len({bfcl.parse_call(s, [class_name])[1].tool for s in c[1]} - covered)
        )
        candidates.remove(best)
        picked.append(best)
        covered |= {bfcl.parse_call(s, [class_name])[1].tool for s in best[1]}
    out = [
        _scenario(
            class_name,
            entry.id,
            f"The {class_name} calls of BFCL's ground truth for {entry.id}, in order.",
            entry.initial_config,
            calls,
        )
        for entry, calls in picked
    ]
    config = {} if class_name in TOUR_ON_DEFAULT_STATE else picked[0][0].initial_config if picked else {}
    out.append(
        _scenario(
            class_name,
            "tour",
            "The tools the picked ground-truth entries do not call.",
            config,
            TOURS[class_name],
        )
    )
    return out


def render(class_name: str, lock: str) -> dict[str, str]:
    """Relative path -> file text of one class's folder."""
    files = {
        "env.py": ENV_PY.format(cls=class_name, version=bfcl.BFCL_VERSION),
        "requirements.lock": lock,
    }
    for scenario in scenarios(class_name):
        files[f"scenarios/{scenario['name']}.json"] = (
            json.dumps(scenario, indent=2, ensure_ascii=False) + "\n"
        )
    for rejected in REJECTED:
        files[f"scenarios/rejected/{rejected['name']}.json"] = json.dumps(rejected, indent=2) + "\n"
    return files


def write_folders(images: Path, lock: str, check: bool = False) -> list[str]:
    """Write (or with `check`, compare) images/bfcl-*/; returns the paths that differ from what is generated."""
    changed = []
    for class_name in bfcl.CLASSES:
        changed += sync_folder(images / bfcl.env_name(class_name), render(class_name, lock), check)
    return changed
