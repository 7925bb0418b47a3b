"""weather: daily observations and forecasts, hourly outlooks and weather alerts for twelve cities.

The data is seeded: each city has one record per day over a window of dates. Days before today (the
date of `state.now`) are observations, today and later are forecasts. Hourly values are derived from
the day's record (coldest at 06:00, warmest at 15:00). Dates and times are local to each city: the
environment clock is read as local time in every city.

Alerts have an onset and an expiry; they are "upcoming" before the onset, "active" until they expire,
then "expired". Users subscribe an email address to a city's alerts from a minimum severity on.
Values are reported in the units of the settings (metric: °C, mm, km/h; imperial: °F, in, mph).
"""

from __future__ import annotations

import math
from datetime import date, datetime, time, timedelta
from itertools import pairwise
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NaiveDatetime, model_validator

from envreg.env import Environment, EnvState, ToolError, id_problems, lookup
from envreg.env.vocab import City as CityName

Condition = Literal[
    "sunny",
    "partly_cloudy",
    "cloudy",
    "fog",
    "windy",
    "light_rain",
    "rain",
    "heavy_rain",
    "thunderstorm",
    "sleet",
    "snow",
]
HourCondition = Literal[Condition, "clear"]
Severity = Literal["minor", "moderate", "severe", "extreme"]
AlertKind = Literal[
    "winter_storm", "snow", "frost", "wind", "flood", "fog", "heat", "dry_air", "thunderstorm"
]
Units = Literal["metric", "imperial"]

Id = Annotated[str, Field(max_length=64)]
Email = Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$", max_length=254)]

WET: frozenset[str] = frozenset({"light_rain", "rain", "heavy_rain", "thunderstorm", "sleet", "snow"})
SEVERITY_RANK = {"minor": 0, "moderate": 1, "severe": 2, "extreme": 3}
MAX_DAYS = 60
MAX_FORECAST_DAYS = 10
MAX_SUBSCRIPTIONS = 500
COLDEST_HOUR, WARMEST_HOUR = 6, 15


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DailyRecord(_Model):
    """One day's weather in one city (metric units)."""

    date: date
    condition: Condition
    temp_min_c: float = Field(ge=-60, le=60)
    temp_max_c: float = Field(ge=-60, le=60)
    precip_probability: int = Field(ge=0, le=100, description="Chance of precipitation, percent.")
    precip_mm: float = Field(ge=0, le=500, description="Precipitation in millimetres (water equivalent).")
    wind_kph: int = Field(ge=0, le=300)
    humidity: int = Field(ge=0, le=100, description="Relative humidity, percent.")

    @model_validator(mode="after")
    def _consistent(self) -> DailyRecord:
        if self.temp_min_c > self.temp_max_c:
            raise ValueError(
                f"{self.date}: temp_min_c {self.temp_min_c} is above temp_max_c {self.temp_max_c}"
            )
        if (self.condition in WET) != (self.precip_mm > 0):
            raise ValueError(
                f"{self.date}: a {self.condition} day must "
                + ("have" if self.condition in WET else "have no")
                + " precipitation"
            )
        if self.precip_mm > 0 and self.precip_probability == 0:
            raise ValueError(f"{self.date}: precipitation with a 0% chance of it")
        if self.condition == "snow" and self.temp_min_c > 1:
            raise ValueError(f"{self.date}: snow with a low of {self.temp_min_c} °C")
        return self


class CityWeather(_Model):
    """A city and its daily records, one per consecutive day."""

    city: CityName
    lat: float = Field(ge=-90, le=90)
    lng: float = Field(ge=-180, le=180)
    daily: list[DailyRecord] = Field(min_length=1, max_length=MAX_DAYS)

    @model_validator(mode="after")
    def _consecutive(self) -> CityWeather:
        for a, b in pairwise(self.daily):
            if b.date != a.date + timedelta(days=1):
                raise ValueError(
                    f"{self.city}: daily records must be consecutive days; {a.date} is followed by {b.date}"
                )
        return self


class Alert(_Model):
    """A weather alert issued for a city."""

    id: Annotated[str, Field(pattern=r"^alr_\d{4,}$", max_length=64)]
    city: CityName
    kind: AlertKind
    severity: Severity
    headline: Annotated[str, Field(min_length=1, max_length=200)]
    description: Annotated[str, Field(max_length=2000)]
    instruction: Annotated[str, Field(max_length=2000)]
    issued_at: NaiveDatetime
    onset: NaiveDatetime
    expires: NaiveDatetime

    @model_validator(mode="after")
    def _times(self) -> Alert:
        if self.expires <= self.onset:
            raise ValueError(f"alert {self.id} expires ({self.expires}) before its onset ({self.onset})")
        if self.issued_at > self.expires:
            raise ValueError(f"alert {self.id} is issued after it expires")
        return self


class Subscription(_Model):
    """An email address that receives a city's alerts from a minimum severity on."""

    id: Annotated[str, Field(pattern=r"^sub_\d{4,}$", max_length=64)]
    email: Email
    city: CityName
    min_severity: Severity
    created_at: NaiveDatetime


class Settings(_Model):
    units: Units = "metric"


class WeatherState(EnvState):
    """Seeded weather per city, alerts, alert subscriptions and display settings."""

    cities: dict[CityName, CityWeather] = Field(default_factory=dict)
    alerts: dict[str, Alert] = Field(default_factory=dict, max_length=1000)
    subscriptions: dict[str, Subscription] = Field(default_factory=dict, max_length=MAX_SUBSCRIPTIONS)
    settings: Settings = Field(default_factory=Settings)

    @model_validator(mode="after")
    def _integrity(self) -> WeatherState:
        problems = id_problems(self, {"alr": self.alerts, "sub": self.subscriptions})
        for key, city in self.cities.items():
            if key != city.city:
                problems.append(f"cities: key {key!r} holds {city.city!r}")
        for alert in self.alerts.values():
            if alert.city not in self.cities:
                problems.append(f"alert {alert.id} is for {alert.city}, which has no weather data")
            if alert.issued_at > self.now:
                problems.append(f"alert {alert.id} is issued in the future ({alert.issued_at.isoformat()})")
        seen: dict[tuple[str, str], str] = {}
        for sub in self.subscriptions.values():
            if sub.city not in self.cities:
                problems.append(f"subscription {sub.id} is for {sub.city}, which has no weather data")
            if sub.created_at > self.now:
                problems.append(f"subscription {sub.id} is created in the future")
            key = (sub.email.lower(), sub.city)
            if key in seen:
                problems.append(f"{sub.email} is subscribed to {sub.city} twice ({seen[key]} and {sub.id})")
            seen[key] = sub.id
        if problems:
            raise ValueError("; ".join(problems))
        return self


# ---- results ------------------------------------------------------------------------------------------


class DayWeather(_Model):
    """A day's weather in the units of the settings."""

    city: CityName
    date: date
    kind: Literal["observed", "forecast"] = Field(description="Observed for past days, forecast from today.")
    condition: Condition
    temp_min: float
    temp_max: float
    temp_unit: Literal["C", "F"]
    precip_probability: int
    precipitation: float
    precip_unit: Literal["mm", "in"]
    wind: int
    wind_unit: Literal["km/h", "mph"]
    humidity: int


class Conditions(_Model):
    """The weather now."""

    city: CityName
    at: datetime
    condition: HourCondition
    temperature: float
    feels_like: float = Field(description="Wind chill when it is cold and windy, else the temperature.")
    temp_unit: Literal["C", "F"]
    wind: int
    wind_unit: Literal["km/h", "mph"]
    humidity: int
    active_alerts: list[str] = Field(description="Ids of the alerts active in the city now (see get_alert).")


class Hour(_Model):
    time: time
    condition: HourCondition
    temperature: float
    precip_probability: int


class HourlyForecast(_Model):
    city: CityName
    date: date
    temp_unit: Literal["C", "F"]
    hours: list[Hour]


class AlertView(Alert):
    status: Literal["upcoming", "active", "expired"]


class SubscriptionView(Subscription):
    matching_alerts: list[str] = Field(
        description="Ids of the city's alerts, not yet expired, at or above the subscription's severity."
    )


env = Environment(
    "weather",
    WeatherState,
    version="1.0.1",
    domain="utilities",
    description=(
        "Weather for twelve cities from seeded data: current conditions, daily observations and forecasts, "
        "hourly outlooks, dry-day finder and city comparison, weather alerts with alert subscriptions by "
        "email, and metric or imperial units."
    ),
)


# ---- helpers ------------------------------------------------------------------------------------------


def _city(state: WeatherState, city: str) -> CityWeather:
    found = state.cities.get(city)  # type: ignore[call-overload]
    if found is None:
        raise ToolError(f"No weather data for {city}. Cities with data: {', '.join(sorted(state.cities))}.")
    return found


def _record(state: WeatherState, weather: CityWeather, day: date) -> DailyRecord:
    first, last = weather.daily[0].date, weather.daily[-1].date
    if day < first:
        raise ToolError(
            f"{weather.city} has observations from {first.isoformat()} on; {day.isoformat()} is earlier."
        )
    if day > last:
        raise ToolError(
            f"Forecasts for {weather.city} reach {last.isoformat()}; {day.isoformat()} is beyond them."
        )
    return weather.daily[(day - first).days]


def _imperial(state: WeatherState) -> bool:
    return state.settings.units == "imperial"


def _temp(state: WeatherState, celsius: float) -> float:
    return round(celsius * 9 / 5 + 32, 1) if _imperial(state) else round(celsius, 1)


def _wind(state: WeatherState, kph: float) -> int:
    return round(kph / 1.609344) if _imperial(state) else round(kph)


def _day_view(state: WeatherState, city: str, rec: DailyRecord) -> DayWeather:
    imperial = _imperial(state)
    return DayWeather(
        city=city,  # type: ignore[arg-type]
        date=rec.date,
        kind="observed" if rec.date < state.now.date() else "forecast",
        condition=rec.condition,
        temp_min=_temp(state, rec.temp_min_c),
        temp_max=_temp(state, rec.temp_max_c),
        temp_unit="F" if imperial else "C",
        precip_probability=rec.precip_probability,
        precipitation=round(rec.precip_mm / 25.4, 2) if imperial else rec.precip_mm,
        precip_unit="in" if imperial else "mm",
        wind=_wind(state, rec.wind_kph),
        wind_unit="mph" if imperial else "km/h",
        humidity=rec.humidity,
    )


def _temp_at(rec: DailyRecord, hour: int) -> float:
    """Temperature (°C) at a whole hour: a cosine from the low at 06:00 to the high at 15:00 and back."""
    if COLDEST_HOUR <= hour <= WARMEST_HOUR:
        share = (1 - math.cos(math.pi * (hour - COLDEST_HOUR) / (WARMEST_HOUR - COLDEST_HOUR))) / 2
    else:
        since_peak = (hour - WARMEST_HOUR) % 24
        share = (1 + math.cos(math.pi * since_peak / (24 - WARMEST_HOUR + COLDEST_HOUR))) / 2
    return rec.temp_min_c + (rec.temp_max_c - rec.temp_min_c) * share


def _hour_condition(rec: DailyRecord, hour: int) -> str:
    return "clear" if rec.condition == "sunny" and not 7 <= hour < 18 else rec.condition


def _status(state: WeatherState, alert: Alert) -> Literal["upcoming", "active", "expired"]:
    if state.now < alert.onset:
        return "upcoming"
    return "active" if state.now < alert.expires else "expired"


def _alert_view(state: WeatherState, alert: Alert) -> AlertView:
    return AlertView(**alert.model_dump(), status=_status(state, alert))


def _open_alerts(state: WeatherState, city: str | None, min_severity: Severity) -> list[Alert]:
    found = [
        a
        for a in state.alerts.values()
        if (city is None or a.city == city)
        and SEVERITY_RANK[a.severity] >= SEVERITY_RANK[min_severity]
        and _status(state, a) != "expired"
    ]
    return sorted(found, key=lambda a: (a.onset, a.id))


def _subscription_view(state: WeatherState, sub: Subscription) -> SubscriptionView:
    matching = [a.id for a in _open_alerts(state, sub.city, sub.min_severity)]
    return SubscriptionView(**sub.model_dump(), matching_alerts=matching)


# ---- tools --------------------------------------------------------------------------------------------


@env.tool(read_only=True)
def get_current_conditions(state: WeatherState, city: CityName) -> Conditions:
    """Get the weather in a city now: condition, temperature, wind chill, wind, humidity and active alerts.

    Args:
        city: The city, e.g. "Chicago".
    """
    weather = _city(state, city)
    rec = _record(state, weather, state.now.date())
    celsius = _temp_at(rec, state.now.hour)
    feels = celsius
    if celsius <= 10 and rec.wind_kph > 4.8:
        v = rec.wind_kph**0.16
        feels = 13.12 + 0.6215 * celsius - 11.37 * v + 0.3965 * celsius * v
    imperial = _imperial(state)
    return Conditions(
        city=city,
        at=state.now,
        condition=_hour_condition(rec, state.now.hour),  # type: ignore[arg-type]
        temperature=_temp(state, celsius),
        feels_like=_temp(state, feels),
        temp_unit="F" if imperial else "C",
        wind=_wind(state, rec.wind_kph),
        wind_unit="mph" if imperial else "km/h",
        humidity=rec.humidity,
        active_alerts=[a.id for a in _open_alerts(state, city, "minor") if _status(state, a) == "active"],
    )


@env.tool(read_only=True)
def get_forecast(
    state: WeatherState,
    city: CityName,
    date: date | None = None,
    days: Annotated[int, Field(ge=1, le=MAX_FORECAST_DAYS)] = 1,
) -> list[DayWeather]:
    """Get the daily weather of a city for one or more days: observed for past days, forecast from today.

    Args:
        city: The city, e.g. "Boston".
        date: The first day, e.g. "2026-01-07"; omit for today.
        days: How many consecutive days (1-10, default 1).
    """
    weather = _city(state, city)
    first = state.now.date() if date is None else date
    _record(state, weather, first)
    _record(state, weather, first + timedelta(days=days - 1))
    return [_day_view(state, city, _record(state, weather, first + timedelta(days=i))) for i in range(days)]


@env.tool(read_only=True)
def get_hourly_forecast(state: WeatherState, city: CityName, date: date) -> HourlyForecast:
    """Get the hour-by-hour outlook of a city for today or a later day (temperature, condition, chance of rain).

    Args:
        city: The city, e.g. "Seattle".
        date: The day, e.g. "2026-01-06"; today or later.
    """
    weather = _city(state, city)
    if date < state.now.date():
        raise ToolError(
            f"{date.isoformat()} is in the past; hourly outlooks start today ({state.now.date().isoformat()}). "
            "Use get_forecast for a past day's observations."
        )
    rec = _record(state, weather, date)
    start = state.now.hour if date == state.now.date() else 0
    hours = [
        Hour(
            time=time(h),
            condition=_hour_condition(rec, h),  # type: ignore[arg-type]
            temperature=_temp(state, _temp_at(rec, h)),
            precip_probability=rec.precip_probability,
        )
        for h in range(start, 24)
    ]
    return HourlyForecast(city=city, date=date, temp_unit="F" if _imperial(state) else "C", hours=hours)


@env.tool(read_only=True)
def find_dry_days(
    state: WeatherState,
    city: CityName,
    start_date: date,
    end_date: date,
    max_precip_probability: Annotated[int, Field(ge=0, le=100)] = 20,
) -> list[DayWeather]:
    """Find the forecast days in a date range without rain or snow, for planning something outdoors.

    A day qualifies when its condition is not wet (rain, snow, sleet, thunderstorm) and its chance of
    precipitation is at most `max_precip_probability`.

    Args:
        city: The city, e.g. "Paris".
        start_date: The first day to consider; today or later.
        end_date: The last day to consider (inclusive).
        max_precip_probability: The highest acceptable chance of precipitation, percent (default 20).
    """
    weather = _city(state, city)
    if end_date < start_date:
        raise ToolError(f"end_date {end_date.isoformat()} is before start_date {start_date.isoformat()}.")
    if start_date < state.now.date():
        raise ToolError(
            f"start_date {start_date.isoformat()} is in the past; today is {state.now.date().isoformat()}."
        )
    _record(state, weather, start_date)
    _record(state, weather, end_date)
    found = []
    day = start_date
    while day <= end_date:
        rec = _record(state, weather, day)
        if rec.condition not in WET and rec.precip_probability <= max_precip_probability:
            found.append(_day_view(state, city, rec))
        day += timedelta(days=1)
    return found


@env.tool(read_only=True)
def compare_cities(
    state: WeatherState,
    cities: Annotated[list[CityName], Field(min_length=2, max_length=12)],
    date: date,
) -> list[DayWeather]:
    """Compare several cities' weather on one day, warmest first.

    Args:
        cities: Two to twelve different cities, e.g. ["London", "Paris", "Madrid"].
        date: The day to compare, e.g. "2026-01-09".
    """
    if len(set(cities)) != len(cities):
        raise ToolError("A city is listed twice; list each city once.")
    days = [_day_view(state, c, _record(state, _city(state, c), date)) for c in cities]
    return sorted(days, key=lambda d: (-d.temp_max, d.city))


@env.tool(read_only=True)
def list_alerts(
    state: WeatherState, city: CityName | None = None, min_severity: Severity = "minor"
) -> list[AlertView]:
    """List the weather alerts that are active or upcoming (not expired), earliest onset first.

    Args:
        city: Only this city's alerts; omit for every city.
        min_severity: Only alerts at least this severe: "minor" (default), "moderate", "severe", "extreme".
    """
    return [_alert_view(state, a) for a in _open_alerts(state, city, min_severity)]


@env.tool(read_only=True)
def get_alert(state: WeatherState, alert_id: Id) -> AlertView:
    """Get a weather alert's full text: description, what to do, onset, expiry and status (also for expired ones).

    Args:
        alert_id: The alert's id, e.g. "alr_0003" (from list_alerts or get_current_conditions).
    """
    return _alert_view(state, lookup(state.alerts, alert_id, "alert", "List alerts with list_alerts."))


@env.tool(idempotent=True)
def subscribe_alerts(
    state: WeatherState, email: Email, city: CityName, min_severity: Severity = "moderate"
) -> SubscriptionView:
    """Send a city's weather alerts to an email address, from a minimum severity on.

    Subscribing the same address to the same city again changes the minimum severity of the
    existing subscription. The result lists the city's current alerts that the subscription covers.

    Args:
        email: The address to notify, e.g. "alex.morgan@northwind.example".
        city: The city to follow.
        min_severity: The least severe alerts to send: "minor", "moderate" (default), "severe" or "extreme".
    """
    _city(state, city)
    for sub in sorted(state.subscriptions.values(), key=lambda s: s.id):
        if sub.email.lower() == email.lower() and sub.city == city:
            sub.min_severity = min_severity
            return _subscription_view(state, sub)
    if len(state.subscriptions) >= MAX_SUBSCRIPTIONS:
        raise ToolError(f"At most {MAX_SUBSCRIPTIONS} subscriptions; unsubscribe some first.")
    sub = Subscription(
        id=state.new_id("sub"), email=email, city=city, min_severity=min_severity, created_at=state.now
    )
    state.subscriptions[sub.id] = sub
    return _subscription_view(state, sub)


@env.tool(read_only=True)
def list_subscriptions(state: WeatherState, email: Email | None = None) -> list[SubscriptionView]:
    """List alert subscriptions, with the current alerts each one covers.

    Args:
        email: Only this address's subscriptions (case is ignored); omit for all.
    """
    subs = [s for s in state.subscriptions.values() if email is None or s.email.lower() == email.lower()]
    return [_subscription_view(state, s) for s in sorted(subs, key=lambda s: s.id)]


@env.tool(destructive=True)
def unsubscribe(state: WeatherState, subscription_id: Id) -> Subscription:
    """Stop an alert subscription.

    Args:
        subscription_id: The subscription's id, e.g. "sub_0002" (from list_subscriptions).
    """
    sub = lookup(
        state.subscriptions, subscription_id, "subscription", "List them with list_subscriptions(email)."
    )
    del state.subscriptions[sub.id]
    return sub


@env.tool(idempotent=True)
def set_units(state: WeatherState, units: Units) -> Settings:
    """Choose the units of every result: "metric" (°C, mm, km/h) or "imperial" (°F, in, mph).

    Args:
        units: "metric" or "imperial".
    """
    state.settings.units = units
    return state.settings
