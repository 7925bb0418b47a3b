"""calendar: a personal calendar with several calendars, contacts, events and incoming invitations.

The owner of the calendar is the agent's user. Events the owner organizes can be edited, moved
and shared with contacts; events that come from an accepted invitation belong to the contact who
organized them and can only be answered (accepted, tentative, declined) or removed.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from datetime import date, datetime, time, timedelta
from itertools import pairwise
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NaiveDatetime, field_validator, model_validator

from envreg.env import Environment, EnvState, ToolError

EMAIL = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"

CalendarId = Annotated[str, Field(pattern=r"^cal_\d{4,}$", max_length=64)]
ContactId = Annotated[str, Field(pattern=r"^con_\d{4,}$", max_length=64)]
EventId = Annotated[str, Field(pattern=r"^evt_\d{4,}$", max_length=64)]
InvitationId = Annotated[str, Field(pattern=r"^inv_\d{4,}$", max_length=64)]
# Sizes are bounded so that one agent cannot grow a shared server's memory (the SDK also caps whole
# arguments and states): ids the agent passes back (checked against the state, so no pattern here),
# names and titles, places, free-text notes.
Ref = Annotated[str, Field(max_length=64)]
Name = Annotated[str, Field(min_length=1, max_length=200)]
Email = Annotated[str, Field(pattern=EMAIL, max_length=254)]
Place = Annotated[str, Field(max_length=500)]
Notes = Annotated[str, Field(max_length=5000)]

Response = Literal["accepted", "tentative", "declined"]
AttendeeStatus = Literal["needs_action", "accepted", "tentative", "declined"]
InvitationStatus = Literal["pending", "accepted", "tentative", "declined"]

MAX_LIST_DAYS = 62
SLOT_STEP = timedelta(minutes=15)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Owner(_Model):
    """The person whose calendar this is."""

    name: Name
    email: Email


class Calendar(_Model):
    """One calendar of the owner (work, personal, ...) or a read-only subscription (holidays)."""

    id: CalendarId
    name: Name
    color: str = Field(pattern=r"^#[0-9A-F]{6}$", description="Display colour, #RRGGBB.")
    primary: bool = Field(default=False, description="The default calendar for new and accepted events.")
    read_only: bool = Field(
        default=False, description="A subscribed calendar whose events cannot be changed."
    )


class Contact(_Model):
    """Someone in the owner's address book."""

    id: ContactId
    name: Name
    email: Email
    company: Annotated[str, Field(max_length=200)] = ""
    phone: Annotated[str, Field(max_length=40)] = ""


class Attendee(_Model):
    """A contact invited to an event, with their answer."""

    contact_id: ContactId
    status: AttendeeStatus = "needs_action"


class Event(_Model):
    """An event in one of the calendars."""

    id: EventId
    calendar_id: CalendarId
    title: Name
    start: NaiveDatetime
    end: NaiveDatetime
    location: Place = ""
    description: Notes = ""
    organizer_id: ContactId | None = Field(
        default=None,
        description="The contact who organized it (from an invitation); null when the owner did.",
    )
    status: Literal["confirmed", "tentative"] = "confirmed"
    attendees: list[Attendee] = Field(default_factory=list)
    reminder_minutes: int | None = Field(
        default=None,
        ge=0,
        le=40320,
        description="Minutes before the start to remind the owner; null for none.",
    )

    @model_validator(mode="after")
    def _check(self) -> Event:
        if self.end <= self.start:
            raise ValueError(f"event {self.id}: end {self.end} must be after start {self.start}")
        dupes = [c for c, n in Counter(a.contact_id for a in self.attendees).items() if n > 1]
        if dupes:
            raise ValueError(f"event {self.id}: attendee listed more than once: {', '.join(dupes)}")
        if self.organizer_id is None and self.status != "confirmed":
            raise ValueError(f"event {self.id}: only events from an invitation can be tentative")
        return self


class Invitation(_Model):
    """An invitation the owner received from a contact."""

    id: InvitationId
    organizer_id: ContactId
    title: Name
    start: NaiveDatetime
    end: NaiveDatetime
    location: Place = ""
    description: Notes = ""
    received_at: NaiveDatetime
    status: InvitationStatus = "pending"
    event_id: EventId | None = Field(
        default=None, description="The calendar event made when the owner accepted (or tentatively accepted)."
    )

    @model_validator(mode="after")
    def _check(self) -> Invitation:
        if self.end <= self.start:
            raise ValueError(f"invitation {self.id}: end {self.end} must be after start {self.start}")
        has_event = self.status in ("accepted", "tentative")
        if has_event and self.event_id is None:
            raise ValueError(f"invitation {self.id}: an {self.status} invitation needs its event_id")
        if not has_event and self.event_id is not None:
            raise ValueError(f"invitation {self.id}: a {self.status} invitation has no event")
        return self


class FreeSlot(_Model):
    """A free stretch of time."""

    start: datetime
    end: datetime


class DeletedEvent(_Model):
    """What `delete_event` removed."""

    event_id: str
    title: str
    declined_invitation_id: str | None = Field(
        default=None, description="The invitation that was declined because its event was deleted."
    )


class CalendarState(EnvState):
    """The owner's calendars, contacts, events and received invitations."""

    now: NaiveDatetime = Field(
        default=datetime(2026, 1, 5, 9, 0), description="The environment's clock (naive, local)."
    )
    owner: Owner
    calendars: dict[str, Calendar] = Field(default_factory=dict)
    contacts: dict[str, Contact] = Field(default_factory=dict)
    events: dict[str, Event] = Field(default_factory=dict)
    invitations: dict[str, Invitation] = Field(default_factory=dict)

    @field_validator("id_counters")
    @classmethod
    def _counters_not_negative(cls, counters: dict[str, int]) -> dict[str, int]:
        for prefix, n in counters.items():
            if n < 0:
                raise ValueError(f"id counter {prefix!r} is negative")
        return counters

    @model_validator(mode="after")
    def _integrity(self) -> CalendarState:
        problems: list[str] = []
        tables: dict[
            str, dict[str, Calendar] | dict[str, Contact] | dict[str, Event] | dict[str, Invitation]
        ] = {
            "cal": self.calendars,
            "con": self.contacts,
            "evt": self.events,
            "inv": self.invitations,
        }
        for prefix, table in tables.items():
            for key, item in table.items():
                item_id = item.id
                if key != item_id:
                    problems.append(
                        f"key {key!r} holds {item_id!r}: each entry must be stored under its own id"
                    )
                number = int(item_id.split("_", 1)[1])
                if number > self.id_counters.get(prefix, 0):
                    problems.append(
                        f"id {item_id} is beyond id_counters[{prefix!r}]="
                        f"{self.id_counters.get(prefix, 0)}: new ids would collide"
                    )
        if self.calendars and sum(c.primary for c in self.calendars.values()) != 1:
            problems.append("exactly one calendar must be primary")
        if any(c.primary and c.read_only for c in self.calendars.values()):
            problems.append("the primary calendar cannot be read-only")

        linked: dict[str, str] = {}
        for inv in self.invitations.values():
            if inv.organizer_id not in self.contacts:
                problems.append(f"invitation {inv.id}: organizer {inv.organizer_id} is not a contact")
            if inv.event_id is None:
                continue
            event = self.events.get(inv.event_id)
            if event is None:
                problems.append(f"invitation {inv.id}: event {inv.event_id} does not exist")
                continue
            if inv.event_id in linked:
                problems.append(
                    f"event {inv.event_id} is linked from both {linked[inv.event_id]} and {inv.id}"
                )
            linked[inv.event_id] = inv.id
            if event.organizer_id != inv.organizer_id:
                problems.append(
                    f"invitation {inv.id}: event {event.id} must have organizer {inv.organizer_id}"
                )
            expected = "tentative" if inv.status == "tentative" else "confirmed"
            if event.status != expected:
                problems.append(f"invitation {inv.id} is {inv.status} but event {event.id} is {event.status}")

        for event in self.events.values():
            if event.calendar_id not in self.calendars:
                problems.append(f"event {event.id}: calendar {event.calendar_id} does not exist")
            for attendee in event.attendees:
                if attendee.contact_id not in self.contacts:
                    problems.append(f"event {event.id}: attendee {attendee.contact_id} is not a contact")
            if event.organizer_id is not None:
                if event.organizer_id not in self.contacts:
                    problems.append(f"event {event.id}: organizer {event.organizer_id} is not a contact")
                if event.id not in linked:
                    problems.append(f"event {event.id} has an organizer but no invitation links to it")

        by_calendar: dict[str, list[Event]] = {}
        for event in self.events.values():
            by_calendar.setdefault(event.calendar_id, []).append(event)
        for events in by_calendar.values():
            events.sort(key=lambda e: (e.start, e.id))
            for earlier, later in pairwise(events):
                if later.start < earlier.end:
                    problems.append(
                        f"events {earlier.id} and {later.id} overlap in calendar {earlier.calendar_id}"
                    )
        if problems:
            raise ValueError("; ".join(problems))
        return self


env = Environment(
    "calendar",
    CalendarState,
    version="1.0.0",
    domain="office",
    description=(
        "A personal calendar: several calendars (one primary, some read-only subscriptions), an address "
        "book, events with invited contacts and reminders, and invitations received from contacts."
    ),
)


# ---- helpers -------------------------------------------------------------------------------------


def _fold(text: str) -> str:
    """Lower-case text without accents, for forgiving search."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


def _calendar(state: CalendarState, calendar_id: str) -> Calendar:
    calendar = state.calendars.get(calendar_id)
    if calendar is None:
        known = ", ".join(f"{c.id} ({c.name})" for c in state.calendars.values())
        raise ToolError(f"No calendar {calendar_id!r}. The calendars are: {known}.")
    return calendar


def _writable_calendar(state: CalendarState, calendar_id: str) -> Calendar:
    calendar = _calendar(state, calendar_id)
    if calendar.read_only:
        raise ToolError(
            f"Calendar {calendar.id} ({calendar.name}) is a read-only subscription; "
            "use one of your own calendars (see list_calendars)."
        )
    return calendar


def _contact(state: CalendarState, contact_id: str) -> Contact:
    contact = state.contacts.get(contact_id)
    if contact is None:
        raise ToolError(f"No contact {contact_id!r}; use search_contacts to find a contact's id.")
    return contact


def _event(state: CalendarState, event_id: str) -> Event:
    event = state.events.get(event_id)
    if event is None:
        raise ToolError(f"No event {event_id!r}; use list_events to find event ids.")
    return event


def _invitation(state: CalendarState, invitation_id: str) -> Invitation:
    invitation = state.invitations.get(invitation_id)
    if invitation is None:
        raise ToolError(f"No invitation {invitation_id!r}; use list_invitations to find invitation ids.")
    return invitation


def _own_event(state: CalendarState, event_id: str) -> Event:
    """An event the owner may change: organized by the owner, in a writable calendar."""
    event = _event(state, event_id)
    _writable_calendar(state, event.calendar_id)
    if event.organizer_id is not None:
        organizer = state.contacts[event.organizer_id]
        raise ToolError(
            f"Event {event.id} is organized by {organizer.name} ({organizer.id}); only the organizer can "
            "change it. Use respond_to_invitation to change your answer, or delete_event to remove it."
        )
    return event


def _check_times(state: CalendarState, start: datetime, end: datetime) -> None:
    if end <= start:
        raise ToolError(f"The end ({end.isoformat()}) must be after the start ({start.isoformat()}).")
    if start < state.now:
        raise ToolError(f"The start ({start.isoformat()}) is in the past; it is now {state.now.isoformat()}.")


def _check_overlap(
    state: CalendarState, calendar_id: str, start: datetime, end: datetime, ignore: str | None = None
) -> None:
    for other in sorted(state.events.values(), key=lambda e: (e.start, e.id)):
        if (
            other.calendar_id == calendar_id
            and other.id != ignore
            and other.start < end
            and start < other.end
        ):
            raise ToolError(
                f"{start.isoformat()}-{end.isoformat()} overlaps {other.id} {other.title!r} "
                f"({other.start.isoformat()}-{other.end.isoformat()}) in calendar {calendar_id}. "
                "Pick another time (find_free_slot helps) or move that event first."
            )


def _primary(state: CalendarState) -> Calendar:
    return next(c for c in state.calendars.values() if c.primary)


def _sorted(events: list[Event]) -> list[Event]:
    return sorted(events, key=lambda e: (e.start, e.end, e.id))


# ---- tools ---------------------------------------------------------------------------------------


@env.tool(read_only=True)
def list_calendars(state: CalendarState) -> list[Calendar]:
    """List the owner's calendars, with their ids, colours and whether they are primary or read-only."""
    return sorted(state.calendars.values(), key=lambda c: c.id)


@env.tool(read_only=True)
def search_contacts(
    state: CalendarState, query: Annotated[str, Field(min_length=1, max_length=200)]
) -> list[Contact]:
    """Find contacts whose name, email or company contains the query (case and accents are ignored).

    Returns every match, sorted by name; an empty list when nothing matches.

    Args:
        query: Part of a name, email address or company, e.g. "okafor" or "contoso".
    """
    needle = _fold(query.strip())
    if not needle:
        raise ToolError("The query is blank; give part of a name, email or company.")
    hits = [
        c
        for c in state.contacts.values()
        if needle in _fold(c.name) or needle in _fold(c.email) or needle in _fold(c.company)
    ]
    return sorted(hits, key=lambda c: (_fold(c.name), c.id))


@env.tool(read_only=True)
def get_contact(state: CalendarState, contact_id: Ref) -> Contact:
    """Get one contact's details.

    Args:
        contact_id: The contact's id, e.g. "con_0003" (from search_contacts).
    """
    return _contact(state, contact_id)


@env.tool(read_only=True)
def list_events(
    state: CalendarState, start_day: date, end_day: date | None = None, calendar_id: Ref | None = None
) -> list[Event]:
    """List the events that take place on the given day or days, earliest first.

    An event is listed when any part of it falls between the start of `start_day` and the end of
    `end_day`. At most 62 days can be listed at once.

    Args:
        start_day: The first day, e.g. "2026-01-06".
        end_day: The last day (inclusive); omit to list `start_day` only.
        calendar_id: Only list this calendar's events; omit for all calendars.
    """
    last = start_day if end_day is None else end_day
    if last < start_day:
        raise ToolError(f"end_day {last.isoformat()} is before start_day {start_day.isoformat()}.")
    if (last - start_day).days + 1 > MAX_LIST_DAYS:
        raise ToolError(f"At most {MAX_LIST_DAYS} days can be listed at once; narrow the range.")
    if calendar_id is not None:
        _calendar(state, calendar_id)
    lo = datetime.combine(start_day, time())
    hi = datetime.combine(last + timedelta(days=1), time())
    return _sorted(
        [
            e
            for e in state.events.values()
            if e.start < hi and lo < e.end and (calendar_id is None or e.calendar_id == calendar_id)
        ]
    )


@env.tool(read_only=True)
def get_event(state: CalendarState, event_id: Ref) -> Event:
    """Get one event with its attendees, organizer and reminder.

    Args:
        event_id: The event's id, e.g. "evt_0004" (from list_events).
    """
    return _event(state, event_id)


@env.tool
def create_event(
    state: CalendarState,
    calendar_id: Ref,
    title: Name,
    start: NaiveDatetime,
    end: NaiveDatetime,
    location: Place = "",
    description: Notes = "",
) -> Event:
    """Create an event organized by the owner in one of their calendars.

    Fails when the time is in the past, when end is not after start, or when the event would
    overlap another event in the same calendar. Invite people afterwards with invite_attendee.

    Args:
        calendar_id: The calendar to put it in, e.g. "cal_0001" (from list_calendars).
        title: A short title.
        start: Local start time, e.g. "2026-01-06T09:00:00" (no time zone).
        end: Local end time; must be after start.
        location: Where it happens (a room, an address or "Video call").
        description: Free-text notes.
    """
    _writable_calendar(state, calendar_id)
    if not title.strip():
        raise ToolError("The title is blank; give the event a short title.")
    _check_times(state, start, end)
    _check_overlap(state, calendar_id, start, end)
    event = Event(
        id=state.new_id("evt"),
        calendar_id=calendar_id,
        title=title,
        start=start,
        end=end,
        location=location,
        description=description,
    )
    state.events[event.id] = event
    return event


@env.tool(idempotent=True)
def update_event(
    state: CalendarState,
    event_id: Ref,
    title: Name | None = None,
    location: Place | None = None,
    description: Notes | None = None,
    calendar_id: Ref | None = None,
) -> Event:
    """Change an event's title, location, description or calendar; omitted fields stay as they are.

    Only events the owner organized can be changed. To change the time use reschedule_event.

    Args:
        event_id: The event to change, e.g. "evt_0004".
        title: The new title.
        location: The new location ("" clears it).
        description: The new description ("" clears it).
        calendar_id: Move the event to this calendar; fails if it overlaps an event there.
    """
    event = _own_event(state, event_id)
    if title is None and location is None and description is None and calendar_id is None:
        raise ToolError("Nothing to change: give at least one of title, location, description, calendar_id.")
    if calendar_id is not None and calendar_id != event.calendar_id:
        _writable_calendar(state, calendar_id)
        _check_overlap(state, calendar_id, event.start, event.end, ignore=event.id)
        event.calendar_id = calendar_id
    if title is not None:
        if not title.strip():
            raise ToolError("The title is blank; give the event a short title.")
        event.title = title
    if location is not None:
        event.location = location
    if description is not None:
        event.description = description
    return event


@env.tool(idempotent=True)
def reschedule_event(
    state: CalendarState, event_id: Ref, start: NaiveDatetime, end: NaiveDatetime | None = None
) -> Event:
    """Move an event the owner organized to a new time.

    When the time changes, every attendee's answer goes back to "needs_action" (they are asked
    again). Fails on a time in the past or an overlap in the event's calendar.

    Args:
        event_id: The event to move, e.g. "evt_0008".
        start: The new local start time, e.g. "2026-01-07T15:00:00".
        end: The new local end time; omit to keep the event's current length.
    """
    event = _own_event(state, event_id)
    new_end = end if end is not None else start + (event.end - event.start)
    if (start, new_end) == (event.start, event.end):
        return event
    _check_times(state, start, new_end)
    _check_overlap(state, event.calendar_id, start, new_end, ignore=event.id)
    event.start, event.end = start, new_end
    for attendee in event.attendees:
        attendee.status = "needs_action"
    return event


@env.tool(destructive=True)
def delete_event(state: CalendarState, event_id: Ref) -> DeletedEvent:
    """Delete an event from its calendar.

    Deleting an event that came from an accepted invitation declines that invitation. Events in
    read-only calendars cannot be deleted.

    Args:
        event_id: The event to delete, e.g. "evt_0013".
    """
    event = _event(state, event_id)
    _writable_calendar(state, event.calendar_id)
    declined = None
    for invitation in state.invitations.values():
        if invitation.event_id == event.id:
            invitation.status, invitation.event_id = "declined", None
            declined = invitation.id
    del state.events[event.id]
    return DeletedEvent(event_id=event.id, title=event.title, declined_invitation_id=declined)


@env.tool
def invite_attendee(state: CalendarState, event_id: Ref, contact_id: Ref) -> Event:
    """Invite a contact to an event the owner organized; their answer starts as "needs_action".

    Args:
        event_id: The event, e.g. "evt_0012".
        contact_id: The contact to invite, e.g. "con_0002" (from search_contacts).
    """
    event = _own_event(state, event_id)
    contact = _contact(state, contact_id)
    if event.end <= state.now:
        raise ToolError(f"Event {event.id} is already over; invitations can only be sent for future events.")
    if any(a.contact_id == contact.id for a in event.attendees):
        raise ToolError(f"{contact.name} ({contact.id}) is already invited to {event.id}.")
    event.attendees.append(Attendee(contact_id=contact.id))
    return event


@env.tool(destructive=True)
def remove_attendee(state: CalendarState, event_id: Ref, contact_id: Ref) -> Event:
    """Take a contact off the guest list of an event the owner organized.

    Args:
        event_id: The event, e.g. "evt_0005".
        contact_id: The attendee's contact id, e.g. "con_0004".
    """
    event = _own_event(state, event_id)
    if not any(a.contact_id == contact_id for a in event.attendees):
        invited = ", ".join(a.contact_id for a in event.attendees) or "nobody"
        raise ToolError(f"{contact_id!r} is not an attendee of {event.id} (attendees: {invited}).")
    event.attendees = [a for a in event.attendees if a.contact_id != contact_id]
    return event


@env.tool(read_only=True)
def list_invitations(state: CalendarState, status: InvitationStatus | None = "pending") -> list[Invitation]:
    """List the invitations the owner received, earliest event first.

    Args:
        status: Only invitations with this status ("pending" by default); null for all of them.
    """
    found = [i for i in state.invitations.values() if status is None or i.status == status]
    return sorted(found, key=lambda i: (i.start, i.id))


@env.tool(idempotent=True)
def respond_to_invitation(
    state: CalendarState, invitation_id: Ref, response: Response, calendar_id: Ref | None = None
) -> Invitation:
    """Accept, tentatively accept or decline an invitation.

    Accepting (or answering "tentative") puts the event in a calendar, organized by the inviting
    contact; it fails if that would overlap an event in the same calendar. Declining removes the
    event again if there was one. Answering the same way twice changes nothing.

    Args:
        invitation_id: The invitation, e.g. "inv_0002" (from list_invitations).
        response: "accepted", "tentative" or "declined".
        calendar_id: Where to put the event when it is accepted; omit for the primary calendar.
            Ignored when the invitation already has an event or is declined.
    """
    invitation = _invitation(state, invitation_id)
    if invitation.status == response:
        return invitation
    if invitation.start < state.now:
        raise ToolError(
            f"Invitation {invitation.id} is for a time that has already started; it cannot be answered."
        )
    if response == "declined":
        if invitation.event_id is not None:
            del state.events[invitation.event_id]
        invitation.status, invitation.event_id = "declined", None
        return invitation
    event_status: Literal["confirmed", "tentative"] = "tentative" if response == "tentative" else "confirmed"
    if invitation.event_id is not None:
        state.events[invitation.event_id].status = event_status
        invitation.status = response
        return invitation
    target = _writable_calendar(state, calendar_id) if calendar_id is not None else _primary(state)
    _check_overlap(state, target.id, invitation.start, invitation.end)
    event = Event(
        id=state.new_id("evt"),
        calendar_id=target.id,
        title=invitation.title,
        start=invitation.start,
        end=invitation.end,
        location=invitation.location,
        description=invitation.description,
        organizer_id=invitation.organizer_id,
        status=event_status,
        attendees=[Attendee(contact_id=invitation.organizer_id, status="accepted")],
    )
    state.events[event.id] = event
    invitation.status, invitation.event_id = response, event.id
    return invitation


@env.tool(read_only=True)
def find_free_slot(
    state: CalendarState,
    day: date,
    duration_minutes: Annotated[int, Field(gt=0, le=720)],
    earliest: time = time(9, 0),
    latest: time = time(18, 0),
) -> FreeSlot:
    """Find the first free stretch on a day, between `earliest` and `latest`, in all calendars.

    Every event in every calendar counts as busy (including holidays). On the current day the
    search starts at the next quarter hour from now.

    Args:
        day: The day to search, e.g. "2026-01-06".
        duration_minutes: How long the slot must be, in minutes (1-720).
        earliest: The earliest start time of day, e.g. "09:00" (default 09:00).
        latest: The latest end time of day, e.g. "18:00" (default 18:00).
    """
    if latest <= earliest:
        raise ToolError(f"latest ({latest.isoformat()}) must be after earliest ({earliest.isoformat()}).")
    if day < state.now.date():
        raise ToolError(f"{day.isoformat()} is in the past; today is {state.now.date().isoformat()}.")
    window_start = datetime.combine(day, earliest)
    window_end = datetime.combine(day, latest)
    if window_start < state.now:
        midnight = datetime.combine(state.now.date(), time())
        steps = -(-(state.now - midnight) // SLOT_STEP)  # ceiling division
        window_start = max(window_start, midnight + steps * SLOT_STEP)
    need = timedelta(minutes=duration_minutes)
    cursor = window_start
    for event in _sorted(list(state.events.values())):
        if event.end <= cursor or event.start >= window_end:
            continue
        if event.start - cursor >= need:
            break
        cursor = max(cursor, event.end)
    if window_end - cursor >= need:
        return FreeSlot(start=cursor, end=cursor + need)
    raise ToolError(
        f"No free {duration_minutes}-minute slot on {day.isoformat()} between "
        f"{earliest.strftime('%H:%M')} and {latest.strftime('%H:%M')}; try another day or a shorter duration."
    )


@env.tool(idempotent=True)
def set_reminder(
    state: CalendarState, event_id: Ref, minutes_before: Annotated[int, Field(ge=0, le=40320)] | None
) -> Event:
    """Set (or clear) the owner's reminder for an event.

    Args:
        event_id: The event, e.g. "evt_0006".
        minutes_before: Remind this many minutes before the start (0-40320, 0 = at the start);
            null removes the reminder.
    """
    event = _event(state, event_id)
    _writable_calendar(state, event.calendar_id)
    event.reminder_minutes = minutes_before
    return event
