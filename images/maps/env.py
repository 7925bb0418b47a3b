"""maps: geocoding, places, distances and directions in twelve cities, plus the user's saved places.

Coordinates are WGS84 degrees. Distances are great-circle kilometres; a route is that distance times a
detour factor of its travel mode, and its duration follows from the mode's speed (driving is slower in
rush hour). Opening hours and departure times are local to the place's city: the environment clock
(`state.now`) is read as local time wherever it is used.

Rules the tools enforce (and their docstrings repeat):
- Walking routes are at most 30 km, cycling 100 km, transit stays within one city, driving stays on one
  continent and at most 1,500 km.
- A place added by the user must lie within 50 km of its city's centre and must not duplicate a place
  with the same name at the same address.
- A place can be in each saved list once; there are at most 200 saved places.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime, time, timedelta
from itertools import pairwise
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NaiveDatetime, model_validator

from envreg.env import Environment, EnvState, ToolError, fold, id_problems, lookup, matches, words
from envreg.env.vocab import City as CityName

Category = Literal[
    "airport", "station", "museum", "park", "landmark", "restaurant", "cafe", "shopping", "pharmacy"
]
Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
Mode = Literal["driving", "walking", "cycling", "transit"]
Continent = Literal["North America", "Europe", "Asia", "Oceania"]

Id = Annotated[str, Field(max_length=64)]
Name = Annotated[str, Field(min_length=1, max_length=200)]
Address = Annotated[str, Field(min_length=1, max_length=300)]
Note = Annotated[str, Field(max_length=2000)]
ListName = Annotated[str, Field(min_length=1, max_length=60)]
Lat = Annotated[float, Field(ge=-90, le=90)]
Lng = Annotated[float, Field(ge=-180, le=180)]

WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
EARTH_RADIUS_KM = 6371.0088
CITY_RADIUS_KM = 50.0
REVERSE_PLACE_RADIUS_M = 250
MAX_SAVED = 200
MAX_PLACES = 2000
DETOUR = {"driving": 1.30, "walking": 1.20, "cycling": 1.25, "transit": 1.35}
MAX_ROUTE_KM = {"walking": 30.0, "cycling": 100.0, "driving": 1500.0}
WALK_KPH, CYCLE_KPH, TRANSIT_KPH, TRANSIT_WAIT_MIN = 4.8, 15.0, 22.0, 6
CITY_DRIVE_KM, CITY_DRIVE_KPH, ROAD_KPH, RUSH_FACTOR = 30.0, 30.0, 90.0, 1.4
RUSH_HOURS = ((7, 10), (16, 19))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class City(_Model):
    """One of the cities the map covers; its coordinates are the city centre."""

    name: CityName
    country: Annotated[str, Field(min_length=1, max_length=60)]
    country_code: Annotated[str, Field(pattern=r"^[A-Z]{2}$", max_length=2)]
    continent: Continent
    timezone: Annotated[str, Field(max_length=60, description="IANA time zone of the city (informational).")]
    lat: Lat
    lng: Lng


class Interval(_Model):
    """Open from `opens` to `closes` on the same day."""

    opens: time
    closes: time

    @model_validator(mode="after")
    def _order(self) -> Interval:
        if self.closes <= self.opens:
            raise ValueError(f"opening interval closes ({self.closes}) before it opens ({self.opens})")
        return self


class Place(_Model):
    """A point of interest."""

    id: Annotated[str, Field(pattern=r"^pl_\d{4,}$", max_length=64)]
    name: Name
    category: Category
    city: CityName
    address: Address
    lat: Lat
    lng: Lng
    phone: Annotated[str, Field(max_length=40)] = ""
    rating: float | None = Field(default=None, ge=1, le=5, description="Average visitor rating, 1-5.")
    price_level: int | None = Field(default=None, ge=1, le=4, description="1 (cheap) to 4 (expensive).")
    hours: dict[Weekday, Annotated[list[Interval], Field(max_length=4)]] | None = Field(
        default=None,
        description="Opening hours per weekday (a day that is missing is closed); null when always open.",
    )
    added_by_user: bool = Field(
        default=False, description="Added with add_place rather than from the map data."
    )

    @model_validator(mode="after")
    def _hours(self) -> Place:
        for day, intervals in (self.hours or {}).items():
            ordered = sorted(intervals, key=lambda i: i.opens)
            for a, b in pairwise(ordered):
                if b.opens < a.closes:
                    raise ValueError(f"place {self.id}: opening intervals overlap on {day}")
        return self


class SavedPlace(_Model):
    """A place the user saved to one of their lists."""

    id: Annotated[str, Field(pattern=r"^sav_\d{4,}$", max_length=64)]
    place_id: Id
    list_name: ListName
    note: Note = ""
    saved_at: NaiveDatetime


class MapsState(EnvState):
    """The cities, the places in them and the user's saved places."""

    cities: dict[CityName, City] = Field(default_factory=dict)
    places: dict[str, Place] = Field(default_factory=dict, max_length=MAX_PLACES)
    saved: dict[str, SavedPlace] = Field(default_factory=dict, max_length=MAX_SAVED)

    @model_validator(mode="after")
    def _integrity(self) -> MapsState:
        problems = id_problems(self, {"pl": self.places, "sav": self.saved})
        for key, city in self.cities.items():
            if key != city.name:
                problems.append(f"cities: key {key!r} holds {city.name!r}")
        seen: dict[tuple[str, str], str] = {}
        for place in self.places.values():
            city = self.cities.get(place.city)
            if city is None:
                problems.append(f"place {place.id} is in {place.city}, which has no city entry")
                continue
            away = haversine_km(city.lat, city.lng, place.lat, place.lng)
            if away > CITY_RADIUS_KM:
                problems.append(
                    f"place {place.id} is {away:.1f} km from the centre of {place.city}; "
                    f"places lie within {CITY_RADIUS_KM:.0f} km"
                )
            key = (fold(place.name), fold(place.address))
            if key in seen:
                problems.append(f"places {seen[key]} and {place.id} have the same name and address")
            seen[key] = place.id
        lists: Counter[tuple[str, str]] = Counter()
        for item in self.saved.values():
            if item.place_id not in self.places:
                problems.append(f"saved place {item.id} refers to unknown place {item.place_id}")
            if item.saved_at > self.now:
                problems.append(f"saved place {item.id} was saved after now ({self.now.isoformat()})")
            lists[(fold(item.list_name), item.place_id)] += 1
        for (list_name, place_id), n in lists.items():
            if n > 1:
                problems.append(f"place {place_id} is saved {n} times in list {list_name!r}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


# ---- results ------------------------------------------------------------------------------------------


class Location(_Model):
    """A resolved point: an address of a place, or a city centre."""

    kind: Literal["place", "city"]
    address: str
    city: CityName
    lat: float
    lng: float
    place_id: str | None = Field(default=None, description="The place at this address, if any.")
    name: str | None = Field(default=None, description="The place's name, if any.")


class ReverseLocation(_Model):
    """What lies at a coordinate: the nearest place within 250 m, or else the nearest city."""

    city: CityName
    address: str | None = Field(
        description="The nearest place's address; null when no place is within 250 m."
    )
    place_id: str | None
    name: str | None
    distance_m: int = Field(description="Metres from the coordinate to that place (or to the city centre).")


class PlaceSummary(_Model):
    id: str
    name: str
    category: Category
    city: CityName
    address: str
    lat: float
    lng: float
    rating: float | None
    price_level: int | None


class NearbyPlace(PlaceSummary):
    distance_m: int = Field(description="Straight-line metres from the search point.")


class Distance(_Model):
    """A straight-line (great-circle) distance."""

    km: float
    miles: float


class Route(_Model):
    """A route between two points for one travel mode."""

    origin: Location
    destination: Location
    mode: Mode
    distance_km: float = Field(description="Along the route (straight line times the mode's detour factor).")
    straight_line_km: float
    duration_minutes: int
    depart_at: datetime
    arrive_at: datetime
    rush_hour: bool = Field(
        description="Driving off in weekday rush hour (07-10, 16-19): the first 30 km take 40% longer."
    )


class SavedPlaceView(_Model):
    """A saved place with the place it points to."""

    id: str
    list_name: str
    note: str
    saved_at: datetime
    place: PlaceSummary


env = Environment(
    "maps",
    MapsState,
    version="1.0.1",
    domain="utilities",
    description=(
        "Maps for twelve cities: geocode addresses, reverse-geocode coordinates, search places and find "
        "them nearby with opening hours, straight-line distances, directions by car, foot, bike or transit, "
        "and the user's saved places."
    ),
)


# ---- helpers ------------------------------------------------------------------------------------------


def haversine_km(lat1: float, lng1: float, lat2: float, lng2: float) -> float:
    """Great-circle distance in kilometres."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lng2 - lng1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(math.sqrt(a))


def _place(state: MapsState, place_id: str) -> Place:
    return lookup(state.places, place_id, "place", "Find places with search_places or places_nearby.")


def _summary(place: Place) -> PlaceSummary:
    return PlaceSummary(**place.model_dump(include=set(PlaceSummary.model_fields)))


def _is_open(place: Place, at: datetime) -> bool:
    if place.hours is None:
        return True
    moment = at.time()
    return any(i.opens <= moment < i.closes for i in place.hours.get(WEEKDAYS[at.weekday()], []))


def _place_location(place: Place) -> Location:
    return Location(
        kind="place",
        address=place.address,
        city=place.city,
        lat=place.lat,
        lng=place.lng,
        place_id=place.id,
        name=place.name,
    )


def _city_location(city: City) -> Location:
    return Location(
        kind="city", address=f"{city.name}, {city.country}", city=city.name, lat=city.lat, lng=city.lng
    )


def _geocode(state: MapsState, text: str, city: str | None = None) -> list[Location]:
    """Cities whose name is the text, then places whose address is the text, then places whose
    address, name and city contain every word of it."""
    folded = " ".join(words(text))
    if not folded:
        raise ToolError("The address is blank; give a street address with its city, or a city name.")
    cities = [
        c
        for c in sorted(state.cities.values(), key=lambda c: c.name)
        if folded in (" ".join(words(c.name)), " ".join(words(f"{c.name} {c.country}")))
        and (city is None or c.name == city)
    ]
    places = sorted((p for p in state.places.values() if city is None or p.city == city), key=lambda p: p.id)
    exact = [p for p in places if " ".join(words(p.address)) == folded]
    partial = [p for p in places if p not in exact and matches(text, p.address, p.name, p.city)]
    return [_city_location(c) for c in cities] + [_place_location(p) for p in exact + partial]


def _resolve(state: MapsState, point: str, role: str) -> Location:
    """A route end: a place id, or an address / place name / city name that resolves to one location."""
    point = point.strip()
    if point in state.places:
        return _place_location(state.places[point])
    found = _geocode(state, point)
    if not found:
        raise ToolError(
            f"The {role} {point!r} matches no address, place or city. Use geocode or search_places to find "
            "it, then pass its place id."
        )
    wanted = words(point)
    exact = [f for f in found if f.kind == "city" or wanted in (words(f.address), words(f.name or ""))]
    if exact:
        return exact[0]
    if len(found) > 1:
        options = "; ".join(f"{f.place_id} {f.name} ({f.address})" for f in found[:5])
        raise ToolError(f"The {role} {point!r} is ambiguous: {options}. Pass a place id instead.")
    return found[0]


def _continent(state: MapsState, loc: Location) -> str:
    return state.cities[loc.city].continent


def _rush_hour(at: datetime) -> bool:
    return at.weekday() < 5 and any(lo <= at.hour < hi for lo, hi in RUSH_HOURS)


# ---- tools --------------------------------------------------------------------------------------------


@env.tool(read_only=True)
def list_cities(state: MapsState) -> list[City]:
    """List the cities the map covers, with their country, time zone and centre coordinates."""
    return sorted(state.cities.values(), key=lambda c: c.name)


@env.tool(read_only=True)
def geocode(
    state: MapsState,
    address: Annotated[str, Field(min_length=1, max_length=300)],
    city: CityName | None = None,
    limit: Annotated[int, Field(ge=1, le=20)] = 5,
) -> list[Location]:
    """Turn an address, a place name or a city name into coordinates.

    Exact matches come first: a city name gives the city centre, a full address gives the place at
    that address; then places whose address, name and city contain every word given. Case, accents and
    punctuation are ignored.

    Args:
        address: A street address with its city ("151 3rd St, San Francisco"), a place name, or a city name.
        city: Only look in this city.
        limit: The most results to return (1-20, default 5).
    """
    found = _geocode(state, address, city)
    if not found:
        raise ToolError(
            f"No address, place or city matches {address!r}"
            + (f" in {city}" if city else "")
            + ". Check the spelling, give fewer words, or search by name with search_places."
        )
    return found[:limit]


@env.tool(read_only=True)
def reverse_geocode(state: MapsState, lat: Lat, lng: Lng) -> ReverseLocation:
    """Find what lies at a coordinate: the nearest place within 250 m, otherwise the city it is in.

    Args:
        lat: Latitude in degrees (-90 to 90).
        lng: Longitude in degrees (-180 to 180).
    """
    nearest = min(
        state.places.values(),
        key=lambda p: (haversine_km(lat, lng, p.lat, p.lng), p.id),
        default=None,
    )
    if nearest is not None:
        metres = round(haversine_km(lat, lng, nearest.lat, nearest.lng) * 1000)
        if metres <= REVERSE_PLACE_RADIUS_M:
            return ReverseLocation(
                city=nearest.city,
                address=nearest.address,
                place_id=nearest.id,
                name=nearest.name,
                distance_m=metres,
            )
    city = min(state.cities.values(), key=lambda c: (haversine_km(lat, lng, c.lat, c.lng), c.name))
    km = haversine_km(lat, lng, city.lat, city.lng)
    if km > CITY_RADIUS_KM:
        raise ToolError(
            f"({lat}, {lng}) is {km:.0f} km from the nearest covered city ({city.name}); the map covers "
            f"{CITY_RADIUS_KM:.0f} km around each city in list_cities."
        )
    return ReverseLocation(
        city=city.name, address=None, place_id=None, name=None, distance_m=round(km * 1000)
    )


@env.tool(read_only=True)
def search_places(
    state: MapsState,
    query: Annotated[str, Field(min_length=1, max_length=200)],
    city: CityName | None = None,
    category: Category | None = None,
    open_at: NaiveDatetime | None = None,
    limit: Annotated[int, Field(ge=1, le=50)] = 10,
) -> list[PlaceSummary]:
    """Search places by name, category or address; best rated first.

    Every word of the query must start a word of the place's name, category or address (case and
    accents are ignored), e.g. "museum", "coffee", "pike".

    Args:
        query: Words to look for, e.g. "art museum" or "bakery".
        city: Only places in this city.
        category: Only places of this category.
        open_at: Only places open at this local time, e.g. "2026-01-06T19:30:00".
        limit: The most results to return (1-50, default 10).
    """
    hits = [
        p
        for p in state.places.values()
        if (city is None or p.city == city)
        and (category is None or p.category == category)
        and matches(query, p.name, p.category, p.address)
        and (open_at is None or _is_open(p, open_at))
    ]
    hits.sort(key=lambda p: (-(p.rating or 0), fold(p.name), p.id))
    return [_summary(p) for p in hits[:limit]]


@env.tool(read_only=True)
def get_place(state: MapsState, place_id: Id) -> Place:
    """Get a place's details: address, coordinates, phone, rating, price level and opening hours.

    Args:
        place_id: The place's id, e.g. "pl_0004" (from search_places, places_nearby or geocode).
    """
    return _place(state, place_id)


@env.tool(read_only=True)
def places_nearby(
    state: MapsState,
    lat: Lat,
    lng: Lng,
    radius_m: Annotated[int, Field(ge=10, le=50_000)] = 1000,
    category: Category | None = None,
    open_at: NaiveDatetime | None = None,
    limit: Annotated[int, Field(ge=1, le=50)] = 10,
) -> list[NearbyPlace]:
    """Find places within a radius of a coordinate, nearest first.

    Args:
        lat: Latitude of the search point, e.g. from geocode.
        lng: Longitude of the search point.
        radius_m: Search radius in metres (10-50000, default 1000).
        category: Only places of this category.
        open_at: Only places open at this local time, e.g. "2026-01-06T08:00:00".
        limit: The most results to return (1-50, default 10).
    """
    found = []
    for p in state.places.values():
        metres = round(haversine_km(lat, lng, p.lat, p.lng) * 1000)
        wanted = category is None or p.category == category
        if metres <= radius_m and wanted and (open_at is None or _is_open(p, open_at)):
            found.append(NearbyPlace(**_summary(p).model_dump(), distance_m=metres))
    found.sort(key=lambda n: (n.distance_m, n.id))
    return found[:limit]


@env.tool(read_only=True)
def get_distance(state: MapsState, lat: Lat, lng: Lng, to_lat: Lat, to_lng: Lng) -> Distance:
    """Straight-line (great-circle) distance between two coordinates, in kilometres and miles.

    Args:
        lat: Latitude of the first point.
        lng: Longitude of the first point.
        to_lat: Latitude of the second point.
        to_lng: Longitude of the second point.
    """
    km = haversine_km(lat, lng, to_lat, to_lng)
    return Distance(km=round(km, 2), miles=round(km / 1.609344, 2))


@env.tool(read_only=True)
def get_directions(
    state: MapsState,
    origin: Annotated[str, Field(min_length=1, max_length=300)],
    destination: Annotated[str, Field(min_length=1, max_length=300)],
    mode: Mode = "driving",
    depart_at: NaiveDatetime | None = None,
) -> Route:
    """Plan a route between two places, addresses or cities, with its distance, duration and arrival time.

    The route distance is the straight line times a detour factor (driving 1.30, walking 1.20,
    cycling 1.25, transit 1.35). Speeds: walking 4.8 km/h, cycling 15 km/h, transit 22 km/h plus 6
    minutes of waiting, driving 30 km/h for the first 30 km and 90 km/h beyond; in weekday rush hour
    (07:00-10:00, 16:00-19:00) those first 30 km take 40% longer. Limits: walking 30 km, cycling 100 km,
    transit within one city, driving 1,500 km on one continent.

    Args:
        origin: Where to start: a place id ("pl_0002"), a full address, a place name or a city name.
        destination: Where to go, in the same forms as origin.
        mode: "driving" (default), "walking", "cycling" or "transit".
        depart_at: Local departure time, e.g. "2026-01-06T08:30:00"; omit to leave now.
    """
    start = _resolve(state, origin, "origin")
    end = _resolve(state, destination, "destination")
    when = state.now if depart_at is None else depart_at
    if when < state.now:
        raise ToolError(f"depart_at {when.isoformat()} is in the past; it is now {state.now.isoformat()}.")
    straight = haversine_km(start.lat, start.lng, end.lat, end.lng)
    if straight < 0.01:
        raise ToolError("The origin and destination are the same point.")
    distance = straight * DETOUR[mode]
    if mode == "transit" and start.city != end.city:
        raise ToolError(
            f"Transit routes stay within one city; {start.city} to {end.city} needs driving or a flight."
        )
    if mode == "driving" and _continent(state, start) != _continent(state, end):
        raise ToolError(
            f"There is no road from {start.city} to {end.city}; they are on different continents."
        )
    limit = MAX_ROUTE_KM.get(mode)
    if limit is not None and distance > limit:
        raise ToolError(
            f"A {mode} route from {start.city} to {end.city} would be {distance:.0f} km; {mode} routes are "
            f"at most {limit:.0f} km. Try another mode."
        )
    rush = False
    if mode == "walking":
        hours = distance / WALK_KPH
    elif mode == "cycling":
        hours = distance / CYCLE_KPH
    elif mode == "transit":
        hours = distance / TRANSIT_KPH + TRANSIT_WAIT_MIN / 60
    else:
        city_km = min(distance, CITY_DRIVE_KM)
        rush = _rush_hour(when)
        hours = city_km / CITY_DRIVE_KPH * (RUSH_FACTOR if rush else 1) + (distance - city_km) / ROAD_KPH
    minutes = max(1, math.ceil(hours * 60))
    return Route(
        origin=start,
        destination=end,
        mode=mode,
        distance_km=round(distance, 2),
        straight_line_km=round(straight, 2),
        duration_minutes=minutes,
        depart_at=when,
        arrive_at=when + timedelta(minutes=minutes),
        rush_hour=rush,
    )


@env.tool
def add_place(
    state: MapsState,
    name: Name,
    category: Category,
    city: CityName,
    address: Address,
    lat: Lat,
    lng: Lng,
    phone: Annotated[str, Field(max_length=40)] = "",
) -> Place:
    """Add a place that is missing from the map; it can then be searched, saved and routed to.

    The place must lie within 50 km of the city's centre, and no place with the same name may exist at
    the same address. Its opening hours are unknown (null) until the map data provides them.

    Args:
        name: The place's name, e.g. "Blue Door Bakery".
        category: Its category, e.g. "cafe".
        city: The city it is in.
        address: Its street address, including the city, e.g. "12 Hayes St, San Francisco, CA 94102".
        lat: Its latitude (from geocode or the user's device).
        lng: Its longitude.
        phone: Its phone number, if known.
    """
    if not name.strip() or not address.strip():
        raise ToolError("The name and the address must not be blank.")
    centre = state.cities[city]
    away = haversine_km(centre.lat, centre.lng, lat, lng)
    if away > CITY_RADIUS_KM:
        raise ToolError(
            f"({lat}, {lng}) is {away:.1f} km from the centre of {city}; places must lie within "
            f"{CITY_RADIUS_KM:.0f} km of it. Check the coordinates or the city."
        )
    for other in sorted(state.places.values(), key=lambda p: p.id):
        if fold(other.name.strip()) == fold(name.strip()) and fold(other.address) == fold(address.strip()):
            raise ToolError(f"{other.name} at {other.address} is already on the map as {other.id}.")
    if len(state.places) >= MAX_PLACES:
        raise ToolError(f"The map holds at most {MAX_PLACES} places.")
    place = Place(
        id=state.new_id("pl"),
        name=name.strip(),
        category=category,
        city=city,
        address=address.strip(),
        lat=lat,
        lng=lng,
        phone=phone.strip(),
        added_by_user=True,
    )
    state.places[place.id] = place
    return place


@env.tool
def save_place(
    state: MapsState, place_id: Id, list_name: ListName = "Favorites", note: Note = ""
) -> SavedPlaceView:
    """Save a place to one of the user's lists ("Favorites" by default; a new list name starts a list).

    A place can be in each list once; at most 200 places can be saved.

    Args:
        place_id: The place to save, e.g. "pl_0003".
        list_name: The list to save it to, e.g. "Want to go" (case is ignored when matching a list).
        note: A note to keep with it.
    """
    place = _place(state, place_id)
    if not list_name.strip():
        raise ToolError("The list name is blank.")
    existing = {fold(s.list_name): s.list_name for s in state.saved.values()}
    name = existing.get(fold(list_name.strip()), list_name.strip())
    for item in sorted(state.saved.values(), key=lambda s: s.id):
        if item.place_id == place.id and item.list_name == name:
            raise ToolError(f"{place.name} is already in {name!r} as {item.id}.")
    if len(state.saved) >= MAX_SAVED:
        raise ToolError(f"At most {MAX_SAVED} places can be saved; remove some with remove_saved_place.")
    item = SavedPlace(
        id=state.new_id("sav"), place_id=place.id, list_name=name, note=note, saved_at=state.now
    )
    state.saved[item.id] = item
    return SavedPlaceView(
        id=item.id, list_name=item.list_name, note=item.note, saved_at=item.saved_at, place=_summary(place)
    )


@env.tool(read_only=True)
def list_saved_places(state: MapsState, list_name: ListName | None = None) -> list[SavedPlaceView]:
    """List the user's saved places, by list and then in the order they were saved.

    Args:
        list_name: Only this list (case is ignored); omit for every list.
    """
    items = [
        s for s in state.saved.values() if list_name is None or fold(s.list_name) == fold(list_name.strip())
    ]
    if list_name is not None and not items:
        names = sorted({s.list_name for s in state.saved.values()})
        raise ToolError(f"No saved list named {list_name!r}. The lists are: {', '.join(names) or 'none'}.")
    items.sort(key=lambda s: (fold(s.list_name), s.id))
    return [
        SavedPlaceView(
            id=s.id,
            list_name=s.list_name,
            note=s.note,
            saved_at=s.saved_at,
            place=_summary(state.places[s.place_id]),
        )
        for s in items
    ]


@env.tool(destructive=True)
def remove_saved_place(state: MapsState, saved_id: Id) -> SavedPlace:
    """Remove a place from a saved list (the place itself stays on the map).

    Args:
        saved_id: The saved entry's id, e.g. "sav_0002" (from list_saved_places).
    """
    item = lookup(state.saved, saved_id, "saved place", "List them with list_saved_places.")
    del state.saved[item.id]
    return item
