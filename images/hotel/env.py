"""hotel: hotel search and reservations in twelve cities: search, availability, reserve, modify, cancel.

Booking rules (the tools enforce them and their docstrings repeat them to the agent):

- Prices are per room and night in the hotel's local currency (USD, GBP, EUR, JPY, AUD); Friday
  and Saturday nights use the weekend rate. The "nonrefundable" rate plan is 10% cheaper than the
  "flexible" one. Taxes are the city's hotel tax rate on the room price.
- Stays are 1 to 30 nights, starting today or up to 365 days ahead; a room type holds at most its
  max_guests. A room type is available when, on every night of the stay, fewer of its rooms are
  reserved than the hotel has.
- Flexible reservations can be cancelled free of charge until two days before check-in
  (e.g. until 2026-01-10 for a check-in on 2026-01-12); later, the first night (with tax) is charged.
  Nonrefundable reservations are charged in full when cancelled and cannot be modified.
- Nothing can be changed on or after the check-in day.
"""

from __future__ import annotations

import math
import re
from datetime import date, timedelta
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, NaiveDatetime, model_validator

from envreg.env import Environment, EnvState, ToolError, lookup
from envreg.env.vocab import City, Currency, Email

_ID = re.compile(r"^([a-z]+)_(\d+)$")

RatePlan = Literal["flexible", "nonrefundable"]
Amenity = Literal[
    "wifi", "breakfast", "gym", "pool", "spa", "parking", "restaurant", "pet_friendly", "airport_shuttle"
]

CITY_CURRENCY: dict[str, Currency] = {
    "San Francisco": "USD",
    "New York": "USD",
    "Chicago": "USD",
    "Seattle": "USD",
    "Boston": "USD",
    "Austin": "USD",
    "London": "GBP",
    "Paris": "EUR",
    "Berlin": "EUR",
    "Madrid": "EUR",
    "Tokyo": "JPY",
    "Sydney": "AUD",
}
CITY_TAX = {  # hotel occupancy / sales tax, percent of the room price
    "San Francisco": 14.0,
    "New York": 14.75,
    "Chicago": 17.39,
    "Seattle": 15.7,
    "Boston": 14.45,
    "Austin": 17.0,
    "London": 20.0,
    "Paris": 10.0,
    "Berlin": 12.0,
    "Madrid": 10.0,
    "Tokyo": 10.0,
    "Sydney": 10.0,
}
NONREFUNDABLE_DISCOUNT = 10  # percent
FREE_CANCEL_DAYS = 2
MAX_NIGHTS = 30
MAX_ADVANCE_DAYS = 365
MAX_REQUESTS = 5
EARTH_RADIUS_KM = 6371.0088


def _two_decimals(value: float) -> float:
    if round(value, 2) != value:
        raise ValueError("an amount has at most 2 decimals")
    return value


Amount = Annotated[float, Field(ge=0, le=10_000_000), AfterValidator(_two_decimals)]
Id = Annotated[str, Field(max_length=64)]
Name = Annotated[str, Field(min_length=1, max_length=200)]
Lat = Annotated[float, Field(ge=-90, le=90)]
Lng = Annotated[float, Field(ge=-180, le=180)]
Guests = Annotated[int, Field(ge=1, le=8)]


def cents(amount: float) -> int:
    return round(amount * 100)


def major(value: int) -> float:
    return value / 100


def _round(value: float, currency: str) -> int:
    """Round an amount in cents half up, to whole yen for JPY."""
    step = 100 if currency == "JPY" else 1
    return math.floor(value / step + 0.5) * step


def _money(value_cents: int, currency: str) -> str:
    return f"{value_cents // 100:,} JPY" if currency == "JPY" else f"{value_cents / 100:,.2f} {currency}"


def haversine_km(lat1: float, lng1: float, lat2: float, lng2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lng2 - lng1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(math.sqrt(a))


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RoomType(Model):
    code: Annotated[str, Field(pattern=r"^[a-z_]{2,30}$", max_length=30)]
    name: Name
    beds: Annotated[str, Field(max_length=100)]
    max_guests: Guests
    rooms: int = Field(ge=1, le=500, description="How many rooms of this type the hotel has.")
    rate: Amount = Field(description="Flexible rate per night, Sunday to Thursday nights.")
    weekend_rate: Amount = Field(description="Flexible rate per night for Friday and Saturday nights.")


class Hotel(Model):
    id: Id = Field(pattern=r"^htl_\d{4,}$")
    name: Name
    city: City
    address: Annotated[str, Field(min_length=1, max_length=300)]
    lat: Lat
    lng: Lng
    stars: int = Field(ge=1, le=5)
    guest_rating: float = Field(ge=0, le=10, description="Average guest score out of 10.")
    amenities: list[Amenity] = Field(default_factory=list, max_length=20)
    check_in_time: Annotated[str, Field(pattern=r"^\d{2}:\d{2}$", max_length=5)] = "15:00"
    check_out_time: Annotated[str, Field(pattern=r"^\d{2}:\d{2}$", max_length=5)] = "11:00"
    currency: Currency
    room_types: list[RoomType] = Field(min_length=1, max_length=20)

    @model_validator(mode="after")
    def _consistent(self) -> Hotel:
        if self.currency != CITY_CURRENCY[self.city]:
            raise ValueError(f"hotel {self.id} in {self.city} must price in {CITY_CURRENCY[self.city]}")
        codes = [r.code for r in self.room_types]
        if len(set(codes)) != len(codes):
            raise ValueError(f"hotel {self.id} has two room types with one code")
        if self.currency == "JPY" and any(
            cents(r.rate) % 100 or cents(r.weekend_rate) % 100 for r in self.room_types
        ):
            raise ValueError(f"hotel {self.id}: yen rates are whole numbers")
        return self


class Night(Model):
    date: date
    price: Amount


class Reservation(Model):
    id: Id = Field(pattern=r"^res_\d{4,}$")
    hotel_id: Id
    room_type: Annotated[str, Field(max_length=30)]
    rate_plan: RatePlan
    check_in: date
    check_out: date
    guests: Guests
    guest_name: Name
    email: Email
    nights: list[Night] = Field(min_length=1, max_length=MAX_NIGHTS)
    room_total: Amount
    taxes: Amount
    amount: Amount = Field(description="What the stay costs: room_total + taxes.")
    currency: Currency
    special_requests: list[Annotated[str, Field(min_length=1, max_length=300)]] = Field(
        default_factory=list, max_length=MAX_REQUESTS
    )
    status: Literal["confirmed", "cancelled"] = "confirmed"
    created_at: NaiveDatetime
    modified_at: NaiveDatetime | None = None
    cancelled_at: NaiveDatetime | None = None
    cancellation_fee: Amount | None = Field(default=None, description="Charged when it was cancelled.")

    @model_validator(mode="after")
    def _consistent(self) -> Reservation:
        if self.check_out <= self.check_in:
            raise ValueError(f"reservation {self.id}: check_out must be after check_in")
        expected = [self.check_in + timedelta(days=i) for i in range((self.check_out - self.check_in).days)]
        if [n.date for n in self.nights] != expected:
            raise ValueError(f"reservation {self.id}: nights must be every night from check_in to check_out")
        if cents(self.room_total) != sum(cents(n.price) for n in self.nights):
            raise ValueError(f"reservation {self.id}: room_total is not the sum of its nights")
        if cents(self.amount) != cents(self.room_total) + cents(self.taxes):
            raise ValueError(f"reservation {self.id}: amount is not room_total + taxes")
        cancelled = self.status == "cancelled"
        if cancelled != (self.cancelled_at is not None) or cancelled != (self.cancellation_fee is not None):
            raise ValueError(
                f"reservation {self.id}: cancelled_at and cancellation_fee are set exactly when cancelled"
            )
        if self.cancellation_fee is not None and self.cancellation_fee > self.amount:
            raise ValueError(f"reservation {self.id}: the cancellation fee exceeds the amount")
        return self


class HotelState(EnvState):
    hotels: dict[str, Hotel] = Field(default_factory=dict, max_length=2000)
    reservations: dict[str, Reservation] = Field(default_factory=dict, max_length=20_000)

    @model_validator(mode="after")
    def _integrity(self) -> HotelState:
        for table in ("hotels", "reservations"):
            for key, item in getattr(self, table).items():
                if key != item.id:
                    raise ValueError(f"{table}: key {key!r} holds {item.id!r}; store each under its own id")
        booked: dict[tuple[str, str, date], int] = {}
        for res in self.reservations.values():
            hotel = self.hotels.get(res.hotel_id)
            if hotel is None:
                raise ValueError(f"reservation {res.id} is at unknown hotel {res.hotel_id!r}")
            room = next((r for r in hotel.room_types if r.code == res.room_type), None)
            if room is None:
                raise ValueError(f"reservation {res.id}: hotel {hotel.id} has no room type {res.room_type!r}")
            if res.guests > room.max_guests:
                raise ValueError(
                    f"reservation {res.id}: {res.guests} guests exceed the {room.code} room's {room.max_guests}"
                )
            if res.currency != hotel.currency:
                raise ValueError(
                    f"reservation {res.id} is in {res.currency}, its hotel prices in {hotel.currency}"
                )
            taxes = _round(cents(res.room_total) * CITY_TAX[hotel.city] / 100, hotel.currency)
            if cents(res.taxes) != taxes:
                raise ValueError(
                    f"reservation {res.id}: taxes are not {CITY_TAX[hotel.city]}% of the room total"
                )
            for at in (res.created_at, res.modified_at, res.cancelled_at):
                if at is not None and at > self.now:
                    raise ValueError(
                        f"reservation {res.id} has a timestamp after now ({self.now.isoformat()})"
                    )
            if res.status == "confirmed":
                for night in res.nights:
                    key = (hotel.id, room.code, night.date)
                    booked[key] = booked.get(key, 0) + 1
                    if booked[key] > room.rooms:
                        raise ValueError(
                            f"hotel {hotel.id} {room.code} is overbooked on {night.date}: more reservations than its "
                            f"{room.rooms} rooms"
                        )
        for ident in [*self.hotels, *self.reservations]:
            if m := _ID.match(ident):
                prefix, n = m.group(1), int(m.group(2))
                if self.id_counters.get(prefix, 0) < n:
                    raise ValueError(
                        f"id_counters[{prefix!r}] is {self.id_counters.get(prefix, 0)} but {ident} exists: "
                        "new ids would collide"
                    )
        return self


# ---------------------------------------------------------------- results


class HotelSummary(Model):
    id: str
    name: str
    city: str
    address: str
    lat: float
    lng: float
    stars: int
    guest_rating: float
    amenities: list[str]
    currency: str
    distance_km: float | None = Field(description="From the lat/lng searched around; null without one.")
    nightly_from: float | None = Field(
        description="Cheapest average nightly price (flexible, before tax) for the dates; null without dates."
    )


class Offer(Model):
    room_type: str
    room_name: str
    beds: str
    max_guests: int
    rate_plan: RatePlan
    rooms_left: int = Field(description="Rooms of this type free on every night of the stay.")
    nights: list[Night]
    room_total: float
    taxes: float
    amount: float = Field(description="Total for the stay: room_total + taxes.")
    currency: str
    free_cancellation_until: date | None = Field(
        description="Last day to cancel free of charge; null when nonrefundable."
    )


class Availability(Model):
    hotel_id: str
    hotel_name: str
    check_in: date
    check_out: date
    guests: int
    offers: list[Offer]


class CancellationQuote(Model):
    reservation_id: str
    free_until: date | None
    fee: float = Field(description="What cancelling now costs.")
    refund: float = Field(description="What cancelling now gives back.")
    currency: str


class ModifiedReservation(Model):
    reservation: Reservation
    previous_amount: float
    difference: float = Field(description="New amount minus the previous amount (negative: money back).")


env = Environment(
    "hotel",
    HotelState,
    version="1.0.1",
    domain="travel",
    description=(
        "Hotel booking in twelve cities: search hotels by city or around a point (lat/lng), see room "
        "offers with nightly prices, taxes and cancellation terms, reserve, modify, cancel, quote "
        "cancellation fees and add special requests."
    ),
)


# ---------------------------------------------------------------- helpers


def _hotel(state: HotelState, hotel_id: str) -> Hotel:
    return lookup(state.hotels, hotel_id, "hotel", "Find hotels with search_hotels.")


def _reservation(state: HotelState, reservation_id: str) -> Reservation:
    return lookup(
        state.reservations, reservation_id, "reservation", "Find reservations with list_reservations(email)."
    )


def _room(hotel: Hotel, code: str) -> RoomType:
    room = next((r for r in hotel.room_types if r.code == code), None)
    if room is None:
        have = ", ".join(r.code for r in hotel.room_types)
        raise ToolError(f"{hotel.name} has no room type {code!r}; its room types are {have}.")
    return room


def _check_dates(state: HotelState, check_in: date, check_out: date) -> None:
    today = state.now.date()
    if check_in < today:
        raise ToolError(f"check_in {check_in.isoformat()} is in the past; today is {today.isoformat()}.")
    if check_out <= check_in:
        raise ToolError(f"check_out {check_out.isoformat()} must be after check_in {check_in.isoformat()}.")
    if (check_out - check_in).days > MAX_NIGHTS:
        raise ToolError(f"A stay is at most {MAX_NIGHTS} nights.")
    if (check_in - today).days > MAX_ADVANCE_DAYS:
        raise ToolError(
            f"Reservations open {MAX_ADVANCE_DAYS} days ahead; {check_in.isoformat()} is too far out."
        )


def _rooms_left(
    state: HotelState, hotel: Hotel, room: RoomType, check_in: date, check_out: date, ignore: str = ""
) -> int:
    nights = [check_in + timedelta(days=i) for i in range((check_out - check_in).days)]
    taken = dict.fromkeys(nights, 0)
    for res in state.reservations.values():
        if (
            res.status != "confirmed"
            or res.hotel_id != hotel.id
            or res.room_type != room.code
            or res.id == ignore
        ):
            continue
        for night in res.nights:
            if night.date in taken:
                taken[night.date] += 1
    return room.rooms - max(taken.values())


def _price(
    hotel: Hotel, room: RoomType, plan: str, check_in: date, check_out: date
) -> tuple[list[Night], int, int]:
    nights = []
    for i in range((check_out - check_in).days):
        day = check_in + timedelta(days=i)
        base = cents(room.weekend_rate if day.weekday() in (4, 5) else room.rate)
        if plan == "nonrefundable":
            base = _round(base * (100 - NONREFUNDABLE_DISCOUNT) / 100, hotel.currency)
        nights.append(Night(date=day, price=major(base)))
    total = sum(cents(n.price) for n in nights)
    taxes = _round(total * CITY_TAX[hotel.city] / 100, hotel.currency)
    return nights, total, taxes


def _free_until(res_plan: str, check_in: date) -> date | None:
    return None if res_plan == "nonrefundable" else check_in - timedelta(days=FREE_CANCEL_DAYS)


def _offer(
    state: HotelState, hotel: Hotel, room: RoomType, plan: str, check_in: date, check_out: date, left: int
) -> Offer:
    nights, total, taxes = _price(hotel, room, plan, check_in, check_out)
    return Offer(
        room_type=room.code,
        room_name=room.name,
        beds=room.beds,
        max_guests=room.max_guests,
        rate_plan=plan,  # type: ignore[arg-type]
        rooms_left=left,
        nights=nights,
        room_total=major(total),
        taxes=major(taxes),
        amount=major(total + taxes),
        currency=hotel.currency,
        free_cancellation_until=_free_until(plan, check_in),
    )


def _cancel_fee(state: HotelState, res: Reservation) -> int:
    free_until = _free_until(res.rate_plan, res.check_in)
    if free_until is not None and state.now.date() <= free_until:
        return 0
    if res.rate_plan == "nonrefundable":
        return cents(res.amount)
    hotel = state.hotels[res.hotel_id]
    first = cents(res.nights[0].price)
    return first + _round(first * CITY_TAX[hotel.city] / 100, hotel.currency)


def _open(state: HotelState, reservation_id: str, action: str) -> Reservation:
    res = _reservation(state, reservation_id)
    if res.status == "cancelled":
        when = res.cancelled_at.date().isoformat() if res.cancelled_at else "earlier"
        raise ToolError(
            f"Reservation {res.id} was cancelled on {when}; it can no longer {action}. Make a new one."
        )
    if state.now.date() >= res.check_in:
        raise ToolError(
            f"Reservation {res.id} checked in on {res.check_in.isoformat()}; it can no longer {action}. "
            "Contact the hotel directly."
        )
    return res


# ---------------------------------------------------------------- tools


@env.tool(read_only=True)
def search_hotels(
    state: HotelState,
    city: City | None = None,
    lat: Lat | None = None,
    lng: Lng | None = None,
    radius_km: Annotated[float, Field(gt=0, le=50)] = 5.0,
    check_in: date | None = None,
    check_out: date | None = None,
    guests: Guests = 1,
    min_stars: Annotated[int, Field(ge=1, le=5)] = 1,
    amenities: Annotated[list[Amenity], Field(max_length=9)] | None = None,
    limit: Annotated[int, Field(ge=1, le=50)] = 10,
) -> list[HotelSummary]:
    """Find hotels in a city, or around a point (lat/lng, e.g. from a map), best rated or nearest first.

    With check_in and check_out, only hotels with a room for the guests on every night are listed,
    each with its cheapest average nightly price (flexible rate, before tax).

    Args:
        city: One of San Francisco, New York, Chicago, Seattle, Boston, Austin, London, Paris, Berlin,
            Madrid, Tokyo, Sydney.
        lat: Latitude to search around (degrees); give lng too. Results are sorted by distance.
        lng: Longitude to search around (degrees).
        radius_km: With lat/lng: only hotels within this many kilometres (default 5, at most 50).
        check_in: Arrival date, e.g. "2026-01-12".
        check_out: Departure date, after check_in.
        guests: How many people share the room (1-8, default 1).
        min_stars: Only hotels with at least this many stars.
        amenities: Only hotels with all of these, e.g. ["gym", "breakfast"].
        limit: The most hotels to return (1-50, default 10).
    """
    if city is None and (lat is None or lng is None):
        raise ToolError("Give a city, or both lat and lng to search around a point.")
    if (lat is None) != (lng is None):
        raise ToolError("Give both lat and lng, or neither.")
    if (check_in is None) != (check_out is None):
        raise ToolError("Give both check_in and check_out to search by dates, or neither.")
    if check_in is not None and check_out is not None:
        _check_dates(state, check_in, check_out)
    found: list[HotelSummary] = []
    for hotel in state.hotels.values():
        if city is not None and hotel.city != city:
            continue
        distance = None
        if lat is not None and lng is not None:
            distance = round(haversine_km(lat, lng, hotel.lat, hotel.lng), 2)
            if distance > radius_km:
                continue
        if hotel.stars < min_stars or not set(amenities or []) <= set(hotel.amenities):
            continue
        nightly_from = None
        if check_in is not None and check_out is not None:
            prices = [
                sum(cents(n.price) for n in _price(hotel, room, "flexible", check_in, check_out)[0])
                for room in hotel.room_types
                if room.max_guests >= guests and _rooms_left(state, hotel, room, check_in, check_out) > 0
            ]
            if not prices:
                continue
            nights = (check_out - check_in).days
            nightly_from = major(_round(min(prices) / nights, hotel.currency))
        found.append(
            HotelSummary(
                id=hotel.id,
                name=hotel.name,
                city=hotel.city,
                address=hotel.address,
                lat=hotel.lat,
                lng=hotel.lng,
                stars=hotel.stars,
                guest_rating=hotel.guest_rating,
                amenities=list(hotel.amenities),
                currency=hotel.currency,
                distance_km=distance,
                nightly_from=nightly_from,
            )
        )
    if lat is not None:
        found.sort(key=lambda h: (h.distance_km, h.id))
    else:
        found.sort(key=lambda h: (-h.guest_rating, h.id))
    return found[:limit]


@env.tool(read_only=True)
def get_hotel(state: HotelState, hotel_id: Id) -> Hotel:
    """Get a hotel's details: address and coordinates, stars, amenities, check-in/out times and room types with rates.

    Args:
        hotel_id: The hotel id (htl_...), from search_hotels.
    """
    return _hotel(state, hotel_id)


@env.tool(read_only=True)
def check_availability(
    state: HotelState, hotel_id: Id, check_in: date, check_out: date, guests: Guests = 1
) -> Availability:
    """List the room offers of a hotel for a stay: each room type that fits the guests and has a room free
    on every night, in both rate plans, with nightly prices, taxes, total and free-cancellation date.

    Args:
        hotel_id: The hotel id (htl_...), from search_hotels.
        check_in: Arrival date, e.g. "2026-01-12".
        check_out: Departure date, after check_in (1-30 nights).
        guests: How many people share the room (1-8, default 1).
    """
    hotel = _hotel(state, hotel_id)
    _check_dates(state, check_in, check_out)
    offers = []
    for room in hotel.room_types:
        if room.max_guests < guests:
            continue
        left = _rooms_left(state, hotel, room, check_in, check_out)
        if left <= 0:
            continue
        for plan in ("flexible", "nonrefundable"):
            offers.append(_offer(state, hotel, room, plan, check_in, check_out, left))
    return Availability(
        hotel_id=hotel.id,
        hotel_name=hotel.name,
        check_in=check_in,
        check_out=check_out,
        guests=guests,
        offers=offers,
    )


@env.tool
def reserve_room(
    state: HotelState,
    hotel_id: Id,
    room_type: Annotated[str, Field(min_length=1, max_length=30)],
    check_in: date,
    check_out: date,
    guest_name: Name,
    email: Email,
    guests: Guests = 1,
    rate_plan: RatePlan = "flexible",
) -> Reservation:
    """Reserve one room for a stay at the price check_availability shows.

    Args:
        hotel_id: The hotel id (htl_...), from search_hotels.
        room_type: The room type code, e.g. "king" (from check_availability).
        check_in: Arrival date, e.g. "2026-01-12".
        check_out: Departure date, after check_in (1-30 nights).
        guest_name: The name the room is booked under.
        email: Where the confirmation goes; also finds the reservation later.
        guests: How many people share the room (1-8, default 1).
        rate_plan: "flexible" (free cancellation until two days before) or "nonrefundable" (10% cheaper).
    """
    hotel = _hotel(state, hotel_id)
    room = _room(hotel, room_type)
    _check_dates(state, check_in, check_out)
    if guests > room.max_guests:
        raise ToolError(
            f"The {room.name} ({room.code}) sleeps at most {room.max_guests}; choose a larger room type."
        )
    if _rooms_left(state, hotel, room, check_in, check_out) <= 0:
        raise ToolError(
            f"No {room.name} ({room.code}) is free at {hotel.name} on every night from {check_in.isoformat()} to "
            f"{check_out.isoformat()}; check_availability shows what is."
        )
    if not guest_name.strip():
        raise ToolError("guest_name is blank; give the name to book the room under.")
    nights, total, taxes = _price(hotel, room, rate_plan, check_in, check_out)
    res = Reservation(
        id=state.new_id("res"),
        hotel_id=hotel.id,
        room_type=room.code,
        rate_plan=rate_plan,
        check_in=check_in,
        check_out=check_out,
        guests=guests,
        guest_name=guest_name.strip(),
        email=email,
        nights=nights,
        room_total=major(total),
        taxes=major(taxes),
        amount=major(total + taxes),
        currency=hotel.currency,
        created_at=state.now,
    )
    state.reservations[res.id] = res
    return res


@env.tool(read_only=True)
def get_reservation(state: HotelState, reservation_id: Id) -> Reservation:
    """Get one reservation: hotel, room, dates, nightly prices, taxes, total, requests and status.

    Args:
        reservation_id: The reservation id (res_...), from reserve_room or list_reservations.
    """
    return _reservation(state, reservation_id)


@env.tool(read_only=True)
def list_reservations(
    state: HotelState, email: Email, status: Literal["confirmed", "cancelled"] | None = None
) -> list[Reservation]:
    """List the reservations made under an email address, earliest check-in first.

    Args:
        email: The guest's email address (any case).
        status: Only "confirmed" or only "cancelled" reservations.
    """
    found = [
        r
        for r in state.reservations.values()
        if r.email.lower() == email.lower() and (status is None or r.status == status)
    ]
    return sorted(found, key=lambda r: (r.check_in, r.id))


@env.tool
def modify_reservation(
    state: HotelState,
    reservation_id: Id,
    check_in: date | None = None,
    check_out: date | None = None,
    guests: Guests | None = None,
    room_type: Annotated[str, Field(min_length=1, max_length=30)] | None = None,
) -> ModifiedReservation:
    """Change the dates, guests or room type of a flexible reservation before check-in; it is repriced at today's rates.

    Nonrefundable reservations cannot be modified (cancel and rebook instead). Omitted fields stay as they are.

    Args:
        reservation_id: The reservation id (res_...), from list_reservations.
        check_in: The new arrival date.
        check_out: The new departure date.
        guests: The new number of guests.
        room_type: The new room type code (from check_availability).
    """
    res = _open(state, reservation_id, "be modified")
    if res.rate_plan == "nonrefundable":
        raise ToolError(
            f"Reservation {res.id} is nonrefundable and cannot be modified; cancelling it costs the full amount."
        )
    if check_in is None and check_out is None and guests is None and room_type is None:
        raise ToolError("Nothing to change: give check_in, check_out, guests or room_type.")
    hotel = state.hotels[res.hotel_id]
    room = _room(hotel, room_type or res.room_type)
    new_in, new_out = check_in or res.check_in, check_out or res.check_out
    new_guests = guests or res.guests
    _check_dates(state, new_in, new_out)
    if new_guests > room.max_guests:
        raise ToolError(
            f"The {room.name} ({room.code}) sleeps at most {room.max_guests}; choose a larger room type."
        )
    if _rooms_left(state, hotel, room, new_in, new_out, ignore=res.id) <= 0:
        raise ToolError(
            f"No {room.name} ({room.code}) is free at {hotel.name} on every night from {new_in.isoformat()} to "
            f"{new_out.isoformat()}; the reservation is unchanged."
        )
    previous = cents(res.amount)
    nights, total, taxes = _price(hotel, room, res.rate_plan, new_in, new_out)
    res.check_in, res.check_out, res.guests, res.room_type = new_in, new_out, new_guests, room.code
    res.nights, res.room_total, res.taxes = nights, major(total), major(taxes)
    res.amount = major(total + taxes)
    res.modified_at = state.now
    return ModifiedReservation(
        reservation=res, previous_amount=major(previous), difference=major(total + taxes - previous)
    )


@env.tool(read_only=True)
def get_cancellation_quote(state: HotelState, reservation_id: Id) -> CancellationQuote:
    """Say what cancelling a reservation now would cost and refund, and until when it is free.

    Args:
        reservation_id: The reservation id (res_...), from list_reservations.
    """
    res = _open(state, reservation_id, "be cancelled")
    fee = _cancel_fee(state, res)
    return CancellationQuote(
        reservation_id=res.id,
        free_until=_free_until(res.rate_plan, res.check_in),
        fee=major(fee),
        refund=major(cents(res.amount) - fee),
        currency=res.currency,
    )


@env.tool(destructive=True)
def cancel_reservation(state: HotelState, reservation_id: Id) -> Reservation:
    """Cancel a reservation before check-in; flexible ones are free until two days before check-in, then
    the first night with tax is charged; nonrefundable ones are charged in full.

    Args:
        reservation_id: The reservation id (res_...), from list_reservations.
    """
    res = _open(state, reservation_id, "be cancelled")
    res.cancellation_fee = major(_cancel_fee(state, res))
    res.status, res.cancelled_at = "cancelled", state.now
    return res


@env.tool
def add_special_request(
    state: HotelState, reservation_id: Id, request: Annotated[str, Field(min_length=1, max_length=300)]
) -> Reservation:
    """Pass a request to the hotel with a reservation (at most 5), e.g. a late arrival or a quiet room.

    Args:
        reservation_id: The reservation id (res_...), from list_reservations.
        request: The request in plain words, e.g. "Arriving around 23:00".
    """
    res = _open(state, reservation_id, "take requests")
    text = request.strip()
    if not text:
        raise ToolError("The request is blank.")
    if text in res.special_requests:
        raise ToolError(f"Reservation {res.id} already has that request.")
    if len(res.special_requests) >= MAX_REQUESTS:
        raise ToolError(f"Reservation {res.id} already has {MAX_REQUESTS} requests, the most allowed.")
    res.special_requests.append(text)
    return res
