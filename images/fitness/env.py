"""fitness: a workout log with goals and statistics for one person.

Calories are computed, never typed in: MET of the activity x body weight (kg) x hours, rounded. A
workout keeps the weight it was logged with, so later weight changes do not rewrite history. Distance
activities (running, cycling, ...) need a distance and a plausible speed; the others take none.
Workouts cannot overlap and must have finished by now (`state.now`).

Goals count distance, duration, workouts or calories per calendar week (Monday to Sunday) or month,
for one activity or for all of them.
"""

from __future__ import annotations

import calendar
from datetime import date, datetime, timedelta
from itertools import pairwise
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NaiveDatetime, model_validator

from envreg.env import Environment, EnvState, ToolError, id_problems, lookup

Activity = Literal[
    "running", "cycling", "swimming", "walking", "hiking", "rowing", "strength_training", "yoga", "hiit"
]
Metric = Literal["distance_km", "duration_minutes", "workouts", "calories"]
Period = Literal["week", "month"]

Id = Annotated[str, Field(max_length=64)]
Notes = Annotated[str, Field(max_length=2000)]
Minutes = Annotated[int, Field(ge=1, le=1440)]
Km = Annotated[float, Field(ge=0.01, le=1000)]
HeartRate = Annotated[int, Field(ge=30, le=230)]

MAX_WORKOUTS = 5000
MAX_GOALS = 50
MAX_STATS_DAYS = 366


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ActivityType(_Model):
    """An activity in the lookup table."""

    name: Activity
    met: float = Field(gt=0, le=25, description="Metabolic equivalent: energy use relative to rest.")
    distance: bool = Field(description="Whether workouts of this activity have a distance.")
    max_speed_kph: float | None = Field(default=None, gt=0, description="Fastest plausible average speed.")


class Profile(_Model):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    email: Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$", max_length=254)]
    birth_date: date
    height_cm: float = Field(ge=50, le=260)
    weight_kg: float = Field(ge=20, le=400)


class Workout(_Model):
    id: Annotated[str, Field(pattern=r"^wkt_\d{4,}$", max_length=64)]
    activity: Activity
    start: NaiveDatetime
    duration_minutes: Minutes
    distance_km: Km | None = None
    avg_heart_rate: HeartRate | None = None
    weight_kg: float = Field(ge=20, le=400, description="Body weight when it was logged (for calories).")
    calories: int = Field(ge=0)
    notes: Notes = ""


class Goal(_Model):
    id: Annotated[str, Field(pattern=r"^gol_\d{4,}$", max_length=64)]
    metric: Metric
    target: float = Field(gt=0, le=1_000_000)
    period: Period
    activity: Activity | None = Field(default=None, description="Only this activity counts; null for all.")
    created_at: NaiveDatetime


class FitnessState(EnvState):
    """The person's profile, the activity table, their workouts and goals."""

    profile: Profile
    activities: dict[Activity, ActivityType] = Field(default_factory=dict)
    workouts: dict[str, Workout] = Field(default_factory=dict, max_length=MAX_WORKOUTS)
    goals: dict[str, Goal] = Field(default_factory=dict, max_length=MAX_GOALS)

    @model_validator(mode="after")
    def _integrity(self) -> FitnessState:
        problems = id_problems(self, {"wkt": self.workouts, "gol": self.goals})
        for key, kind in self.activities.items():
            if key != kind.name:
                problems.append(f"activities: key {key!r} holds {kind.name!r}")
            if kind.distance != (kind.max_speed_kph is not None):
                problems.append(f"activity {kind.name}: max_speed_kph is set exactly for distance activities")
        for w in self.workouts.values():
            kind = self.activities.get(w.activity)
            if kind is None:
                problems.append(f"workout {w.id}: activity {w.activity} is not in the activity table")
                continue
            problems += _workout_problems(kind, w)
            if _end(w) > self.now:
                problems.append(f"workout {w.id} ends after now ({self.now.isoformat()})")
        ordered = sorted(self.workouts.values(), key=lambda w: (w.start, w.id))
        for a, b in pairwise(ordered):
            if b.start < _end(a):
                problems.append(f"workouts {a.id} and {b.id} overlap")
        seen: dict[tuple[str, str, str | None], str] = {}
        for g in self.goals.values():
            if g.activity is not None and g.activity not in self.activities:
                problems.append(f"goal {g.id}: activity {g.activity} is not in the activity table")
            if g.metric == "distance_km" and g.activity is not None:
                kind = self.activities.get(g.activity)
                if kind is not None and not kind.distance:
                    problems.append(f"goal {g.id}: {g.activity} has no distance")
            key = (g.metric, g.period, g.activity)
            if key in seen:
                problems.append(f"goals {seen[key]} and {g.id} track the same thing")
            seen[key] = g.id
            if g.created_at > self.now:
                problems.append(f"goal {g.id} is created in the future")
        if problems:
            raise ValueError("; ".join(problems))
        return self


def _end(w: Workout) -> datetime:
    return w.start + timedelta(minutes=w.duration_minutes)


def _calories(kind: ActivityType, weight_kg: float, minutes: int) -> int:
    return round(kind.met * weight_kg * minutes / 60)


def _workout_problems(kind: ActivityType, w: Workout) -> list[str]:
    problems = []
    if kind.distance and w.distance_km is None:
        problems.append(f"workout {w.id}: a {kind.name} workout needs a distance")
    if not kind.distance and w.distance_km is not None:
        problems.append(f"workout {w.id}: a {kind.name} workout has no distance")
    if w.distance_km is not None and kind.max_speed_kph is not None:
        speed = w.distance_km / (w.duration_minutes / 60)
        if speed > kind.max_speed_kph:
            problems.append(
                f"workout {w.id}: {speed:.1f} km/h is faster than the {kind.max_speed_kph:g} km/h "
                f"plausible for {kind.name}"
            )
    expected = _calories(kind, w.weight_kg, w.duration_minutes)
    if w.calories != expected:
        problems.append(f"workout {w.id}: calories {w.calories} should be {expected} (MET x weight x hours)")
    return problems


# ---- results ------------------------------------------------------------------------------------------


class WorkoutView(Workout):
    end: datetime
    avg_speed_kph: float | None = Field(description="Distance activities only.")
    pace_min_per_km: float | None = Field(description="Minutes per kilometre; distance activities only.")


class GoalProgress(_Model):
    goal_id: str
    metric: Metric
    period: Period
    activity: Activity | None
    period_start: date
    period_end: date
    target: float
    current: float
    percent: int = Field(description="current / target in percent, rounded down (can exceed 100).")
    achieved: bool


class ActivityStats(_Model):
    activity: Activity
    workouts: int
    minutes: int
    distance_km: float | None
    calories: int
    longest_km: float | None = Field(description="The longest distance in one workout.")
    best_speed_kph: float | None = Field(description="The fastest average speed of one workout.")


class Statistics(_Model):
    start_date: date
    end_date: date
    workouts: int
    minutes: int
    distance_km: float
    calories: int
    active_days: int
    by_activity: list[ActivityStats]


env = Environment(
    "fitness",
    FitnessState,
    version="1.0.0",
    domain="lifestyle",
    description=(
        "A personal fitness log: profile, activity types with MET values, workouts with computed calories, "
        "pace and overlap checks, weekly or monthly goals with progress and history, and statistics with "
        "personal bests."
    ),
)


# ---- helpers ------------------------------------------------------------------------------------------


def _view(w: Workout) -> WorkoutView:
    speed = pace = None
    if w.distance_km is not None:
        speed = round(w.distance_km / (w.duration_minutes / 60), 2)
        pace = round(w.duration_minutes / w.distance_km, 2)
    return WorkoutView(**w.model_dump(), end=_end(w), avg_speed_kph=speed, pace_min_per_km=pace)


def _workout(state: FitnessState, workout_id: str) -> Workout:
    return lookup(state.workouts, workout_id, "workout", "List workouts with list_workouts.")


def _goal(state: FitnessState, goal_id: str) -> Goal:
    return lookup(state.goals, goal_id, "goal", "List goals with list_goals.")


def _check_workout(state: FitnessState, w: Workout) -> None:
    """Refuse a workout the state would not accept, with the reason."""
    problems = _workout_problems(state.activities[w.activity], w)
    if problems:
        reason = problems[0].split(": ", 1)[1]
        raise ToolError(reason[0].upper() + reason[1:] + ".")
    if _end(w) > state.now:
        raise ToolError(
            f"The workout would end at {_end(w).isoformat()}, after now ({state.now.isoformat()}); "
            "log workouts once they are finished."
        )
    for other in sorted(state.workouts.values(), key=lambda o: (o.start, o.id)):
        if other.id != w.id and other.start < _end(w) and w.start < _end(other):
            raise ToolError(
                f"It overlaps {other.id} ({other.activity}, {other.start.isoformat()} for "
                f"{other.duration_minutes} min). Check the start time."
            )


def _period(period: str, day: date) -> tuple[date, date]:
    if period == "week":
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=6)
    last = calendar.monthrange(day.year, day.month)[1]
    return day.replace(day=1), day.replace(day=last)


def _in_range(state: FitnessState, start: date, end: date, activity: str | None) -> list[Workout]:
    return sorted(
        (
            w
            for w in state.workouts.values()
            if start <= w.start.date() <= end and (activity is None or w.activity == activity)
        ),
        key=lambda w: (w.start, w.id),
    )


def _progress(state: FitnessState, goal: Goal, day: date) -> GoalProgress:
    start, end = _period(goal.period, day)
    done = _in_range(state, start, end, goal.activity)
    if goal.metric == "distance_km":
        current = round(sum(w.distance_km or 0 for w in done), 2)
    elif goal.metric == "duration_minutes":
        current = float(sum(w.duration_minutes for w in done))
    elif goal.metric == "workouts":
        current = float(len(done))
    else:
        current = float(sum(w.calories for w in done))
    return GoalProgress(
        goal_id=goal.id,
        metric=goal.metric,
        period=goal.period,
        activity=goal.activity,
        period_start=start,
        period_end=end,
        target=goal.target,
        current=current,
        percent=int(current * 100 // goal.target),
        achieved=current >= goal.target,
    )


def _check_range(start_date: date, end_date: date) -> None:
    if end_date < start_date:
        raise ToolError(f"end_date {end_date.isoformat()} is before start_date {start_date.isoformat()}.")
    if (end_date - start_date).days + 1 > MAX_STATS_DAYS:
        raise ToolError(f"At most {MAX_STATS_DAYS} days at once; narrow the range.")


# ---- tools --------------------------------------------------------------------------------------------


@env.tool(read_only=True)
def get_profile(state: FitnessState) -> Profile:
    """Get the person's profile: name, email, birth date, height and current weight."""
    return state.profile


@env.tool(idempotent=True)
def update_profile(
    state: FitnessState,
    weight_kg: Annotated[float, Field(ge=20, le=400)] | None = None,
    height_cm: Annotated[float, Field(ge=50, le=260)] | None = None,
) -> Profile:
    """Update the body weight or height. New workouts use the new weight for calories; logged ones keep theirs.

    Args:
        weight_kg: Body weight in kilograms, e.g. 71.8.
        height_cm: Height in centimetres.
    """
    if weight_kg is None and height_cm is None:
        raise ToolError("Nothing to change: give weight_kg or height_cm.")
    if weight_kg is not None:
        state.profile.weight_kg = round(weight_kg, 1)
    if height_cm is not None:
        state.profile.height_cm = round(height_cm, 1)
    return state.profile


@env.tool(read_only=True)
def list_activity_types(state: FitnessState) -> list[ActivityType]:
    """List the activities that can be logged, with their MET values and whether they take a distance."""
    return sorted(state.activities.values(), key=lambda a: a.name)


@env.tool
def log_workout(
    state: FitnessState,
    activity: Activity,
    start: NaiveDatetime,
    duration_minutes: Minutes,
    distance_km: Km | None = None,
    avg_heart_rate: HeartRate | None = None,
    notes: Notes = "",
) -> WorkoutView:
    """Log a finished workout; calories are computed from the activity's MET, current weight and duration.

    Distance activities (running, cycling, swimming, walking, hiking, rowing) need distance_km and a
    plausible speed; the others take no distance. Workouts cannot overlap or end after now.

    Args:
        activity: The activity, e.g. "running" (see list_activity_types).
        start: Local start time, e.g. "2026-01-05T07:00:00".
        duration_minutes: How long it lasted, in minutes (1-1440).
        distance_km: The distance in kilometres, for distance activities.
        avg_heart_rate: Average heart rate in beats per minute, if measured.
        notes: Free-text notes.
    """
    kind = state.activities.get(activity)
    if kind is None:
        raise ToolError(f"{activity} is not in the activity table; see list_activity_types.")
    if len(state.workouts) >= MAX_WORKOUTS:
        raise ToolError(f"The log holds at most {MAX_WORKOUTS} workouts.")
    weight = state.profile.weight_kg
    workout = Workout(
        id=state.new_id("wkt"),
        activity=activity,
        start=start,
        duration_minutes=duration_minutes,
        distance_km=None if distance_km is None else round(distance_km, 2),
        avg_heart_rate=avg_heart_rate,
        weight_kg=weight,
        calories=_calories(kind, weight, duration_minutes),
        notes=notes,
    )
    _check_workout(state, workout)
    state.workouts[workout.id] = workout
    return _view(workout)


@env.tool(read_only=True)
def list_workouts(
    state: FitnessState, start_date: date, end_date: date, activity: Activity | None = None
) -> list[WorkoutView]:
    """List the workouts that started between two days (inclusive), oldest first.

    Args:
        start_date: The first day, e.g. "2025-12-29".
        end_date: The last day, e.g. "2026-01-04".
        activity: Only this activity.
    """
    _check_range(start_date, end_date)
    return [_view(w) for w in _in_range(state, start_date, end_date, activity)]


@env.tool(read_only=True)
def get_workout(state: FitnessState, workout_id: Id) -> WorkoutView:
    """Get one workout with its end time, calories, speed and pace.

    Args:
        workout_id: The workout's id, e.g. "wkt_0012" (from list_workouts).
    """
    return _view(_workout(state, workout_id))


@env.tool(idempotent=True)
def update_workout(
    state: FitnessState,
    workout_id: Id,
    duration_minutes: Minutes | None = None,
    distance_km: Km | None = None,
    avg_heart_rate: HeartRate | None = None,
    notes: Notes | None = None,
) -> WorkoutView:
    """Correct a logged workout's duration, distance, heart rate or notes; calories follow the duration.

    Args:
        workout_id: The workout, e.g. "wkt_0012".
        duration_minutes: The corrected duration in minutes.
        distance_km: The corrected distance in kilometres (distance activities only).
        avg_heart_rate: The corrected average heart rate.
        notes: New notes (replace the old ones).
    """
    workout = _workout(state, workout_id)
    if duration_minutes is None and distance_km is None and avg_heart_rate is None and notes is None:
        raise ToolError("Nothing to change: give duration_minutes, distance_km, avg_heart_rate or notes.")
    if duration_minutes is not None:
        workout.duration_minutes = duration_minutes
    if distance_km is not None:
        workout.distance_km = round(distance_km, 2)
    if avg_heart_rate is not None:
        workout.avg_heart_rate = avg_heart_rate
    if notes is not None:
        workout.notes = notes
    workout.calories = _calories(
        state.activities[workout.activity], workout.weight_kg, workout.duration_minutes
    )
    _check_workout(state, workout)
    return _view(workout)


@env.tool(destructive=True)
def delete_workout(state: FitnessState, workout_id: Id) -> WorkoutView:
    """Delete a logged workout.

    Args:
        workout_id: The workout to delete, e.g. "wkt_0007".
    """
    workout = _workout(state, workout_id)
    del state.workouts[workout.id]
    return _view(workout)


@env.tool
def create_goal(
    state: FitnessState,
    metric: Metric,
    target: Annotated[float, Field(ge=0.01, le=1_000_000)],
    period: Period = "week",
    activity: Activity | None = None,
) -> GoalProgress:
    """Set a goal, e.g. run 20 km a week or work out 12 times a month; returns this period's progress.

    Args:
        metric: What to count: "distance_km", "duration_minutes", "workouts" or "calories".
        target: The amount to reach each period, e.g. 20.
        period: "week" (Monday to Sunday, the default) or "month".
        activity: Only count this activity; omit to count every activity.
    """
    if metric == "distance_km" and activity is not None and not state.activities[activity].distance:
        raise ToolError(f"{activity} has no distance; pick duration_minutes, workouts or calories.")
    for g in sorted(state.goals.values(), key=lambda g: g.id):
        if (g.metric, g.period, g.activity) == (metric, period, activity):
            raise ToolError(
                f"Goal {g.id} already tracks {metric} per {period}"
                + (f" for {activity}" if activity else "")
                + f" (target {g.target:g}); delete it first to change the target."
            )
    if len(state.goals) >= MAX_GOALS:
        raise ToolError(f"At most {MAX_GOALS} goals.")
    goal = Goal(
        id=state.new_id("gol"),
        metric=metric,
        target=round(target, 2),
        period=period,
        activity=activity,
        created_at=state.now,
    )
    state.goals[goal.id] = goal
    return _progress(state, goal, state.now.date())


@env.tool(read_only=True)
def list_goals(state: FitnessState, date: date | None = None) -> list[GoalProgress]:
    """List the goals with their progress in the week or month containing a day.

    Args:
        date: The day whose week or month to report, e.g. "2025-12-31"; omit for today.
    """
    day = state.now.date() if date is None else date
    return [_progress(state, g, day) for g in sorted(state.goals.values(), key=lambda g: g.id)]


@env.tool(read_only=True)
def get_goal_progress(
    state: FitnessState, goal_id: Id, periods: Annotated[int, Field(ge=1, le=26)] = 4
) -> list[GoalProgress]:
    """A goal's progress over the current period and the ones before it, most recent first.

    Args:
        goal_id: The goal, e.g. "gol_0001" (from list_goals).
        periods: How many weeks or months to report, counting the current one (1-26, default 4).
    """
    goal = _goal(state, goal_id)
    out = []
    day = state.now.date()
    for _ in range(periods):
        progress = _progress(state, goal, day)
        out.append(progress)
        day = progress.period_start - timedelta(days=1)
    return out


@env.tool(destructive=True)
def delete_goal(state: FitnessState, goal_id: Id) -> Goal:
    """Delete a goal (workouts are not affected).

    Args:
        goal_id: The goal to delete, e.g. "gol_0003".
    """
    goal = _goal(state, goal_id)
    del state.goals[goal.id]
    return goal


@env.tool(read_only=True)
def get_statistics(
    state: FitnessState, start_date: date, end_date: date, activity: Activity | None = None
) -> Statistics:
    """Totals between two days (workouts, minutes, distance, calories, active days) and per activity, with
    each activity's longest distance and best average speed.

    Args:
        start_date: The first day, e.g. "2025-12-01".
        end_date: The last day (inclusive, at most 366 days after start_date).
        activity: Only this activity.
    """
    _check_range(start_date, end_date)
    done = _in_range(state, start_date, end_date, activity)
    per: dict[str, list[Workout]] = {}
    for w in done:
        per.setdefault(w.activity, []).append(w)
    by_activity = []
    for name in sorted(per):
        ws = per[name]
        distances = [w.distance_km for w in ws if w.distance_km is not None]
        speeds = [w.distance_km / (w.duration_minutes / 60) for w in ws if w.distance_km is not None]
        by_activity.append(
            ActivityStats(
                activity=name,  # type: ignore[arg-type]
                workouts=len(ws),
                minutes=sum(w.duration_minutes for w in ws),
                distance_km=round(sum(distances), 2) if distances else None,
                calories=sum(w.calories for w in ws),
                longest_km=max(distances) if distances else None,
                best_speed_kph=round(max(speeds), 2) if speeds else None,
            )
        )
    return Statistics(
        start_date=start_date,
        end_date=end_date,
        workouts=len(done),
        minutes=sum(w.duration_minutes for w in done),
        distance_km=round(sum(w.distance_km or 0 for w in done), 2),
        calories=sum(w.calories for w in done),
        active_days=len({w.start.date() for w in done}),
        by_activity=by_activity,
    )
