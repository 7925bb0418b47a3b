"""rides: a ride-hailing account: fare estimates, ride requests, tracking, cancellation and rating.

Rules (the tools enforce them and their docstrings repeat them to the agent):

- Rides run in San Francisco, New York, Chicago, Seattle, Boston, Austin, London, Paris and Sydney:
  the pickup must be within 40 km of one of those city centres; a ride is at most 100 km.
- Prices are upfront, in the city's currency: booking fee + max(minimum fare, (base + per km +
  per minute) x surge). Road distance is 1.3 x the straight line; travel time follows the city's
  average speed for the first 5 km and its highway speed beyond, 25% slower in rush hours (07:00-10:00 and 16:00-19:00 on weekdays), when a 1.3 surge
  applies. Times are local to the ride's city.
- A fare estimate (fare_...) is valid for 5 minutes and is used once, by request_ride.
- The nearest available driver of the product within 15 km is assigned; the pickup ETA is the
  driver's road time plus one minute.
- Cancelling is free within 2 minutes of the request, or once the driver is more than 5 minutes
  late; otherwise the product's cancellation fee is charged. Rides in progress cannot be cancelled.
- Completed rides can be rated once, within 30 days, with an optional tip of up to the fare.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, NaiveDatetime, model_validator

from envreg.env import Environment, EnvState, ToolError, lookup
from envreg.env.vocab import EMAIL, City, Currency

_ID = re.compile(r"^([a-z]+)_(\d+)$")
Product = Literal["standard", "comfort", "xl"]
ROAD_FACTOR = 1.3
CITY_KM = 5.0
RUSH_HOURS = ((7, 10), (16, 19))
RUSH_SLOWDOWN = 0.75
RUSH_SURGE = 1.3
CITY_RADIUS_KM = 40.0
MAX_TRIP_KM = 100.0
DRIVER_RADIUS_KM = 15.0
QUOTE_TTL = timedelta(minutes=5)
FREE_CANCEL = timedelta(minutes=2)
LATE_GRACE = timedelta(minutes=5)
RATING_WINDOW = timedelta(days=30)
MAX_QUOTES = 200
EARTH_RADIUS_KM = 6371.0088


def _two_decimals(value: float) -> float:
    if round(value, 2) != value:
        raise ValueError("an amount has at most 2 decimals")
    return value


Amount = Annotated[float, Field(ge=0, le=100_000), AfterValidator(_two_decimals)]
Id = Annotated[str, Field(max_length=64)]
Name = Annotated[str, Field(min_length=1, max_length=200)]
Address = Annotated[str, Field(max_length=300)]
Lat = Annotated[float, Field(ge=-90, le=90)]
Lng = Annotated[float, Field(ge=-180, le=180)]


def cents(amount: float) -> int:
    return round(amount * 100)


def major(value: int) -> float:
    return value / 100


def haversine_km(lat1: float, lng1: float, lat2: float, lng2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lng2 - lng1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(math.sqrt(a))


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Pricing(Model):
    seats: int = Field(ge=1, le=8)
    base: Amount
    per_km: Amount
    per_minute: Amount
    minimum: Amount
    booking_fee: Amount
    cancel_fee: Amount
    description: Annotated[str, Field(max_length=300)] = ""


class Market(Model):
    """A city where rides run, with its centre, currency, traffic speed and prices per product."""

    city: City
    lat: Lat
    lng: Lng
    currency: Currency
    avg_speed_kph: float = Field(gt=0, le=100, description="Average speed on city streets.")
    highway_kph: float = Field(gt=0, le=130, description="Average speed beyond the first 5 km of a ride.")
    products: dict[Product, Pricing] = Field(min_length=1, max_length=3)


class Location(Model):
    lat: Lat
    lng: Lng
    address: Address = ""


class Vehicle(Model):
    make: Annotated[str, Field(max_length=50)]
    model: Annotated[str, Field(max_length=50)]
    color: Annotated[str, Field(max_length=30)]
    plate: Annotated[str, Field(max_length=15)]


class Driver(Model):
    id: Id = Field(pattern=r"^drv_\d{4,}$")
    name: Name
    city: City
    product: Product
    vehicle: Vehicle
    rating: float = Field(ge=1, le=5)
    lat: Lat
    lng: Lng
    status: Literal["available", "on_trip", "offline"] = "available"


class Rider(Model):
    name: Name
    email: Annotated[str, Field(max_length=254, pattern=EMAIL)]
    rating: float = Field(ge=1, le=5)
    default_payment_method_id: Id


class PaymentMethod(Model):
    id: Id = Field(pattern=r"^pm_\d{4,}$")
    label: Name
    kind: Literal["card", "wallet"]


class SavedPlace(Model):
    id: Id = Field(pattern=r"^plc_\d{4,}$")
    label: Annotated[str, Field(min_length=1, max_length=60)]
    location: Location


class FareQuote(Model):
    """An upfront price for one product between two points, valid for 5 minutes."""

    id: Id = Field(pattern=r"^fare_\d{4,}$")
    city: City
    product: Product
    pickup: Location
    dropoff: Location
    distance_km: float = Field(ge=0, le=1000, description="Road distance.")
    duration_min: int = Field(ge=0, le=1000)
    surge: float = Field(ge=1, le=5)
    price: Amount
    currency: Currency
    seats: int
    created_at: NaiveDatetime
    expires_at: NaiveDatetime


class Trip(Model):
    id: Id = Field(pattern=r"^trip_\d{4,}$")
    city: City
    product: Product
    pickup: Location
    dropoff: Location
    driver_id: Id
    payment_method_id: Id
    status: Literal["driver_assigned", "in_progress", "completed", "cancelled"]
    distance_km: float = Field(ge=0, le=1000)
    duration_min: int = Field(ge=0, le=1000)
    surge: float = Field(ge=1, le=5)
    fare: Amount = Field(description="The upfront price.")
    currency: Currency
    requested_at: NaiveDatetime
    pickup_eta: NaiveDatetime = Field(description="When the driver is due at the pickup.")
    started_at: NaiveDatetime | None = None
    completed_at: NaiveDatetime | None = None
    cancelled_at: NaiveDatetime | None = None
    cancellation_fee: Amount | None = None
    rating: int | None = Field(default=None, ge=1, le=5, description="The rider's stars for the driver.")
    tip: Amount = 0
    comment: Annotated[str, Field(max_length=500)] = ""

    @model_validator(mode="after")
    def _consistent(self) -> Trip:
        st = self.status
        if (self.started_at is not None) != (st in ("in_progress", "completed")):
            raise ValueError(f"trip {self.id}: started_at is set exactly when it is in progress or completed")
        if (self.completed_at is not None) != (st == "completed"):
            raise ValueError(f"trip {self.id}: completed_at is set exactly when it is completed")
        if (st == "cancelled") != (self.cancelled_at is not None) or (st == "cancelled") != (
            self.cancellation_fee is not None
        ):
            raise ValueError(
                f"trip {self.id}: cancelled_at and cancellation_fee are set exactly when cancelled"
            )
        if (self.rating is not None or self.tip or self.comment) and st != "completed":
            raise ValueError(f"trip {self.id}: only completed trips carry a rating, tip or comment")
        if self.tip and self.rating is None:
            raise ValueError(f"trip {self.id}: a tip comes with a rating")
        if self.tip > self.fare:
            raise ValueError(f"trip {self.id}: the tip is more than the fare")
        order = [self.requested_at, self.started_at, self.completed_at]
        present = [t for t in order if t is not None]
        if present != sorted(present):
            raise ValueError(f"trip {self.id}: requested, started and completed times are out of order")
        return self


class RidesState(EnvState):
    rider: Rider
    markets: dict[str, Market] = Field(default_factory=dict, max_length=50)
    drivers: dict[str, Driver] = Field(default_factory=dict, max_length=5000)
    payment_methods: dict[str, PaymentMethod] = Field(default_factory=dict, max_length=20)
    saved_places: dict[str, SavedPlace] = Field(default_factory=dict, max_length=50)
    quotes: dict[str, FareQuote] = Field(default_factory=dict, max_length=MAX_QUOTES)
    trips: dict[str, Trip] = Field(default_factory=dict, max_length=20_000)

    @model_validator(mode="after")
    def _integrity(self) -> RidesState:
        for key, market in self.markets.items():
            if key != market.city:
                raise ValueError(f"markets: key {key!r} holds {market.city!r}")
        for table in ("drivers", "payment_methods", "saved_places", "quotes", "trips"):
            for key, item in getattr(self, table).items():
                if key != item.id:
                    raise ValueError(f"{table}: key {key!r} holds {item.id!r}; store each under its own id")
        if self.rider.default_payment_method_id not in self.payment_methods:
            raise ValueError("the rider's default payment method is not one of their payment methods")
        for driver in self.drivers.values():
            market = self.markets.get(driver.city)
            if market is None or driver.product not in market.products:
                raise ValueError(
                    f"driver {driver.id} drives {driver.product} in {driver.city}, which is not offered"
                )
        active: dict[str, str] = {}
        for trip in self.trips.values():
            market = self.markets.get(trip.city)
            if market is None or trip.product not in market.products:
                raise ValueError(f"trip {trip.id}: {trip.product} is not offered in {trip.city}")
            if trip.currency != market.currency:
                raise ValueError(
                    f"trip {trip.id} is in {trip.currency}; {trip.city} prices in {market.currency}"
                )
            driver = self.drivers.get(trip.driver_id)
            if driver is None or driver.product != trip.product or driver.city != trip.city:
                raise ValueError(
                    f"trip {trip.id}: driver {trip.driver_id} does not drive {trip.product} in {trip.city}"
                )
            if trip.payment_method_id not in self.payment_methods:
                raise ValueError(
                    f"trip {trip.id} is paid with unknown payment method {trip.payment_method_id!r}"
                )
            if (
                trip.cancellation_fee is not None
                and trip.cancellation_fee > market.products[trip.product].cancel_fee
            ):
                raise ValueError(f"trip {trip.id}: cancellation fee above the product's fee")
            for at in (trip.requested_at, trip.started_at, trip.completed_at, trip.cancelled_at):
                if at is not None and at > self.now:
                    raise ValueError(f"trip {trip.id} has a timestamp after now ({self.now.isoformat()})")
            if trip.status in ("driver_assigned", "in_progress"):
                if trip.driver_id in active:
                    raise ValueError(
                        f"driver {trip.driver_id} is on two trips: {active[trip.driver_id]} and {trip.id}"
                    )
                active[trip.driver_id] = trip.id
        for driver in self.drivers.values():
            if (driver.status == "on_trip") != (driver.id in active):
                trips = f"active trip {active[driver.id]}" if driver.id in active else "no active trip"
                raise ValueError(f"driver {driver.id} is {driver.status} but has {trips}")
        for quote in self.quotes.values():
            if quote.expires_at != quote.created_at + QUOTE_TTL or quote.created_at > self.now:
                raise ValueError(f"quote {quote.id} must expire 5 minutes after it was created, before now")
        ids = [*self.drivers, *self.payment_methods, *self.saved_places, *self.quotes, *self.trips]
        for ident in ids:
            if m := _ID.match(ident):
                prefix, n = m.group(1), int(m.group(2))
                if self.id_counters.get(prefix, 0) < n:
                    raise ValueError(
                        f"id_counters[{prefix!r}] is {self.id_counters.get(prefix, 0)} but {ident} exists: "
                        "new ids would collide"
                    )
        return self


# ---------------------------------------------------------------- results


class ProductInfo(Model):
    product: Product
    seats: int
    description: str
    base: float
    per_km: float
    per_minute: float
    minimum: float
    booking_fee: float
    cancel_fee: float
    currency: str
    drivers_available: int = Field(description="Available drivers of this product in the city now.")


class TripView(Trip):
    driver_name: str
    driver_rating: float
    vehicle: Vehicle
    driver_lat: float = Field(description="Where the driver is now.")
    driver_lng: float
    minutes_away: int | None = Field(
        description="Until the driver reaches the pickup; null once picked up or over."
    )


class Receipt(Model):
    trip_id: str
    status: str
    distance_km: float
    duration_min: int
    fare: float
    cancellation_fee: float
    tip: float
    amount: float = Field(description="What was charged: fare (or the cancellation fee) plus tip.")
    currency: str
    payment_method_id: str
    payment_label: str


env = Environment(
    "rides",
    RidesState,
    version="1.0.1",
    domain="travel",
    description=(
        "Ride hailing for one rider in nine cities: products and prices, upfront fare estimates between "
        "coordinates (e.g. from a map), requesting a ride with the nearest driver, tracking it, changing "
        "the destination, cancelling (with fees), receipts, ratings and tips, saved places."
    ),
)


# ---------------------------------------------------------------- helpers


def _market_at(state: RidesState, lat: float, lng: float) -> Market:
    best = min(state.markets.values(), key=lambda m: (haversine_km(lat, lng, m.lat, m.lng), m.city))
    km = haversine_km(lat, lng, best.lat, best.lng)
    if km > CITY_RADIUS_KM:
        cities = ", ".join(sorted(state.markets))
        raise ToolError(
            f"({lat}, {lng}) is {km:.0f} km from the nearest city we serve ({best.city}); rides run in "
            f"{cities}."
        )
    return best


def _rush(now: datetime) -> bool:
    return now.weekday() < 5 and any(a <= now.hour < b for a, b in RUSH_HOURS)


def _route(market: Market, a: Location, b: Location, now: datetime) -> tuple[float, int]:
    """Road kilometres and minutes: the first 5 km on city streets, the rest at highway speed."""
    km = round(haversine_km(a.lat, a.lng, b.lat, b.lng) * ROAD_FACTOR, 2)
    slow = RUSH_SLOWDOWN if _rush(now) else 1
    hours = min(km, CITY_KM) / (market.avg_speed_kph * slow) + max(km - CITY_KM, 0) / (
        market.highway_kph * slow
    )
    return km, math.ceil(hours * 60)


def _price(pricing: Pricing, km: float, minutes: int, surge: float) -> int:
    """The upfront price in cents, in integer arithmetic (hundredths of a cent), rounded half up."""
    raw = (
        cents(pricing.base) * 100
        + cents(pricing.per_km) * round(km * 100)
        + cents(pricing.per_minute) * minutes * 100
    )
    variable = (raw * round(surge * 100) + 5000) // 10000
    return cents(pricing.booking_fee) + max(cents(pricing.minimum), variable)


def _offered(market: Market) -> list[Product]:
    """A market's products in the catalog's order, whatever order its state lists them in (a state
    restored from canonical JSON has its keys sorted)."""
    return [p for p in get_args(Product) if p in market.products]


def _quote(state: RidesState, product: str, pickup: Location, dropoff: Location) -> FareQuote:
    market = _market_at(state, pickup.lat, pickup.lng)
    pricing = market.products.get(product)  # type: ignore[call-overload]
    if pricing is None:
        raise ToolError(f"{product} is not offered in {market.city}; it offers {', '.join(_offered(market))}.")
    km, minutes = _route(market, pickup, dropoff, state.now)
    if km / ROAD_FACTOR > MAX_TRIP_KM:
        raise ToolError(
            f"A ride is at most {MAX_TRIP_KM:.0f} km; this one is {km / ROAD_FACTOR:.0f} km in a straight line."
        )
    if km < 0.1:
        raise ToolError("The pickup and the drop-off are the same place.")
    surge = RUSH_SURGE if _rush(state.now) else 1.0
    return FareQuote(
        id="fare_0000",
        city=market.city,
        product=product,  # type: ignore[arg-type]
        pickup=pickup,
        dropoff=dropoff,
        distance_km=km,
        duration_min=minutes,
        surge=surge,
        price=major(_price(pricing, km, minutes, surge)),
        currency=market.currency,
        seats=pricing.seats,
        created_at=state.now,
        expires_at=state.now + QUOTE_TTL,
    )


def _trip(state: RidesState, trip_id: str) -> Trip:
    return lookup(state.trips, trip_id, "trip", "List trips with list_trips.")


def _view(state: RidesState, trip: Trip) -> TripView:
    driver = state.drivers[trip.driver_id]
    lat, lng, away = driver.lat, driver.lng, None
    if trip.status == "driver_assigned":
        total = (trip.pickup_eta - trip.requested_at).total_seconds()
        done = (
            min(max((state.now - trip.requested_at).total_seconds() / total, 0.0), 1.0) if total > 0 else 1.0
        )
        lat = round(driver.lat + (trip.pickup.lat - driver.lat) * done, 5)
        lng = round(driver.lng + (trip.pickup.lng - driver.lng) * done, 5)
        away = max(0, math.ceil((trip.pickup_eta - state.now).total_seconds() / 60))
    elif trip.status == "in_progress":
        lat, lng = trip.pickup.lat, trip.pickup.lng
    elif trip.status == "completed":
        lat, lng = trip.dropoff.lat, trip.dropoff.lng
    return TripView(
        **trip.model_dump(),
        driver_name=driver.name,
        driver_rating=driver.rating,
        vehicle=driver.vehicle,
        driver_lat=lat,
        driver_lng=lng,
        minutes_away=away,
    )


def _location(lat: float, lng: float, address: str) -> Location:
    return Location(lat=lat, lng=lng, address=address.strip())


# ---------------------------------------------------------------- tools


@env.tool(read_only=True)
def list_products(state: RidesState, city: City) -> list[ProductInfo]:
    """List the ride products of a city with seats, prices and how many drivers are available now.

    Args:
        city: One of the cities, e.g. "Seattle"; rides run in San Francisco, New York, Chicago, Seattle,
            Boston, Austin, London, Paris and Sydney.
    """
    market = state.markets.get(city)
    if market is None:
        raise ToolError(f"Rides do not run in {city}; they run in {', '.join(sorted(state.markets))}.")
    out = []
    for product in _offered(market):
        p = market.products[product]
        available = sum(
            1
            for d in state.drivers.values()
            if d.city == city and d.product == product and d.status == "available"
        )
        out.append(
            ProductInfo(
                product=product,
                seats=p.seats,
                description=p.description,
                base=p.base,
                per_km=p.per_km,
                per_minute=p.per_minute,
                minimum=p.minimum,
                booking_fee=p.booking_fee,
                cancel_fee=p.cancel_fee,
                currency=market.currency,
                drivers_available=available,
            )
        )
    return out


@env.tool
def estimate_fare(
    state: RidesState,
    pickup_lat: Lat,
    pickup_lng: Lng,
    dropoff_lat: Lat,
    dropoff_lng: Lng,
    product: Product | None = None,
    pickup_address: Address = "",
    dropoff_address: Address = "",
) -> list[FareQuote]:
    """Get upfront prices between two points, one per product (or for one product); each quote has a
    fare_id that request_ride takes within 5 minutes.

    Args:
        pickup_lat: Pickup latitude (degrees), e.g. from a map's geocode or a saved place.
        pickup_lng: Pickup longitude (degrees).
        dropoff_lat: Drop-off latitude (degrees).
        dropoff_lng: Drop-off longitude (degrees).
        product: Only this product: standard, comfort or xl.
        pickup_address: The pickup address as text, shown to the driver.
        dropoff_address: The drop-off address as text.
    """
    pickup = _location(pickup_lat, pickup_lng, pickup_address)
    dropoff = _location(dropoff_lat, dropoff_lng, dropoff_address)
    market = _market_at(state, pickup.lat, pickup.lng)
    products = [product] if product is not None else _offered(market)
    quotes = [_quote(state, p, pickup, dropoff) for p in products]
    for old in [q for q in state.quotes.values() if q.expires_at <= state.now]:
        del state.quotes[old.id]
    if len(state.quotes) + len(quotes) > MAX_QUOTES:
        raise ToolError("Too many open fare estimates; request a ride or wait 5 minutes for them to expire.")
    out = []
    for quote in quotes:
        stored = quote.model_copy(update={"id": state.new_id("fare")})
        state.quotes[stored.id] = stored
        out.append(stored)
    return out


@env.tool
def request_ride(state: RidesState, fare_id: Id, payment_method_id: Id | None = None) -> TripView:
    """Request a ride at an estimate's upfront price; the nearest available driver of that product
    within 15 km is assigned. The estimate is used up.

    Args:
        fare_id: The estimate (fare_...) from estimate_fare, less than 5 minutes old.
        payment_method_id: How to pay (pm_...), from list_payment_methods; omit for the default one.
    """
    quote = lookup(
        state.quotes, fare_id, "fare estimate", "Get one with estimate_fare (valid 5 minutes, used once)."
    )
    if quote.expires_at <= state.now:
        raise ToolError(
            f"Fare estimate {quote.id} expired at {quote.expires_at.isoformat()}; get a new one with estimate_fare."
        )
    for trip in state.trips.values():
        if trip.status in ("driver_assigned", "in_progress"):
            raise ToolError(f"Trip {trip.id} is still {trip.status.replace('_', ' ')}; one ride at a time.")
    pm_id = payment_method_id or state.rider.default_payment_method_id
    lookup(state.payment_methods, pm_id, "payment method", "See list_payment_methods.")
    market = state.markets[quote.city]
    candidates = [
        (haversine_km(d.lat, d.lng, quote.pickup.lat, quote.pickup.lng), d.id, d)
        for d in state.drivers.values()
        if d.city == quote.city and d.product == quote.product and d.status == "available"
    ]
    candidates = [c for c in candidates if c[0] <= DRIVER_RADIUS_KM]
    if not candidates:
        raise ToolError(
            f"No {quote.product} driver is available within {DRIVER_RADIUS_KM:.0f} km of the pickup; try another "
            "product (estimate_fare lists them) or try again later."
        )
    _, _, driver = min(candidates)
    _, minutes = _route(market, Location(lat=driver.lat, lng=driver.lng), quote.pickup, state.now)
    trip = Trip(
        id=state.new_id("trip"),
        city=quote.city,
        product=quote.product,
        pickup=quote.pickup,
        dropoff=quote.dropoff,
        driver_id=driver.id,
        payment_method_id=pm_id,
        status="driver_assigned",
        distance_km=quote.distance_km,
        duration_min=quote.duration_min,
        surge=quote.surge,
        fare=quote.price,
        currency=quote.currency,
        requested_at=state.now,
        pickup_eta=state.now + timedelta(minutes=minutes + 1),
    )
    driver.status = "on_trip"
    del state.quotes[quote.id]
    state.trips[trip.id] = trip
    return _view(state, trip)


@env.tool(read_only=True)
def get_trip(state: RidesState, trip_id: Id) -> TripView:
    """Track a trip: status, driver and vehicle, where the driver is and how many minutes away.

    Args:
        trip_id: The trip id (trip_...), from request_ride or list_trips.
    """
    return _view(state, _trip(state, trip_id))


@env.tool(read_only=True)
def list_trips(
    state: RidesState,
    status: Literal["driver_assigned", "in_progress", "completed", "cancelled"] | None = None,
    limit: Annotated[int, Field(ge=1, le=50)] = 10,
) -> list[Trip]:
    """List the rider's trips, newest first.

    Args:
        status: Only trips with this status: driver_assigned, in_progress, completed or cancelled.
        limit: The most trips to return (1-50, default 10).
    """
    found = [t for t in state.trips.values() if status is None or t.status == status]
    return sorted(found, key=lambda t: (t.requested_at, t.id), reverse=True)[:limit]


@env.tool
def change_destination(
    state: RidesState, trip_id: Id, dropoff_lat: Lat, dropoff_lng: Lng, dropoff_address: Address = ""
) -> TripView:
    """Change where an active trip goes; the upfront price is recalculated for the new route.

    Args:
        trip_id: The active trip (trip_...), from list_trips.
        dropoff_lat: New drop-off latitude (degrees).
        dropoff_lng: New drop-off longitude (degrees).
        dropoff_address: The new drop-off address as text.
    """
    trip = _trip(state, trip_id)
    if trip.status not in ("driver_assigned", "in_progress"):
        raise ToolError(f"Trip {trip.id} is {trip.status}; only active trips can change destination.")
    dropoff = _location(dropoff_lat, dropoff_lng, dropoff_address)
    quote = _quote(state, trip.product, trip.pickup, dropoff)
    trip.dropoff, trip.distance_km, trip.duration_min = dropoff, quote.distance_km, quote.duration_min
    trip.surge, trip.fare = quote.surge, quote.price
    return _view(state, trip)


@env.tool(destructive=True)
def cancel_ride(state: RidesState, trip_id: Id) -> TripView:
    """Cancel a ride before pickup. Free within 2 minutes of the request or when the driver is more than
    5 minutes late; otherwise the product's cancellation fee is charged.

    Args:
        trip_id: The trip (trip_...) waiting for its driver, from list_trips.
    """
    trip = _trip(state, trip_id)
    if trip.status == "in_progress":
        raise ToolError(f"Trip {trip.id} is in progress; ask the driver to end it, or change_destination.")
    if trip.status != "driver_assigned":
        raise ToolError(f"Trip {trip.id} is already {trip.status}.")
    free = state.now - trip.requested_at <= FREE_CANCEL or state.now > trip.pickup_eta + LATE_GRACE
    fee = 0 if free else cents(state.markets[trip.city].products[trip.product].cancel_fee)
    trip.status, trip.cancelled_at, trip.cancellation_fee = "cancelled", state.now, major(fee)
    state.drivers[trip.driver_id].status = "available"
    return _view(state, trip)


@env.tool
def rate_trip(
    state: RidesState,
    trip_id: Id,
    stars: Annotated[int, Field(ge=1, le=5)],
    tip: Amount = 0,
    comment: Annotated[str, Field(max_length=500)] = "",
) -> Trip:
    """Rate the driver of a completed trip (once, within 30 days), optionally with a tip of up to the fare.

    Args:
        trip_id: The completed trip (trip_...), from list_trips.
        stars: 1 to 5 stars.
        tip: A tip in the trip's currency, charged to its payment method (default 0).
        comment: Optional words for the driver.
    """
    trip = _trip(state, trip_id)
    if trip.status != "completed" or trip.completed_at is None:
        raise ToolError(
            f"Trip {trip.id} is {trip.status.replace('_', ' ')}; only completed trips can be rated."
        )
    if trip.rating is not None:
        raise ToolError(f"Trip {trip.id} was already rated {trip.rating} stars.")
    if state.now - trip.completed_at > RATING_WINDOW:
        raise ToolError(
            f"Trip {trip.id} ended on {trip.completed_at.date().isoformat()}; trips can be rated for 30 days."
        )
    if tip > trip.fare:
        raise ToolError(f"A tip is at most the fare ({trip.fare:.2f} {trip.currency}).")
    trip.rating, trip.tip, trip.comment = stars, tip, comment.strip()
    return trip


@env.tool(read_only=True)
def get_receipt(state: RidesState, trip_id: Id) -> Receipt:
    """Get the receipt of a completed or cancelled trip: fare or cancellation fee, tip, total and payment.

    Args:
        trip_id: The trip id (trip_...), from list_trips.
    """
    trip = _trip(state, trip_id)
    if trip.status not in ("completed", "cancelled"):
        raise ToolError(f"Trip {trip.id} is {trip.status.replace('_', ' ')}; its receipt comes when it ends.")
    fare = cents(trip.fare) if trip.status == "completed" else 0
    fee = cents(trip.cancellation_fee or 0)
    pm = state.payment_methods[trip.payment_method_id]
    return Receipt(
        trip_id=trip.id,
        status=trip.status,
        distance_km=trip.distance_km if trip.status == "completed" else 0,
        duration_min=trip.duration_min if trip.status == "completed" else 0,
        fare=major(fare),
        cancellation_fee=major(fee),
        tip=trip.tip,
        amount=major(fare + fee + cents(trip.tip)),
        currency=trip.currency,
        payment_method_id=pm.id,
        payment_label=pm.label,
    )


@env.tool(read_only=True)
def list_payment_methods(state: RidesState) -> list[PaymentMethod]:
    """List the rider's payment methods; the rider's default one pays when none is named."""
    return sorted(state.payment_methods.values(), key=lambda p: p.id)


@env.tool(read_only=True)
def list_saved_places(state: RidesState) -> list[SavedPlace]:
    """List the rider's saved places (Home, Work, ...) with their addresses and coordinates."""
    return sorted(state.saved_places.values(), key=lambda p: p.id)


@env.tool
def save_place(
    state: RidesState,
    label: Annotated[str, Field(min_length=1, max_length=60)],
    lat: Lat,
    lng: Lng,
    address: Annotated[str, Field(min_length=1, max_length=300)],
) -> SavedPlace:
    """Save a place under a label for quick pickups and drop-offs; saving an existing label moves it.

    Args:
        label: A short name, e.g. "Gym" or "Home".
        lat: Latitude (degrees), e.g. from a map's geocode.
        lng: Longitude (degrees).
        address: The address as text.
    """
    label = label.strip()
    if not label:
        raise ToolError("label is blank; give the place a short name.")
    _market_at(state, lat, lng)
    location = _location(lat, lng, address)
    for place in state.saved_places.values():
        if place.label.lower() == label.lower():
            place.location = location
            return place
    if len(state.saved_places) >= 50:
        raise ToolError("At most 50 saved places.")
    place = SavedPlace(id=state.new_id("plc"), label=label, location=location)
    state.saved_places[place.id] = place
    return place
