"""email: one person's mailbox: inbox, search, threads, sending, replies, forwards, drafts, labels, folders.

Rules (the tools enforce them and their docstrings repeat them to the agent):

- Folders: inbox and archive hold received mail, sent holds what the owner sent, drafts the unsent
  drafts, trash anything deleted (it can be moved back). Labels are the owner's own tags, any number
  per message.
- A message has at most 50 recipients (to and cc together); the subject is at most 200 characters
  and the body at most 10,000. Addresses are checked and duplicates dropped.
- Replies and forwards stay in the original message's thread; replies go to the sender (reply_all:
  also to everyone else on it, never to the owner), with "Re: " before the subject, forwards "Fwd: ".
- Searching and listing leave out drafts and trash unless those folders are asked for.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import date, datetime, time
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NaiveDatetime, model_validator

from envreg.env import Environment, EnvState, ToolError, lookup
from envreg.env.vocab import Email

_ID = re.compile(r"^([a-z]+)_(\d+)$")
MAX_RECIPIENTS = 50
MAX_LABELS = 50
SNIPPET = 120

Folder = Literal["inbox", "archive", "sent", "drafts", "trash"]
Id = Annotated[str, Field(max_length=64)]
Subject = Annotated[str, Field(max_length=200)]
Body = Annotated[str, Field(max_length=10_000)]
Recipients = Annotated[list[Email], Field(max_length=MAX_RECIPIENTS)]
Color = Annotated[str, Field(pattern=r"^#[0-9A-F]{6}$", max_length=7)]


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Owner(Model):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    email: Email
    signature: Annotated[str, Field(max_length=500)] = ""


class Label(Model):
    id: Id = Field(pattern=r"^lbl_\d{4,}$")
    name: Annotated[str, Field(min_length=1, max_length=60)]
    color: Color = "#9E9E9E"


class Message(Model):
    """A message (or a draft) in the mailbox."""

    id: Id = Field(pattern=r"^msg_\d{4,}$")
    thread_id: Id = Field(pattern=r"^thr_\d{4,}$")
    folder: Folder
    sender: Email
    sender_name: Annotated[str, Field(max_length=200)] = ""
    to: Recipients = Field(default_factory=list)
    cc: Recipients = Field(default_factory=list)
    subject: Subject = ""
    body: Body = ""
    sent_at: NaiveDatetime | None = Field(
        default=None, description="When it was sent or received; null for drafts."
    )
    updated_at: NaiveDatetime
    read: bool = False
    starred: bool = False
    label_ids: list[Id] = Field(default_factory=list, max_length=MAX_LABELS)
    in_reply_to: Id | None = Field(default=None, description="The message this one answers.")

    @model_validator(mode="after")
    def _consistent(self) -> Message:
        if len(self.to) + len(self.cc) > MAX_RECIPIENTS:
            raise ValueError(f"message {self.id} has more than {MAX_RECIPIENTS} recipients")
        if len(set(self.label_ids)) != len(self.label_ids):
            raise ValueError(f"message {self.id} has a label twice")
        if self.folder == "drafts" and self.sent_at is not None:
            raise ValueError(f"draft {self.id} has a sent_at; drafts are unsent")
        if self.folder in ("inbox", "archive", "sent") and self.sent_at is None:
            raise ValueError(f"message {self.id} in {self.folder} needs its sent_at")
        if self.folder != "drafts" and self.sent_at is not None and not (self.to or self.cc):
            raise ValueError(f"message {self.id} was sent to nobody")
        return self


class MessageSummary(Model):
    id: str
    thread_id: str
    folder: Folder
    sender: str
    sender_name: str
    to: list[str]
    subject: str
    snippet: str = Field(description="The start of the body.")
    sent_at: datetime | None
    read: bool
    starred: bool
    label_ids: list[str]


class Thread(Model):
    thread_id: str
    subject: str
    messages: list[Message] = Field(description="Oldest first; drafts last; trash left out.")


class LabelCount(Label):
    messages: int
    unread: int


class EmailState(EnvState):
    owner: Owner
    labels: dict[str, Label] = Field(default_factory=dict, max_length=MAX_LABELS)
    messages: dict[str, Message] = Field(default_factory=dict, max_length=20_000)

    @model_validator(mode="after")
    def _integrity(self) -> EmailState:
        owner = self.owner.email.lower()
        names: set[str] = set()
        for key, label in self.labels.items():
            if key != label.id:
                raise ValueError(f"labels: key {key!r} holds {label.id!r}")
            if label.name.lower() in names:
                raise ValueError(f"two labels are named {label.name!r}")
            names.add(label.name.lower())
        for key, msg in self.messages.items():
            if key != msg.id:
                raise ValueError(f"messages: key {key!r} holds {msg.id!r}; store each under its own id")
            for label_id in msg.label_ids:
                if label_id not in self.labels:
                    raise ValueError(f"message {msg.id} has unknown label {label_id!r}")
            mine = msg.sender.lower() == owner
            if msg.folder in ("sent", "drafts") and not mine:
                raise ValueError(f"message {msg.id} is in {msg.folder} but was not written by the owner")
            if (
                msg.folder in ("inbox", "archive")
                and mine
                and owner not in (a.lower() for a in msg.to + msg.cc)
            ):
                raise ValueError(f"message {msg.id} is in {msg.folder} but the owner only sent it")
            if msg.folder in ("sent", "drafts") and not msg.read:
                raise ValueError(f"message {msg.id}: the owner's own messages are read")
            for at in (msg.sent_at, msg.updated_at):
                if at is not None and at > self.now:
                    raise ValueError(f"message {msg.id} has a time after now ({self.now.isoformat()})")
            if msg.in_reply_to is not None:
                parent = self.messages.get(msg.in_reply_to)
                if parent is None or parent.thread_id != msg.thread_id:
                    raise ValueError(
                        f"message {msg.id} answers {msg.in_reply_to}, which is not in its thread"
                    )
        for ident in [*self.labels, *self.messages, *(m.thread_id for m in self.messages.values())]:
            if m := _ID.match(ident):
                prefix, n = m.group(1), int(m.group(2))
                if self.id_counters.get(prefix, 0) < n:
                    raise ValueError(
                        f"id_counters[{prefix!r}] is {self.id_counters.get(prefix, 0)} but {ident} exists: "
                        "new ids would collide"
                    )
        return self


env = Environment(
    "email",
    EmailState,
    version="1.0.1",
    domain="office",
    description=(
        "One person's mailbox: list and search mail by words, address and date, read messages and whole "
        "threads, send, reply (all), forward, keep and send drafts, create and apply labels, star, mark "
        "read or unread, archive, delete and restore."
    ),
)


# ---------------------------------------------------------------- helpers


def _message(state: EmailState, message_id: str) -> Message:
    return lookup(
        state.messages, message_id, "message", "Find messages with list_messages or search_messages."
    )


def _label(state: EmailState, label_id: str) -> Label:
    return lookup(state.labels, label_id, "label", "See list_labels, or create one with create_label.")


def _summary(msg: Message) -> MessageSummary:
    snippet = " ".join(msg.body.split())
    return MessageSummary(
        id=msg.id,
        thread_id=msg.thread_id,
        folder=msg.folder,
        sender=msg.sender,
        sender_name=msg.sender_name,
        to=list(msg.to),
        subject=msg.subject,
        snippet=snippet[:SNIPPET] + ("…" if len(snippet) > SNIPPET else ""),
        sent_at=msg.sent_at,
        read=msg.read,
        starred=msg.starred,
        label_ids=list(msg.label_ids),
    )


def _newest_first(messages: list[Message]) -> list[Message]:
    return sorted(messages, key=lambda m: (m.sent_at or m.updated_at, m.id), reverse=True)


def _clean(state: EmailState, to: list[str], cc: list[str]) -> tuple[list[str], list[str]]:
    """Drop duplicate addresses (any case), keeping the first; cc loses what to already has."""
    seen: set[str] = set()
    out: list[list[str]] = [[], []]
    for i, group in enumerate((to, cc)):
        for address in group:
            if address.lower() not in seen:
                seen.add(address.lower())
                out[i].append(address)
    if len(out[0]) + len(out[1]) > MAX_RECIPIENTS:
        raise ToolError(f"At most {MAX_RECIPIENTS} recipients (to and cc together).")
    return out[0], out[1]


def _with_prefix(prefix: str, subject: str) -> str:
    return subject if subject.lower().startswith(prefix.lower()) else f"{prefix}{subject}"[:200]


def _quote(msg: Message) -> str:
    when = msg.sent_at.strftime("%a %d %b %Y %H:%M") if msg.sent_at else ""
    quoted = "\n".join(f"> {line}" for line in msg.body.splitlines())
    return f"On {when}, {msg.sender_name or msg.sender} <{msg.sender}> wrote:\n{quoted}"


def _compose(body: str, signature: str, quote: str = "") -> str:
    text = body.rstrip()
    if signature:
        text = f"{text}\n\n{signature}" if text else signature
    if quote:
        text = f"{text}\n\n{quote}"
    if len(text) > 10_000:
        raise ToolError("The message would be longer than 10,000 characters; shorten the body.")
    return text


def _new_message(state: EmailState, **fields: object) -> Message:
    msg = Message(
        id=state.new_id("msg"),
        sender=state.owner.email,
        sender_name=state.owner.name,
        updated_at=state.now,
        read=True,
        **fields,  # type: ignore[arg-type]
    )
    state.messages[msg.id] = msg
    return msg


# ---------------------------------------------------------------- reading


@env.tool(read_only=True)
def list_messages(
    state: EmailState,
    folder: Folder = "inbox",
    label_id: Id | None = None,
    unread_only: bool = False,
    starred_only: bool = False,
    limit: Annotated[int, Field(ge=1, le=100)] = 20,
) -> list[MessageSummary]:
    """List the messages of a folder (or with a label, in any folder but trash), newest first, without bodies.

    Args:
        folder: inbox (default), archive, sent, drafts or trash. Ignored when label_id is given.
        label_id: Only messages with this label (lbl_...), from list_labels.
        unread_only: Only unread messages.
        starred_only: Only starred messages.
        limit: The most messages to return (1-100, default 20).
    """
    if label_id is not None:
        _label(state, label_id)
        found = [m for m in state.messages.values() if label_id in m.label_ids and m.folder != "trash"]
    else:
        found = [m for m in state.messages.values() if m.folder == folder]
    found = [m for m in found if (not unread_only or not m.read) and (not starred_only or m.starred)]
    return [_summary(m) for m in _newest_first(found)[:limit]]


@env.tool(read_only=True)
def search_messages(
    state: EmailState,
    query: Annotated[str, Field(max_length=200)] = "",
    email: Email | None = None,
    after: date | None = None,
    before: date | None = None,
    folder: Folder | None = None,
    limit: Annotated[int, Field(ge=1, le=100)] = 20,
) -> list[MessageSummary]:
    """Search mail, newest first: every word of the query must appear in the subject, body or a name or
    address on the message (case and accents ignored). Drafts and trash only when that folder is given.

    Args:
        query: Words to find, e.g. "budget review"; empty matches everything (with the other filters).
        email: Only messages from or to this address (sender, to or cc), e.g. "mei.chen@contoso.example".
        after: Only messages sent on or after this day, e.g. "2026-01-01".
        before: Only messages sent before this day.
        folder: Only this folder: inbox, archive, sent, drafts or trash.
        limit: The most messages to return (1-100, default 20).
    """
    if after is not None and before is not None and before <= after:
        raise ToolError(f"before ({before.isoformat()}) must be after after ({after.isoformat()}).")
    words = _fold(query).split()
    lo = datetime.combine(after, time()) if after else None
    hi = datetime.combine(before, time()) if before else None
    found = []
    for msg in state.messages.values():
        if folder is not None and msg.folder != folder:
            continue
        if folder is None and msg.folder in ("drafts", "trash"):
            continue
        people = [msg.sender, *msg.to, *msg.cc]
        if email is not None and email.lower() not in (p.lower() for p in people):
            continue
        stamp = msg.sent_at or msg.updated_at
        if (lo is not None and stamp < lo) or (hi is not None and stamp >= hi):
            continue
        text = _fold(" ".join([msg.subject, msg.body, msg.sender_name, *people]))
        if all(w in text for w in words):
            found.append(msg)
    return [_summary(m) for m in _newest_first(found)[:limit]]


@env.tool(idempotent=True)
def read_message(state: EmailState, message_id: Id) -> Message:
    """Open a message: its full body and recipients. It is marked read.

    Args:
        message_id: The message id (msg_...), from list_messages or search_messages.
    """
    msg = _message(state, message_id)
    msg.read = True
    return msg


@env.tool(read_only=True)
def get_thread(state: EmailState, thread_id: Id) -> Thread:
    """Get a whole conversation: its messages oldest first, then any drafts (trash left out).

    Args:
        thread_id: The thread id (thr_...), from a message's thread_id.
    """
    msgs = [m for m in state.messages.values() if m.thread_id == thread_id and m.folder != "trash"]
    if not msgs:
        raise ToolError(
            f"No thread with id {thread_id!r} (outside the trash). Take thread_id from a message."
        )
    msgs.sort(key=lambda m: (m.sent_at is None, m.sent_at or m.updated_at, m.id))
    return Thread(thread_id=thread_id, subject=msgs[0].subject, messages=msgs)


# ---------------------------------------------------------------- writing


@env.tool
def send_email(
    state: EmailState,
    to: Annotated[list[Email], Field(min_length=1, max_length=MAX_RECIPIENTS)],
    subject: Annotated[str, Field(min_length=1, max_length=200)],
    body: Body,
    cc: Recipients | None = None,
) -> Message:
    """Send a new message (a new thread); the owner's signature is added below the body.

    Args:
        to: Recipient addresses, e.g. ["priya.raman@northwind.example"].
        subject: The subject line (1-200 characters).
        body: The text of the message (up to 10,000 characters).
        cc: Addresses to copy.
    """
    if not subject.strip():
        raise ToolError("The subject is blank; give the message a subject.")
    to_clean, cc_clean = _clean(state, to, cc or [])
    return _new_message(
        state,
        thread_id=state.new_id("thr"),
        folder="sent",
        to=to_clean,
        cc=cc_clean,
        subject=subject.strip(),
        body=_compose(body, state.owner.signature),
        sent_at=state.now,
    )


def _reply_recipients(state: EmailState, msg: Message, reply_all: bool) -> tuple[list[str], list[str]]:
    owner = state.owner.email.lower()
    if msg.sender.lower() == owner:
        to, cc = list(msg.to), list(msg.cc) if reply_all else []
    else:
        to = [msg.sender] + ([a for a in msg.to] if reply_all else [])
        cc = list(msg.cc) if reply_all else []
    to = [a for a in to if a.lower() != owner]
    cc = [a for a in cc if a.lower() != owner]
    if not to and not cc:
        raise ToolError(f"Message {msg.id} has nobody to reply to but the owner.")
    return _clean(state, to, cc)


@env.tool
def reply_to_message(state: EmailState, message_id: Id, body: Body, reply_all: bool = False) -> Message:
    """Reply in the message's thread: to its sender (reply_all: also everyone else on it), subject "Re: ...",
    the original quoted below the signature.

    Args:
        message_id: The message to answer (msg_...), from list_messages or get_thread.
        body: The reply text.
        reply_all: Also reply to the other recipients (to and cc), never to the owner.
    """
    msg = _message(state, message_id)
    if msg.folder == "drafts":
        raise ToolError(f"{msg.id} is a draft; send it with send_draft instead of replying to it.")
    to, cc = _reply_recipients(state, msg, reply_all)
    msg.read = True
    return _new_message(
        state,
        thread_id=msg.thread_id,
        folder="sent",
        to=to,
        cc=cc,
        subject=_with_prefix("Re: ", msg.subject),
        body=_compose(body, state.owner.signature, _quote(msg)),
        sent_at=state.now,
        in_reply_to=msg.id,
    )


@env.tool
def forward_message(
    state: EmailState,
    message_id: Id,
    to: Annotated[list[Email], Field(min_length=1, max_length=MAX_RECIPIENTS)],
    body: Body = "",
) -> Message:
    """Forward a message with an optional note above it; subject "Fwd: ...", in the same thread.

    Args:
        message_id: The message to forward (msg_...).
        to: Who gets it, e.g. ["sarah.goldberg@northwind.example"].
        body: An optional note above the forwarded message.
    """
    msg = _message(state, message_id)
    if msg.folder == "drafts":
        raise ToolError(f"{msg.id} is a draft; send it with send_draft instead of forwarding it.")
    to_clean, _ = _clean(state, to, [])
    header = (
        "---------- Forwarded message ----------\n"
        f"From: {msg.sender_name} <{msg.sender}>\n"
        f"Date: {msg.sent_at.isoformat() if msg.sent_at else ''}\n"
        f"Subject: {msg.subject}\n"
        f"To: {', '.join(msg.to)}\n\n{msg.body}"
    )
    return _new_message(
        state,
        thread_id=msg.thread_id,
        folder="sent",
        to=to_clean,
        subject=_with_prefix("Fwd: ", msg.subject),
        body=_compose(body, state.owner.signature, header),
        sent_at=state.now,
    )


@env.tool
def save_draft(
    state: EmailState,
    to: Recipients | None = None,
    subject: Subject = "",
    body: Body = "",
    cc: Recipients | None = None,
    draft_id: Id | None = None,
    reply_to_message_id: Id | None = None,
) -> Message:
    """Save a draft, or replace the content of an existing draft; send it later with send_draft.

    A draft that answers a message sits in that message's thread. Recipients may be empty for now.

    Args:
        to: Recipient addresses.
        subject: The subject line.
        body: The text (the signature is added when it is sent).
        cc: Addresses to copy.
        draft_id: The draft to update (msg_...); omit to start a new draft.
        reply_to_message_id: The message this draft answers (new drafts only).
    """
    to_clean, cc_clean = _clean(state, to or [], cc or [])
    if draft_id is not None:
        draft = _message(state, draft_id)
        if draft.folder != "drafts":
            raise ToolError(f"{draft.id} is not a draft (it is in {draft.folder}).")
        if reply_to_message_id is not None and reply_to_message_id != draft.in_reply_to:
            raise ToolError("A draft's reply_to_message_id is fixed when it is created.")
        draft.to, draft.cc, draft.subject, draft.body = to_clean, cc_clean, subject, body
        draft.updated_at = state.now
        return draft
    thread_id, parent = None, None
    if reply_to_message_id is not None:
        parent = _message(state, reply_to_message_id)
        if parent.folder == "drafts":
            raise ToolError(f"{parent.id} is itself a draft.")
        thread_id = parent.thread_id
    return _new_message(
        state,
        thread_id=thread_id or state.new_id("thr"),
        folder="drafts",
        to=to_clean,
        cc=cc_clean,
        subject=subject or (_with_prefix("Re: ", parent.subject) if parent else ""),
        body=body,
        in_reply_to=parent.id if parent else None,
    )


@env.tool
def send_draft(state: EmailState, draft_id: Id) -> Message:
    """Send a draft as it is (with the signature added); it needs a recipient and a subject.

    Args:
        draft_id: The draft (msg_...), from list_messages(folder="drafts") or save_draft.
    """
    draft = _message(state, draft_id)
    if draft.folder != "drafts":
        raise ToolError(f"{draft.id} is not a draft (it is in {draft.folder}); nothing to send.")
    if not draft.to and not draft.cc:
        raise ToolError(
            f"Draft {draft.id} has no recipient; add one with save_draft(draft_id=..., to=[...])."
        )
    if not draft.subject.strip():
        raise ToolError(f"Draft {draft.id} has no subject; add one with save_draft.")
    quote = ""
    if draft.in_reply_to is not None and draft.in_reply_to in state.messages:
        quote = _quote(state.messages[draft.in_reply_to])
    draft.body = _compose(draft.body, state.owner.signature, quote)
    draft.folder, draft.sent_at, draft.updated_at = "sent", state.now, state.now
    return draft


# ---------------------------------------------------------------- organizing


@env.tool(read_only=True)
def list_labels(state: EmailState) -> list[LabelCount]:
    """List the owner's labels with how many messages (outside the trash) carry each, and how many are unread."""
    out = []
    for label in sorted(state.labels.values(), key=lambda lb: lb.name.lower()):
        tagged = [m for m in state.messages.values() if label.id in m.label_ids and m.folder != "trash"]
        out.append(
            LabelCount(**label.model_dump(), messages=len(tagged), unread=sum(not m.read for m in tagged))
        )
    return out


@env.tool
def create_label(
    state: EmailState, name: Annotated[str, Field(min_length=1, max_length=60)], color: Color = "#9E9E9E"
) -> Label:
    """Create a label (a tag for messages); names are unique regardless of case.

    Args:
        name: The label name, e.g. "Taxes 2025".
        color: Display colour as #RRGGBB, e.g. "#F4511E".
    """
    name = name.strip()
    if not name:
        raise ToolError("The label name is blank.")
    for label in state.labels.values():
        if label.name.lower() == name.lower():
            raise ToolError(f"A label named {label.name!r} already exists ({label.id}).")
    if len(state.labels) >= MAX_LABELS:
        raise ToolError(f"At most {MAX_LABELS} labels.")
    label = Label(id=state.new_id("lbl"), name=name, color=color)
    state.labels[label.id] = label
    return label


@env.tool(idempotent=True)
def label_message(
    state: EmailState,
    message_id: Id,
    add: Annotated[list[Id], Field(max_length=MAX_LABELS)] | None = None,
    remove: Annotated[list[Id], Field(max_length=MAX_LABELS)] | None = None,
) -> Message:
    """Add labels to and remove labels from a message; adding one it has, or removing one it lacks, changes nothing.

    Args:
        message_id: The message (msg_...).
        add: Label ids (lbl_...) to add, from list_labels.
        remove: Label ids to remove.
    """
    msg = _message(state, message_id)
    if not add and not remove:
        raise ToolError("Nothing to change: give label ids to add or remove.")
    for label_id in remove or []:
        _label(state, label_id)
        if label_id in msg.label_ids:
            msg.label_ids.remove(label_id)
    for label_id in add or []:
        _label(state, label_id)
        if label_id not in msg.label_ids:
            msg.label_ids.append(label_id)
    return msg


@env.tool(idempotent=True)
def mark_message(
    state: EmailState, message_id: Id, read: bool | None = None, starred: bool | None = None
) -> Message:
    """Mark a received message read or unread, and star or unstar any message.

    Args:
        message_id: The message (msg_...).
        read: true for read, false for unread (received messages only).
        starred: true to star, false to unstar.
    """
    msg = _message(state, message_id)
    if read is None and starred is None:
        raise ToolError("Nothing to change: give read and/or starred.")
    if read is False and msg.sender.lower() == state.owner.email.lower() and msg.folder in ("sent", "drafts"):
        raise ToolError(f"{msg.id} is the owner's own message; it cannot be marked unread.")
    if read is not None:
        msg.read = read
    if starred is not None:
        msg.starred = starred
    return msg


@env.tool(idempotent=True)
def move_message(
    state: EmailState, message_id: Id, folder: Literal["inbox", "archive", "sent", "drafts", "trash"]
) -> Message:
    """Move a message: archive it, delete it (trash), or restore it from the trash.

    Received mail goes to inbox or archive, the owner's sent mail back to sent, drafts back to drafts;
    anything can go to trash.

    Args:
        message_id: The message (msg_...).
        folder: trash to delete, archive to file away, inbox, sent or drafts to restore.
    """
    msg = _message(state, message_id)
    if folder == msg.folder:
        return msg
    if folder != "trash":
        kind = (
            "drafts"
            if msg.sent_at is None
            else "sent"
            if msg.sender.lower() == state.owner.email.lower()
            else "received"
        )
        allowed = {"drafts": ("drafts",), "sent": ("sent",), "received": ("inbox", "archive")}[kind]
        if kind == "sent" and state.owner.email.lower() in (a.lower() for a in msg.to + msg.cc):
            allowed = ("sent", "inbox", "archive")
        if folder not in allowed:
            raise ToolError(
                f"{msg.id} is {'a draft' if kind == 'drafts' else kind + ' mail'}; it can go to {', '.join(allowed)} or trash."
            )
    msg.folder = folder
    return msg
