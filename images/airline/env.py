"""Airline reservations: search flights, book, change, cancel and add checked baggage.

Fare rules (the tools enforce them and their docstrings repeat them to the agent):

- Free checked bags per passenger: economy 0, business 2; silver and gold members get 1 more.
  Each bag beyond the allowance costs $35. At most 3 bags per passenger in economy, 4 in business.
- Changing flights keeps the route and cabin. The fare difference is charged or refunded, plus a
  change fee of $75 per passenger in economy (waived in business and for gold members).
- Cancelling is free (full refund) in business, or within 24 hours of booking; otherwise an economy
  booking keeps a $100 fee per passenger. Refunds go back to the payment methods that paid.
- Nothing can be booked, changed, cancelled or edited once the flight has departed.

Money is in integer cents. Times are naive, environment-local, compared against `state.now`.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NaiveDatetime, StringConstraints, model_validator

from envreg.env import Environment, EnvState, ToolError, lookup

Cabin = Literal["economy", "business"]
Membership = Literal["regular", "silver", "gold"]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=60)]
AirportCode = Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")]
Cents = Annotated[int, Field(ge=0)]
# Bounded strings, so that one agent cannot grow a shared server's memory (the SDK also caps whole
# arguments and states): ids (an id the agent passes is checked against the state, not a pattern),
# labels (names, cities, card labels), email addresses.
Ref = Annotated[str, Field(max_length=64)]
Label = Annotated[str, Field(max_length=200)]
Email = Annotated[str, Field(max_length=254)]

FREE_BAGS = {"economy": 0, "business": 2}
MAX_BAGS = {"economy": 3, "business": 4}
BAG_FEE = 3500
CHANGE_FEE = 7500
CANCEL_FEE = 10000
FREE_CANCEL_WINDOW = timedelta(hours=24)
MAX_PASSENGERS = 9

_ID = re.compile(r"^([a-z]+)_(\d+)$")


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Airport(Model):
    code: AirportCode
    name: Label
    city: Label


class CabinInventory(Model):
    price_cents: Cents = Field(description="Fare per passenger.")
    capacity: Cents
    available: Cents = Field(description="Seats not held by a confirmed booking.")

    @model_validator(mode="after")
    def _fits(self) -> CabinInventory:
        if self.available > self.capacity:
            raise ValueError(f"available seats ({self.available}) exceed capacity ({self.capacity})")
        return self


class Flight(Model):
    id: Ref
    flight_number: Annotated[str, Field(max_length=16)]
    origin: AirportCode
    destination: AirportCode
    departure: NaiveDatetime
    arrival: NaiveDatetime
    cabins: dict[Cabin, CabinInventory] = Field(min_length=1)

    @model_validator(mode="after")
    def _route(self) -> Flight:
        if self.origin == self.destination:
            raise ValueError(f"flight {self.id} has the same origin and destination")
        if self.arrival <= self.departure:
            raise ValueError(f"flight {self.id} arrives before it departs")
        return self


class PaymentMethod(Model):
    id: Ref
    kind: Literal["credit_card", "gift_card"]
    label: Label
    balance_cents: Cents | None = Field(default=None, description="Gift cards only: what is left to spend.")
    expires_on: date | None = Field(default=None, description="Credit cards only: last valid day.")

    @model_validator(mode="after")
    def _kind_fields(self) -> PaymentMethod:
        if self.kind == "gift_card" and (self.balance_cents is None or self.expires_on is not None):
            raise ValueError(f"gift card {self.id} needs a balance_cents and no expires_on")
        if self.kind == "credit_card" and (self.balance_cents is not None or self.expires_on is None):
            raise ValueError(f"credit card {self.id} needs an expires_on and no balance_cents")
        return self


class User(Model):
    id: Ref
    name: Label
    email: Email = Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
    membership: Membership = "regular"
    payment_methods: dict[str, PaymentMethod] = Field(default_factory=dict)


class UserProfile(Model):
    id: str
    name: str
    email: str
    membership: Membership


class Passenger(Model):
    first_name: Name
    last_name: Name
    date_of_birth: date


class Payment(Model):
    id: Ref
    payment_method_id: Ref
    amount_cents: int = Field(description="Positive for a charge, negative for a refund.")
    kind: Literal["fare", "change", "baggage", "refund"]
    at: NaiveDatetime

    @model_validator(mode="after")
    def _sign(self) -> Payment:
        if self.amount_cents == 0 or (self.amount_cents < 0) != (self.kind == "refund"):
            raise ValueError(f"payment {self.id}: refunds must be negative and every other payment positive")
        return self


class Booking(Model):
    id: Ref
    user_id: Ref
    flight_id: Ref
    cabin: Cabin
    passengers: list[Passenger] = Field(min_length=1, max_length=MAX_PASSENGERS)
    fare_cents: Cents = Field(description="Fare per passenger on the current flight.")
    bags: Cents = Field(default=0, description="Checked bags on the booking (all passengers together).")
    payment_method_id: Ref = Field(description="The payment method used at booking (refunded first).")
    status: Literal["confirmed", "cancelled"] = "confirmed"
    created_at: NaiveDatetime
    cancelled_at: NaiveDatetime | None = None
    payments: list[Payment] = Field(default_factory=list)

    @model_validator(mode="after")
    def _status(self) -> Booking:
        if (self.status == "cancelled") != (self.cancelled_at is not None):
            raise ValueError(f"booking {self.id}: cancelled_at must be set exactly when it is cancelled")
        if len(self.passengers) * MAX_BAGS[self.cabin] < self.bags:
            raise ValueError(f"booking {self.id}: {self.bags} bags exceed the {self.cabin} limit")
        return self


class BookingView(Booking):
    """A booking as the agent sees it, with its totals and baggage allowance."""

    total_paid_cents: int = Field(description="Charges minus refunds.")
    free_bags: int = Field(description="Checked bags included in the fare for this booking.")
    max_bags: int = Field(description="The most checked bags this booking may have.")


class Refund(Model):
    payment_method_id: str
    amount_cents: int


class BaggageReceipt(Model):
    booking_id: str
    bags_added: int
    bags: int
    free_bags: int
    fee_cents: int
    charged_to: str | None = Field(description="The payment method charged, or null when the bags were free.")


class ChangeReceipt(Model):
    booking_id: str
    old_flight_id: str
    new_flight_id: str
    fare_difference_cents: int = Field(description="New fare minus old fare, for all passengers.")
    change_fee_cents: int
    charged_cents: int = Field(description="What was charged (0 when the change was refunded or free).")
    charged_to: str | None
    refunds: list[Refund]


class CancellationReceipt(Model):
    booking_id: str
    cancellation_fee_cents: int
    refund_cents: int
    refunds: list[Refund]


class AirlineState(EnvState):
    airports: dict[str, Airport] = Field(default_factory=dict)
    flights: dict[str, Flight] = Field(default_factory=dict)
    users: dict[str, User] = Field(default_factory=dict)
    bookings: dict[str, Booking] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> AirlineState:
        check_invariants(self)
        return self


def check_invariants(state: AirlineState) -> None:
    """Cross-entity rules the field types cannot express; raises ValueError naming the first problem."""
    ids: list[str] = []

    def keyed(kind: str, items: dict, key_attr: str = "id") -> None:
        for key, item in items.items():
            if key != getattr(item, key_attr):
                raise ValueError(f"{kind} key {key!r} holds {kind[:-1]} {getattr(item, key_attr)!r}")

    keyed("airports", state.airports, "code")
    keyed("flights", state.flights)
    keyed("users", state.users)
    keyed("bookings", state.bookings)
    for flight in state.flights.values():
        ids.append(flight.id)
        for code in (flight.origin, flight.destination):
            if code not in state.airports:
                raise ValueError(f"flight {flight.id} references unknown airport {code!r}")
    owner: dict[str, str] = {}
    emails: set[str] = set()
    for user in state.users.values():
        ids.append(user.id)
        if user.email.lower() in emails:
            raise ValueError(f"duplicate email {user.email!r}: emails identify users and must be unique")
        emails.add(user.email.lower())
        keyed("payment_methods", user.payment_methods)
        for pm in user.payment_methods.values():
            if pm.id in owner:
                raise ValueError(f"payment method id {pm.id!r} is used by two users")
            owner[pm.id] = user.id
            ids.append(pm.id)
    booked: dict[tuple[str, str], int] = {}
    for booking in state.bookings.values():
        ids.append(booking.id)
        if booking.user_id not in state.users:
            raise ValueError(f"booking {booking.id} references unknown user {booking.user_id!r}")
        flight = state.flights.get(booking.flight_id)
        if flight is None:
            raise ValueError(f"booking {booking.id} references unknown flight {booking.flight_id!r}")
        if booking.cabin not in flight.cabins:
            raise ValueError(f"booking {booking.id}: flight {flight.id} has no {booking.cabin} cabin")
        if booking.created_at > state.now or (booking.cancelled_at and booking.cancelled_at > state.now):
            raise ValueError(f"booking {booking.id} has a timestamp after now ({state.now.isoformat()})")
        net: dict[str, int] = {}
        for payment in [booking.payment_method_id, *(p.payment_method_id for p in booking.payments)]:
            if owner.get(payment) != booking.user_id:
                raise ValueError(
                    f"booking {booking.id} uses payment method {payment!r}, which is not one of "
                    f"user {booking.user_id}'s"
                )
        for payment in booking.payments:
            ids.append(payment.id)
            net[payment.payment_method_id] = net.get(payment.payment_method_id, 0) + payment.amount_cents
            if net[payment.payment_method_id] < 0:
                raise ValueError(
                    f"booking {booking.id} refunds {payment.payment_method_id} more than it paid"
                )
        if booking.status == "confirmed":
            key = (flight.id, booking.cabin)
            booked[key] = booked.get(key, 0) + len(booking.passengers)
    for flight in state.flights.values():
        for cabin, inventory in flight.cabins.items():
            held = booked.get((flight.id, cabin), 0)
            if inventory.available + held != inventory.capacity:
                raise ValueError(
                    f"flight {flight.id} {cabin}: seats do not add up: {inventory.available} available + "
                    f"{held} booked != capacity {inventory.capacity}"
                )
    seen: set[str] = set()
    for ident in ids:
        if ident in seen:
            raise ValueError(f"duplicate id {ident!r}")
        seen.add(ident)
        if m := _ID.match(ident):
            prefix, n = m.group(1), int(m.group(2))
            if state.id_counters.get(prefix, 0) < n:
                raise ValueError(
                    f"id_counters[{prefix!r}] is {state.id_counters.get(prefix, 0)} but {ident} exists: "
                    "new ids would collide"
                )


env = Environment(
    "airline",
    AirlineState,
    version="1.0.0",
    domain="travel",
    description=(
        "Airline reservations for one carrier: look up customers and their payment methods, search "
        "flights between airports, book seats, change flights (fare difference and change fees), "
        "cancel with refunds, add checked baggage and correct passenger details."
    ),
)


# ---------------------------------------------------------------- helpers


def _user(state: AirlineState, user_id: str) -> User:
    return lookup(state.users, user_id, "user", "Look the customer up with find_user(email).")


def _flight(state: AirlineState, flight_id: str) -> Flight:
    return lookup(state.flights, flight_id, "flight", "Find flight ids with search_flights.")


def _booking(state: AirlineState, booking_id: str) -> Booking:
    return lookup(
        state.bookings, booking_id, "booking", "List a user's bookings with list_bookings(user_id)."
    )


def _airport(state: AirlineState, code: str) -> str:
    code = code.strip().upper()
    if code not in state.airports:
        known = ", ".join(sorted(state.airports))
        raise ToolError(f"Unknown airport {code!r}. Airports served: {known}.")
    return code


def _not_departed(state: AirlineState, flight: Flight, action: str) -> None:
    if flight.departure <= state.now:
        raise ToolError(
            f"Flight {flight.flight_number} ({flight.id}) departed at {flight.departure.isoformat()}; "
            f"it is too late to {action}."
        )


def _open_booking(state: AirlineState, booking_id: str, action: str) -> Booking:
    booking = _booking(state, booking_id)
    if booking.status == "cancelled":
        raise ToolError(
            f"Booking {booking.id} is already cancelled (at {booking.cancelled_at.isoformat()}); "
            f"it is too late to {action}. Book a new flight if the customer still wants to travel."
        )
    _not_departed(state, state.flights[booking.flight_id], action)
    return booking


def _free_bags(state: AirlineState, booking: Booking) -> int:
    extra = 1 if state.users[booking.user_id].membership in ("silver", "gold") else 0
    return (FREE_BAGS[booking.cabin] + extra) * len(booking.passengers)


def _view(state: AirlineState, booking: Booking) -> BookingView:
    return BookingView(
        **booking.model_dump(),
        total_paid_cents=sum(p.amount_cents for p in booking.payments),
        free_bags=_free_bags(state, booking),
        max_bags=MAX_BAGS[booking.cabin] * len(booking.passengers),
    )


def _charge(
    state: AirlineState, booking: Booking, payment_method_id: str, amount: int, kind: str
) -> Payment | None:
    """Charge `amount` cents to one of the booking owner's payment methods and record it."""
    if amount <= 0:
        return None
    user = state.users[booking.user_id]
    pm = user.payment_methods.get(payment_method_id)
    if pm is None:
        raise ToolError(
            f"Payment method {payment_method_id!r} is not one of user {user.id}'s. "
            f"Call list_payment_methods({user.id!r}) to see theirs."
        )
    if pm.kind == "credit_card" and pm.expires_on is not None and pm.expires_on < state.now.date():
        raise ToolError(
            f"{pm.label} ({pm.id}) expired on {pm.expires_on.isoformat()}; use another payment method."
        )
    if pm.balance_cents is not None:
        if pm.balance_cents < amount:
            raise ToolError(
                f"Insufficient balance on {pm.label} ({pm.id}): {amount} cents needed, "
                f"{pm.balance_cents} available. Use another payment method."
            )
        pm.balance_cents -= amount
    payment = Payment(
        id=state.new_id("pay"), payment_method_id=pm.id, amount_cents=amount, kind=kind, at=state.now
    )
    booking.payments.append(payment)
    return payment


def _refund(state: AirlineState, booking: Booking, amount: int) -> list[Refund]:
    """Give back `amount` cents: the original payment method first, then the others in order of first use."""
    net: dict[str, int] = {booking.payment_method_id: 0}
    for payment in booking.payments:
        net[payment.payment_method_id] = net.get(payment.payment_method_id, 0) + payment.amount_cents
    refunds = []
    user = state.users[booking.user_id]
    for pm_id, paid in net.items():
        part = min(paid, amount)
        if part <= 0:
            continue
        amount -= part
        pm = user.payment_methods[pm_id]
        if pm.balance_cents is not None:
            pm.balance_cents += part
        booking.payments.append(
            Payment(
                id=state.new_id("pay"),
                payment_method_id=pm_id,
                amount_cents=-part,
                kind="refund",
                at=state.now,
            )
        )
        refunds.append(Refund(payment_method_id=pm_id, amount_cents=part))
    if amount > 0:  # more than was paid: the rules never ask for this
        raise ValueError(f"booking {booking.id}: refund exceeds what was paid")
    return refunds


# ---------------------------------------------------------------- tools: customers


@env.tool(read_only=True)
def find_user(state: AirlineState, email: Email) -> UserProfile:
    """Find a customer by email address and return their profile, including the user id other tools need.

    Args:
        email: The customer's email address (case-insensitive).
    """
    wanted = email.strip().lower()
    for user in state.users.values():
        if user.email.lower() == wanted:
            return UserProfile(id=user.id, name=user.name, email=user.email, membership=user.membership)
    raise ToolError(f"No user with email {email!r}. Check the address with the customer.")


@env.tool(read_only=True)
def get_user(state: AirlineState, user_id: Ref) -> UserProfile:
    """Get a customer's profile (name, email, membership tier) by user id.

    Args:
        user_id: The user id, e.g. from find_user or a booking.
    """
    user = _user(state, user_id)
    return UserProfile(id=user.id, name=user.name, email=user.email, membership=user.membership)


@env.tool(read_only=True)
def list_payment_methods(state: AirlineState, user_id: Ref) -> list[PaymentMethod]:
    """List a customer's payment methods: credit cards (with expiry) and gift cards (with balance).

    Args:
        user_id: The user id, from find_user.
    """
    return sorted(_user(state, user_id).payment_methods.values(), key=lambda pm: pm.id)


# ---------------------------------------------------------------- tools: flights


@env.tool(read_only=True)
def list_airports(state: AirlineState) -> list[Airport]:
    """List the airports the airline serves, with their three-letter codes."""
    return sorted(state.airports.values(), key=lambda a: a.code)


@env.tool(read_only=True)
def search_flights(state: AirlineState, origin: Label, destination: Label, date: date) -> list[Flight]:
    """Search the flights from one airport to another that depart on a given day and have not departed yet.

    Each result gives, per cabin, the fare per passenger and the seats still available.
    Results are ordered by departure time.

    Args:
        origin: Three-letter code of the departure airport, e.g. SFO (see list_airports).
        destination: Three-letter code of the arrival airport.
        date: The departure day, YYYY-MM-DD.
    """
    origin, destination = _airport(state, origin), _airport(state, destination)
    if origin == destination:
        raise ToolError("Origin and destination are the same airport.")
    found = [
        f
        for f in state.flights.values()
        if f.origin == origin and f.destination == destination and f.departure.date() == date
        if f.departure > state.now
    ]
    return sorted(found, key=lambda f: (f.departure, f.id))


@env.tool(read_only=True)
def get_flight(state: AirlineState, flight_id: Ref) -> Flight:
    """Get one flight: route, times, and per cabin the fare and the seats available.

    Args:
        flight_id: The flight id, e.g. from search_flights or a booking.
    """
    return _flight(state, flight_id)


# ---------------------------------------------------------------- tools: bookings


@env.tool(read_only=True)
def list_bookings(state: AirlineState, user_id: Ref) -> list[BookingView]:
    """List all of a customer's bookings, confirmed and cancelled, oldest first.

    Args:
        user_id: The user id, from find_user.
    """
    _user(state, user_id)
    return [
        _view(state, b) for b in sorted(state.bookings.values(), key=lambda b: b.id) if b.user_id == user_id
    ]


@env.tool(read_only=True)
def get_booking(state: AirlineState, booking_id: Ref) -> BookingView:
    """Get one booking: flight, cabin, passengers, bags and allowance, status and payment history.

    Args:
        booking_id: The booking id, e.g. from list_bookings or book_flight.
    """
    return _view(state, _booking(state, booking_id))


@env.tool
def book_flight(
    state: AirlineState,
    user_id: Ref,
    flight_id: Ref,
    cabin: Cabin,
    passengers: Annotated[list[Passenger], Field(min_length=1, max_length=MAX_PASSENGERS)],
    payment_method_id: Ref,
) -> BookingView:
    """Book seats on a flight for one to nine passengers and charge the fare to a payment method.

    The fare is the cabin's price per passenger times the number of passengers. A gift card must
    cover the whole amount; an expired credit card is refused.

    Args:
        user_id: The customer making the booking, from find_user.
        flight_id: The flight, from search_flights.
        cabin: economy or business.
        passengers: Everyone travelling, each with first_name, last_name and date_of_birth (YYYY-MM-DD).
        payment_method_id: One of the customer's payment methods, from list_payment_methods.
    """
    user = _user(state, user_id)
    flight = _flight(state, flight_id)
    _not_departed(state, flight, "book it")
    inventory = flight.cabins.get(cabin)
    if inventory is None:
        raise ToolError(
            f"Flight {flight.flight_number} has no {cabin} cabin; it offers {', '.join(flight.cabins)}."
        )
    if inventory.available < len(passengers):
        raise ToolError(
            f"Not enough {cabin} seats on {flight.flight_number}: {len(passengers)} requested, "
            f"only {inventory.available} left. Try another flight or cabin."
        )
    for p in passengers:
        if p.date_of_birth > state.now.date():
            raise ToolError(f"Passenger {p.first_name} {p.last_name} has a date of birth in the future.")
    booking = Booking(
        id=state.new_id("bk"),
        user_id=user.id,
        flight_id=flight.id,
        cabin=cabin,
        passengers=passengers,
        fare_cents=inventory.price_cents,
        payment_method_id=payment_method_id,
        created_at=state.now,
    )
    _charge(state, booking, payment_method_id, inventory.price_cents * len(passengers), "fare")
    inventory.available -= len(passengers)
    state.bookings[booking.id] = booking
    return _view(state, booking)


@env.tool
def add_baggage(
    state: AirlineState,
    booking_id: Ref,
    count: Annotated[int, Field(ge=1)],
    payment_method_id: Ref | None = None,
) -> BaggageReceipt:
    """Add checked bags to a confirmed booking; bags beyond the free allowance cost $35 each.

    Free bags per passenger: economy 0, business 2, plus 1 for silver and gold members.
    At most 3 bags per passenger in economy and 4 in business.

    Args:
        booking_id: The booking, from list_bookings.
        count: How many bags to add (1 or more).
        payment_method_id: Who pays the bag fees; defaults to the payment method used for the booking.
    """
    booking = _open_booking(state, booking_id, "add bags")
    limit = MAX_BAGS[booking.cabin] * len(booking.passengers)
    if booking.bags + count > limit:
        raise ToolError(
            f"Booking {booking.id} has {booking.bags} bag(s); {booking.cabin} allows at most {limit} for "
            f"{len(booking.passengers)} passenger(s), so at most {limit - booking.bags} more."
        )
    free = _free_bags(state, booking)
    paid_before = max(0, booking.bags - free)
    booking.bags += count
    fee = (max(0, booking.bags - free) - paid_before) * BAG_FEE
    payment = _charge(state, booking, payment_method_id or booking.payment_method_id, fee, "baggage")
    return BaggageReceipt(
        booking_id=booking.id,
        bags_added=count,
        bags=booking.bags,
        free_bags=free,
        fee_cents=fee,
        charged_to=payment.payment_method_id if payment else None,
    )


@env.tool
def change_flight(
    state: AirlineState, booking_id: Ref, new_flight_id: Ref, payment_method_id: Ref | None = None
) -> ChangeReceipt:
    """Move a confirmed booking to another flight on the same route, in the same cabin.

    The fare difference (new fare minus old fare, times passengers) is charged, or refunded when
    negative, together with a change fee of $75 per passenger in economy (waived in business and for
    gold members). Refunds go back to the payment methods that paid. Bags carry over.

    Args:
        booking_id: The booking to change, from list_bookings.
        new_flight_id: The flight to move to, from search_flights (same origin and destination).
        payment_method_id: Who pays if the change costs money; defaults to the booking's payment method.
    """
    booking = _open_booking(state, booking_id, "change it")
    old = state.flights[booking.flight_id]
    new = _flight(state, new_flight_id)
    if new.id == old.id:
        raise ToolError(f"Booking {booking.id} is already on flight {new.id}.")
    if (new.origin, new.destination) != (old.origin, old.destination):
        raise ToolError(
            f"A change must keep the route {old.origin}-{old.destination}; flight {new.id} flies "
            f"{new.origin}-{new.destination}. Cancel and book a new flight instead."
        )
    _not_departed(state, new, "change onto it")
    inventory = new.cabins.get(booking.cabin)
    pax = len(booking.passengers)
    if inventory is None or inventory.available < pax:
        left = inventory.available if inventory else 0
        raise ToolError(
            f"Not enough {booking.cabin} seats on {new.flight_number}: {pax} needed, {left} left."
        )
    difference = (inventory.price_cents - booking.fare_cents) * pax
    waived = booking.cabin == "business" or state.users[booking.user_id].membership == "gold"
    fee = 0 if waived else CHANGE_FEE * pax
    total = difference + fee
    payment = _charge(state, booking, payment_method_id or booking.payment_method_id, total, "change")
    refunds = _refund(state, booking, -total) if total < 0 else []
    old.cabins[booking.cabin].available += pax
    inventory.available -= pax
    booking.flight_id, booking.fare_cents = new.id, inventory.price_cents
    return ChangeReceipt(
        booking_id=booking.id,
        old_flight_id=old.id,
        new_flight_id=new.id,
        fare_difference_cents=difference,
        change_fee_cents=fee,
        charged_cents=max(total, 0),
        charged_to=payment.payment_method_id if payment else None,
        refunds=refunds,
    )


@env.tool(destructive=True)
def cancel_booking(state: AirlineState, booking_id: Ref) -> CancellationReceipt:
    """Cancel a confirmed booking before departure, release its seats and refund it.

    Business bookings, and any booking cancelled within 24 hours of being made, are refunded in
    full. Otherwise an economy booking keeps a cancellation fee of $100 per passenger (never more
    than was paid). Refunds go back to the payment methods that paid, the original one first.

    Args:
        booking_id: The booking to cancel, from list_bookings.
    """
    booking = _open_booking(state, booking_id, "cancel it")
    paid = sum(p.amount_cents for p in booking.payments)
    free = booking.cabin == "business" or state.now - booking.created_at <= FREE_CANCEL_WINDOW
    fee = 0 if free else min(paid, CANCEL_FEE * len(booking.passengers))
    refunds = _refund(state, booking, paid - fee)
    state.flights[booking.flight_id].cabins[booking.cabin].available += len(booking.passengers)
    booking.status, booking.cancelled_at = "cancelled", state.now
    return CancellationReceipt(
        booking_id=booking.id, cancellation_fee_cents=fee, refund_cents=paid - fee, refunds=refunds
    )


@env.tool(idempotent=True)
def update_passenger(
    state: AirlineState,
    booking_id: Ref,
    passenger_index: Annotated[int, Field(ge=0)],
    first_name: Label | None = None,
    last_name: Label | None = None,
    date_of_birth: date | None = None,
) -> BookingView:
    """Correct one passenger's name or date of birth on a confirmed booking before departure.

    Give only the fields to change; the others are kept.

    Args:
        booking_id: The booking, from list_bookings.
        passenger_index: The passenger's position in the booking's passengers list, starting at 0.
        first_name: The corrected first name.
        last_name: The corrected last name.
        date_of_birth: The corrected date of birth, YYYY-MM-DD.
    """
    booking = _open_booking(state, booking_id, "edit it")
    if first_name is None and last_name is None and date_of_birth is None:
        raise ToolError("Nothing to change: give first_name, last_name or date_of_birth.")
    if passenger_index >= len(booking.passengers):
        raise ToolError(
            f"Booking {booking.id} has {len(booking.passengers)} passenger(s); "
            f"passenger_index must be 0 to {len(booking.passengers) - 1}."
        )
    if date_of_birth is not None and date_of_birth > state.now.date():
        raise ToolError("The date of birth is in the future.")
    current = booking.passengers[passenger_index]
    changes = {"first_name": first_name, "last_name": last_name, "date_of_birth": date_of_birth}
    try:
        updated = Passenger.model_validate(
            current.model_dump() | {k: v for k, v in changes.items() if v is not None}
        )
    except ValueError as exc:
        raise ToolError(f"Invalid passenger details: {exc}") from None
    booking.passengers[passenger_index] = updated
    return _view(state, booking)
