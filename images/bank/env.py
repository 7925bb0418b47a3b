"""Retail bank: customers, accounts, cards, payees, transfers, payments, statements and limits.

Money is always integer cents in the account's currency (``12345`` means 123.45). Every account
keeps a ledger: its transactions, in posting order, each with the running balance after it, and
the account balance is the last running balance. The state model refuses any state in which that
ledger does not add up.
"""

from __future__ import annotations

import hashlib
import re
from datetime import date, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NaiveDatetime, field_validator, model_validator

from envreg.env import Environment, EnvState, ToolError

Currency = Literal["EUR", "USD"]
AccountKind = Literal["checking", "savings"]
TransactionKind = Literal[
    "deposit", "salary", "interest", "transfer_in", "transfer_out", "payment", "card", "fee"
]

CREDIT_KINDS = frozenset({"deposit", "salary", "interest", "transfer_in"})
DEBIT_KINDS = frozenset({"transfer_out", "payment", "card", "fee"})

BANK_COUNTRY = "DE"
BANK_CODE = "10090044"
MAX_DAILY_LIMIT_CENTS = 1_000_000
DEFAULT_DAILY_LIMIT_CENTS = 200_000
MAX_OPEN_ACCOUNTS = 5

Cents = Annotated[int, Field(strict=True, gt=0, le=100_000_000)]
# Bounded strings, so that one agent cannot grow a shared server's memory (the SDK also caps whole
# arguments and states): ids (an id the agent passes is checked against the state, not a pattern), IBANs.
Ref = Annotated[str, Field(max_length=64)]
Iban = Annotated[str, Field(max_length=34)]
_ID = re.compile(r"^([a-z]+)_(\d+)$")
_IBAN = re.compile(r"^[A-Z]{2}\d{2}[A-Z0-9]{11,30}$")


# --------------------------------------------------------------------------- IBANs


def _iban_digits(text: str) -> int:
    return int("".join(str(int(ch, 36)) for ch in text))


def normalize_iban(raw: str) -> str:
    return re.sub(r"[\s-]", "", raw).upper()


def iban_is_valid(iban: str) -> bool:
    """Format and ISO 7064 mod-97 checksum."""
    return bool(_IBAN.match(iban)) and _iban_digits(iban[4:] + iban[:4]) % 97 == 1


def make_iban(country: str, bban: str) -> str:
    check = 98 - _iban_digits(bban + country + "00") % 97
    return f"{country}{check:02d}{bban}"


def account_iban(account_id: str) -> str:
    """The IBAN this bank gives account ``acc_NNNN``: derived from the id, so deterministic."""
    return make_iban(BANK_COUNTRY, f"{BANK_CODE}40{int(account_id.split('_')[1]):08d}")


def card_last4(card_id: str) -> str:
    return f"{int(hashlib.sha256(card_id.encode()).hexdigest(), 16) % 10_000:04d}"


# --------------------------------------------------------------------------- state model


class Customer(BaseModel):
    """A person who banks here."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^cus_\d{4,}$", max_length=64)
    name: str = Field(min_length=1, max_length=200)
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$", max_length=254)
    phone: str = Field(max_length=40)
    customer_since: date


class Account(BaseModel):
    """A checking or savings account in one currency."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^acc_\d{4,}$", max_length=64)
    customer_id: Ref
    name: str = Field(min_length=1, max_length=60)
    kind: AccountKind
    currency: Currency
    iban: Iban
    status: Literal["active", "frozen", "closed"] = "active"
    balance_cents: int
    overdraft_limit_cents: int = Field(default=0, ge=0)
    daily_limit_cents: int = Field(
        default=DEFAULT_DAILY_LIMIT_CENTS,
        gt=0,
        le=MAX_DAILY_LIMIT_CENTS,
        description="Cap on payments and transfers to other customers per calendar day.",
    )
    opened_on: date
    closed_on: date | None = None

    @field_validator("iban")
    @classmethod
    def _valid_iban(cls, value: str) -> str:
        if not iban_is_valid(value):
            raise ValueError(f"invalid IBAN {value!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Account:
        if self.balance_cents < -self.overdraft_limit_cents:
            raise ValueError(
                f"account {self.id} balance {self.balance_cents} is overdrawn beyond its overdraft limit "
                f"of {self.overdraft_limit_cents} cents"
            )
        if self.kind == "savings" and self.overdraft_limit_cents:
            raise ValueError(f"savings account {self.id} cannot have an overdraft")
        if (self.status == "closed") != (self.closed_on is not None):
            raise ValueError(f"account {self.id}: closed_on must be set exactly when the status is 'closed'")
        if self.status == "closed" and self.balance_cents != 0:
            raise ValueError(f"closed account {self.id} must have a zero balance")
        if self.closed_on is not None and self.closed_on < self.opened_on:
            raise ValueError(f"account {self.id} is closed before it was opened")
        return self


class Card(BaseModel):
    """A debit card drawing on one account."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^crd_\d{4,}$", max_length=64)
    account_id: Ref
    last4: str = Field(pattern=r"^\d{4}$")
    expires: str = Field(pattern=r"^(0[1-9]|1[0-2])/\d{2}$", description="MM/YY")
    status: Literal["active", "frozen", "cancelled"] = "active"
    replaced_by: Ref | None = Field(default=None, description="The card issued to replace this one.")


class Payee(BaseModel):
    """A saved external recipient of a customer's payments."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^pay_\d{4,}$", max_length=64)
    customer_id: Ref
    name: str = Field(min_length=1, max_length=70)
    iban: Iban
    added_on: date
    removed_on: date | None = None

    @field_validator("iban")
    @classmethod
    def _valid_iban(cls, value: str) -> str:
        if not iban_is_valid(value):
            raise ValueError(f"invalid IBAN {value!r}")
        return value


class Transaction(BaseModel):
    """One ledger line: a signed amount on one account and the balance after it."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^txn_\d{4,}$", max_length=64)
    account_id: Ref
    posted_at: NaiveDatetime
    kind: TransactionKind
    amount_cents: int = Field(description="Positive for money in, negative for money out.")
    balance_after_cents: int
    description: str = Field(max_length=1000)
    counterparty_account_id: Ref | None = Field(default=None, description="The other account of a transfer.")
    payee_id: Ref | None = Field(default=None, description="The payee of a payment.")

    @model_validator(mode="after")
    def _signed(self) -> Transaction:
        if self.kind in CREDIT_KINDS and self.amount_cents <= 0:
            raise ValueError(f"transaction {self.id}: a {self.kind} must have a positive amount")
        if self.kind in DEBIT_KINDS and self.amount_cents >= 0:
            raise ValueError(f"transaction {self.id}: a {self.kind} must have a negative amount")
        if (self.kind in ("transfer_in", "transfer_out")) != (self.counterparty_account_id is not None):
            raise ValueError(f"transaction {self.id}: only transfers have a counterparty_account_id")
        if (self.kind == "payment") != (self.payee_id is not None):
            raise ValueError(f"transaction {self.id}: exactly the payments have a payee_id")
        return self


class BankState(EnvState):
    """Everything the bank knows. Collections are keyed by id; `transactions` is in posting order."""

    customers: dict[str, Customer] = Field(default_factory=dict)
    accounts: dict[str, Account] = Field(default_factory=dict)
    cards: dict[str, Card] = Field(default_factory=dict)
    payees: dict[str, Payee] = Field(default_factory=dict)
    transactions: list[Transaction] = Field(default_factory=list)

    @model_validator(mode="after")
    def _integrity(self) -> BankState:
        for field in ("customers", "accounts", "cards", "payees"):
            for key, item in getattr(self, field).items():
                if key != item.id:
                    raise ValueError(f"{field}: key {key!r} does not match the id {item.id!r} it holds")
        self._check_references()
        self._check_ledger()
        self._check_id_counters()
        return self

    def _check_references(self) -> None:
        for acc in self.accounts.values():
            if acc.customer_id not in self.customers:
                raise ValueError(f"account {acc.id} belongs to unknown customer {acc.customer_id!r}")
        ibans: dict[str, str] = {}
        for acc in self.accounts.values():
            if acc.iban in ibans:
                raise ValueError(f"accounts {ibans[acc.iban]} and {acc.id} have the same IBAN {acc.iban}")
            ibans[acc.iban] = acc.id
        for card in self.cards.values():
            acc = self.accounts.get(card.account_id)
            if acc is None:
                raise ValueError(f"card {card.id} draws on unknown account {card.account_id!r}")
            if acc.status == "closed" and card.status != "cancelled":
                raise ValueError(f"card {card.id} is {card.status} but its account {acc.id} is closed")
            if card.replaced_by is not None:
                if card.replaced_by not in self.cards:
                    raise ValueError(f"card {card.id} is replaced by unknown card {card.replaced_by!r}")
                if card.status != "cancelled":
                    raise ValueError(f"card {card.id} was replaced, so it must be cancelled")
        for payee in self.payees.values():
            if payee.customer_id not in self.customers:
                raise ValueError(f"payee {payee.id} belongs to unknown customer {payee.customer_id!r}")
            if payee.iban in ibans:
                raise ValueError(f"payee {payee.id} has the IBAN of account {ibans[payee.iban]} at this bank")

    def _check_ledger(self) -> None:
        running = dict.fromkeys(self.accounts, 0)
        seen: set[str] = set()
        previous: datetime | None = None
        for txn in self.transactions:
            if txn.id in seen:
                raise ValueError(f"transaction id {txn.id} is used twice")
            seen.add(txn.id)
            if previous is not None and txn.posted_at < previous:
                raise ValueError(f"transaction {txn.id} is posted before the transaction listed ahead of it")
            previous = txn.posted_at
            if txn.posted_at > self.now:
                raise ValueError(
                    f"transaction {txn.id} is posted in the future ({txn.posted_at} > now {self.now})"
                )
            acc = self.accounts.get(txn.account_id)
            if acc is None:
                raise ValueError(f"transaction {txn.id} is on unknown account {txn.account_id!r}")
            if txn.posted_at.date() < acc.opened_on:
                raise ValueError(f"transaction {txn.id} is posted before account {acc.id} was opened")
            if txn.counterparty_account_id is not None:
                other = self.accounts.get(txn.counterparty_account_id)
                if other is None or other.id == acc.id:
                    raise ValueError(
                        f"transaction {txn.id} has a bad counterparty {txn.counterparty_account_id!r}"
                    )
                if other.currency != acc.currency:
                    raise ValueError(f"transaction {txn.id} transfers between currencies")
            if txn.payee_id is not None:
                payee = self.payees.get(txn.payee_id)
                if payee is None:
                    raise ValueError(f"transaction {txn.id} pays unknown payee {txn.payee_id!r}")
                if payee.customer_id != acc.customer_id:
                    raise ValueError(
                        f"transaction {txn.id} pays payee {payee.id} of customer {payee.customer_id}, "
                        f"not of the account holder {acc.customer_id}"
                    )
            running[acc.id] += txn.amount_cents
            if txn.balance_after_cents != running[acc.id]:
                raise ValueError(
                    f"transaction {txn.id}: balance_after_cents {txn.balance_after_cents} does not equal "
                    f"the running balance {running[acc.id]} of account {acc.id}"
                )
            # No tool changes an overdraft limit, so the whole history must respect today's.
            if running[acc.id] < -acc.overdraft_limit_cents:
                raise ValueError(
                    f"transaction {txn.id} takes account {acc.id} to {running[acc.id]}, beyond its overdraft "
                    f"limit of {acc.overdraft_limit_cents} cents"
                )
        for acc in self.accounts.values():
            if acc.balance_cents != running[acc.id]:
                raise ValueError(
                    f"account {acc.id} balance_cents {acc.balance_cents} does not equal the sum of its "
                    f"transactions {running[acc.id]}"
                )

    def _check_id_counters(self) -> None:
        ids = [*self.customers, *self.accounts, *self.cards, *self.payees, *(t.id for t in self.transactions)]
        for item_id in ids:
            m = _ID.match(item_id)
            if m and self.id_counters.get(m.group(1), 0) < int(m.group(2)):
                raise ValueError(
                    f"id_counters[{m.group(1)!r}] is {self.id_counters.get(m.group(1), 0)} but id {item_id} "
                    "exists; new ids would collide"
                )


# --------------------------------------------------------------------------- tool results


class Balance(BaseModel):
    account_id: str
    currency: Currency
    status: str
    balance_cents: int
    overdraft_limit_cents: int
    available_cents: int = Field(description="What can be spent now: balance plus overdraft.")
    daily_limit_cents: int
    limited_sent_today_cents: int = Field(description="Payments and transfers to other customers today.")
    remaining_today_cents: int = Field(description="What the daily limit still allows today.")


class Statement(BaseModel):
    account_id: str
    month: str
    currency: Currency
    opening_balance_cents: int
    closing_balance_cents: int
    total_in_cents: int
    total_out_cents: int
    transactions: list[Transaction]


class TransferReceipt(BaseModel):
    debit: Transaction = Field(description="The money leaving the source account.")
    credit: Transaction = Field(description="The money arriving on the destination account.")


class OpenedAccount(BaseModel):
    account: Account
    card: Card | None = Field(description="The debit card issued with a checking account.")


# --------------------------------------------------------------------------- helpers


def _customer(state: BankState, customer_id: str) -> Customer:
    customer = state.customers.get(customer_id)
    if customer is None:
        raise ToolError(
            f"No customer {customer_id!r}. Use find_customer to look up the customer id (cus_...)."
        )
    return customer


def _account(state: BankState, account_id: str, *, usable: bool = False) -> Account:
    acc = state.accounts.get(account_id)
    if acc is None:
        raise ToolError(
            f"No account {account_id!r}. Use list_accounts with the customer id to see account ids (acc_...)."
        )
    if usable and acc.status == "closed":
        raise ToolError(
            f"Account {acc.id} is closed; choose one of the customer's open accounts (list_accounts)."
        )
    if usable and acc.status == "frozen":
        raise ToolError(
            f"Account {acc.id} is frozen pending a fraud review: no money can move in or out of it and it "
            "cannot be changed. Use another account; the customer must contact the fraud team."
        )
    return acc


def _card(state: BankState, card_id: str) -> Card:
    card = state.cards.get(card_id)
    if card is None:
        raise ToolError(
            f"No card {card_id!r}. Use list_cards with the customer id to see card ids (crd_...)."
        )
    return card


def _fmt(cents: int, currency: str) -> str:
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100}.{abs(cents) % 100:02d} {currency}"


def _limited_sent_today(state: BankState, acc: Account) -> int:
    """Payments and transfers to other customers sent from `acc` on the current calendar day."""
    total = 0
    today = state.now.date()
    for txn in state.transactions:
        if txn.account_id != acc.id or txn.posted_at.date() != today:
            continue
        if txn.kind == "payment" or (
            txn.kind == "transfer_out"
            and state.accounts[txn.counterparty_account_id or ""].customer_id != acc.customer_id
        ):
            total -= txn.amount_cents
    return total


def _check_funds(state: BankState, acc: Account, amount: int) -> None:
    available = acc.balance_cents + acc.overdraft_limit_cents
    if amount > available:
        raise ToolError(
            f"Insufficient funds on {acc.id}: {_fmt(amount, acc.currency)} requested but only "
            f"{_fmt(available, acc.currency)} available (balance plus overdraft). Send less, or move money "
            "onto this account first."
        )


def _check_daily_limit(state: BankState, acc: Account, amount: int) -> None:
    sent = _limited_sent_today(state, acc)
    if sent + amount > acc.daily_limit_cents:
        raise ToolError(
            f"Daily limit exceeded on {acc.id}: the limit is {_fmt(acc.daily_limit_cents, acc.currency)}, "
            f"{_fmt(sent, acc.currency)} was already sent today, so at most "
            f"{_fmt(max(acc.daily_limit_cents - sent, 0), acc.currency)} more can go out today. "
            "Send less, or raise the limit with set_daily_limit if the customer asks for it."
        )


def _post(
    state: BankState,
    acc: Account,
    kind: str,
    amount: int,
    description: str,
    *,
    counterparty_account_id: str | None = None,
    payee_id: str | None = None,
) -> Transaction:
    acc.balance_cents += amount
    txn = Transaction(
        id=state.new_id("txn"),
        account_id=acc.id,
        posted_at=state.now,
        kind=kind,  # type: ignore[arg-type]
        amount_cents=amount,
        balance_after_cents=acc.balance_cents,
        description=description,
        counterparty_account_id=counterparty_account_id,
        payee_id=payee_id,
    )
    state.transactions.append(txn)
    return txn


def _issue_card(state: BankState, acc: Account) -> Card:
    card_id = state.new_id("crd")
    now = state.now
    card = Card(
        id=card_id,
        account_id=acc.id,
        last4=card_last4(card_id),
        expires=f"{now.month:02d}/{(now.year + 4) % 100:02d}",
    )
    state.cards[card.id] = card
    return card


# --------------------------------------------------------------------------- environment and tools

env = Environment(
    "bank",
    BankState,
    version="1.0.0",
    domain="finance",
    description=(
        "Retail bank back office: look up customers, their checking and savings accounts (EUR/USD), "
        "balances and monthly statements; move money between accounts and to saved payees under "
        "daily limits; manage payees, debit cards and accounts. Money is integer cents."
    ),
)


@env.tool(read_only=True)
def find_customer(state: BankState, query: Annotated[str, Field(max_length=200)]) -> list[Customer]:
    """Find customers by email address (exact, any case) or by part of their name.

    Returns every match; use the customer id (cus_...) with the other tools.

    Args:
        query: An email address, or a full or partial name such as "Schneider".
    """
    q = query.strip().lower()
    if not q:
        raise ToolError("query is empty: give an email address or part of the customer's name.")
    if "@" in q:
        found = [c for c in state.customers.values() if c.email.lower() == q]
    else:
        found = [c for c in state.customers.values() if q in c.name.lower()]
    if not found:
        raise ToolError(
            f"No customer matches {query!r}. Check the spelling, or search by the full email address."
        )
    return found


@env.tool(read_only=True)
def list_accounts(state: BankState, customer_id: Ref, include_closed: bool = False) -> list[Account]:
    """List a customer's accounts with their ids, kinds, currencies, balances and limits.

    Args:
        customer_id: The customer id (cus_...), from find_customer.
        include_closed: Also list accounts that have been closed.
    """
    _customer(state, customer_id)
    return [
        a
        for a in state.accounts.values()
        if a.customer_id == customer_id and (include_closed or a.status != "closed")
    ]


@env.tool(read_only=True)
def get_balance(state: BankState, account_id: Ref) -> Balance:
    """Get an account's balance, the money available now, and how much of today's limit is left.

    Args:
        account_id: The account id (acc_...), from list_accounts.
    """
    acc = _account(state, account_id)
    sent = _limited_sent_today(state, acc)
    return Balance(
        account_id=acc.id,
        currency=acc.currency,
        status=acc.status,
        balance_cents=acc.balance_cents,
        overdraft_limit_cents=acc.overdraft_limit_cents,
        available_cents=acc.balance_cents + acc.overdraft_limit_cents,
        daily_limit_cents=acc.daily_limit_cents,
        limited_sent_today_cents=sent,
        remaining_today_cents=max(acc.daily_limit_cents - sent, 0),
    )


@env.tool(read_only=True)
def get_statement(
    state: BankState,
    account_id: Ref,
    month: Annotated[str, Field(pattern=r"^\d{4}-(0[1-9]|1[0-2])$")],
) -> Statement:
    """Get an account's statement for one calendar month: opening and closing balance and every transaction.

    Args:
        account_id: The account id (acc_...), from list_accounts.
        month: The month as YYYY-MM, e.g. "2026-02"; the current month gives the transactions so far.
    """
    acc = _account(state, account_id)
    year, mon = (int(part) for part in month.split("-"))
    if (year, mon) > (state.now.year, state.now.month):
        raise ToolError(f"{month} has not started yet; today is {state.now.date().isoformat()}.")
    opening = 0
    lines: list[Transaction] = []
    for txn in state.transactions:
        if txn.account_id != acc.id:
            continue
        key = (txn.posted_at.year, txn.posted_at.month)
        if key < (year, mon):
            opening = txn.balance_after_cents
        elif key == (year, mon):
            lines.append(txn)
    return Statement(
        account_id=acc.id,
        month=month,
        currency=acc.currency,
        opening_balance_cents=opening,
        closing_balance_cents=lines[-1].balance_after_cents if lines else opening,
        total_in_cents=sum(t.amount_cents for t in lines if t.amount_cents > 0),
        total_out_cents=-sum(t.amount_cents for t in lines if t.amount_cents < 0),
        transactions=lines,
    )


@env.tool(read_only=True)
def list_payees(state: BankState, customer_id: Ref) -> list[Payee]:
    """List the payees a customer has saved (removed ones are left out).

    Args:
        customer_id: The customer id (cus_...), from find_customer.
    """
    _customer(state, customer_id)
    return [p for p in state.payees.values() if p.customer_id == customer_id and p.removed_on is None]


@env.tool(idempotent=True)
def add_payee(
    state: BankState,
    customer_id: Ref,
    name: Annotated[str, Field(max_length=70)],
    iban: Annotated[str, Field(max_length=64)],
) -> Payee:
    """Save an external payee for a customer, so that pay_payee can send money to it.

    Adding an IBAN the customer already saved returns that payee instead of a duplicate.
    Accounts at this bank are not payees: move money to them with transfer.

    Args:
        customer_id: The customer id (cus_...), from find_customer.
        name: The recipient's name as it should appear on statements.
        iban: The recipient's IBAN; spaces are allowed, e.g. "FR76 3000 6000 0112 3456 7890 189".
    """
    customer = _customer(state, customer_id)
    clean = normalize_iban(iban)
    if not iban_is_valid(clean):
        raise ToolError(
            f"{iban!r} is not a valid IBAN (wrong format or check digits); ask the customer to re-check it."
        )
    name = name.strip()
    if not name or len(name) > 70:
        raise ToolError("name must be 1 to 70 characters.")
    for acc in state.accounts.values():
        if acc.iban == clean:
            hint = f" ({acc.id})" if acc.customer_id == customer.id else ""
            raise ToolError(
                f"{clean} is an account at this bank{hint}; do not add it as a payee, "
                "use transfer with its account id."
            )
    for payee in state.payees.values():
        if payee.customer_id == customer.id and payee.iban == clean and payee.removed_on is None:
            if payee.name.lower() != name.lower():
                raise ToolError(
                    f"{customer.name} already saved {clean} as payee {payee.id} named {payee.name!r}; "
                    "use that payee."
                )
            return payee
    payee = Payee(
        id=state.new_id("pay"), customer_id=customer.id, name=name, iban=clean, added_on=state.now.date()
    )
    state.payees[payee.id] = payee
    return payee


@env.tool(destructive=True, idempotent=True)
def remove_payee(state: BankState, payee_id: Ref) -> Payee:
    """Remove a saved payee; past payments to it stay on the statements.

    Args:
        payee_id: The payee id (pay_...), from list_payees.
    """
    payee = state.payees.get(payee_id)
    if payee is None:
        raise ToolError(
            f"No payee {payee_id!r}. Use list_payees with the customer id to see payee ids (pay_...)."
        )
    if payee.removed_on is None:
        payee.removed_on = state.now.date()
    return payee


@env.tool
def transfer(
    state: BankState,
    from_account_id: Ref,
    to_account_id: Ref,
    amount_cents: Cents,
    memo: Annotated[str, Field(max_length=140)] = "",
) -> TransferReceipt:
    """Move money between two accounts at this bank, in the same currency, posted immediately.

    Transfers to another customer's account count against the source account's daily limit;
    transfers between one customer's own accounts do not. Money can leave a savings account
    only towards the same customer's accounts.

    Args:
        from_account_id: The account the money leaves (acc_...).
        to_account_id: The account the money arrives on (acc_...).
        amount_cents: The amount in cents of the accounts' currency, e.g. 2500 for 25.00.
        memo: Optional text shown on both statements (up to 140 characters).
    """
    if from_account_id == to_account_id:
        raise ToolError(
            "from_account_id and to_account_id are the same account; choose two different accounts."
        )
    src = _account(state, from_account_id, usable=True)
    dst = _account(state, to_account_id, usable=True)
    if src.currency != dst.currency:
        raise ToolError(
            f"Currency mismatch: {src.id} is in {src.currency} but {dst.id} is in {dst.currency}. Transfers "
            "only go between accounts of the same currency."
        )
    own = src.customer_id == dst.customer_id
    if src.kind == "savings" and not own:
        raise ToolError(
            f"{src.id} is a savings account: money can only go from it to the same customer's accounts. "
            "Transfer to the customer's checking account first, then send it from there."
        )
    _check_funds(state, src, amount_cents)
    if not own:
        _check_daily_limit(state, src, amount_cents)
    debit = _post(
        state,
        src,
        "transfer_out",
        -amount_cents,
        memo or f"Transfer to {dst.id}",
        counterparty_account_id=dst.id,
    )
    credit = _post(
        state,
        dst,
        "transfer_in",
        amount_cents,
        memo or f"Transfer from {src.id}",
        counterparty_account_id=src.id,
    )
    return TransferReceipt(debit=debit, credit=credit)


@env.tool
def pay_payee(
    state: BankState,
    account_id: Ref,
    payee_id: Ref,
    amount_cents: Cents,
    reference: Annotated[str, Field(max_length=140)] = "",
) -> Transaction:
    """Pay one of the customer's saved payees from a checking account; counts against the daily limit.

    Args:
        account_id: The paying checking account (acc_...), which must belong to the payee's customer.
        payee_id: The payee id (pay_...), from list_payees or add_payee.
        amount_cents: The amount in cents of the account's currency, e.g. 4999 for 49.99.
        reference: Optional payment reference for the recipient, e.g. an invoice number.
    """
    acc = _account(state, account_id, usable=True)
    payee = state.payees.get(payee_id)
    if payee is None or payee.removed_on is not None:
        raise ToolError(
            f"No payee {payee_id!r}. Use list_payees to see the customer's payees, or add_payee to save one."
        )
    if payee.customer_id != acc.customer_id:
        raise ToolError(
            f"Payee {payee.id} belongs to another customer than account {acc.id}; "
            "use a payee of the account holder (list_payees)."
        )
    if acc.kind != "checking":
        raise ToolError(
            f"{acc.id} is a savings account and cannot pay payees. "
            "Transfer the money to the customer's checking account first, then pay from there."
        )
    _check_funds(state, acc, amount_cents)
    _check_daily_limit(state, acc, amount_cents)
    text = f"Payment to {payee.name}" + (f": {reference}" if reference else "")
    txn = _post(state, acc, "payment", -amount_cents, text, payee_id=payee.id)
    return txn


@env.tool(idempotent=True)
def set_daily_limit(
    state: BankState,
    account_id: Ref,
    limit_cents: Annotated[int, Field(strict=True, gt=0, le=MAX_DAILY_LIMIT_CENTS)],
) -> Balance:
    """Set the daily limit on payments and transfers to other customers from an account.

    Args:
        account_id: The account id (acc_...).
        limit_cents: The new limit per calendar day in cents, from 1 up to 1000000 (10,000.00).
    """
    acc = _account(state, account_id, usable=True)
    acc.daily_limit_cents = limit_cents
    return get_balance(state, acc.id)


@env.tool(read_only=True)
def list_cards(state: BankState, customer_id: Ref) -> list[Card]:
    """List a customer's debit cards (all statuses) with the account each draws on.

    Args:
        customer_id: The customer id (cus_...), from find_customer.
    """
    _customer(state, customer_id)
    return [c for c in state.cards.values() if state.accounts[c.account_id].customer_id == customer_id]


@env.tool(idempotent=True)
def freeze_card(state: BankState, card_id: Ref) -> Card:
    """Temporarily block a card (e.g. it is misplaced); unfreeze_card undoes it.

    Args:
        card_id: The card id (crd_...), from list_cards.
    """
    card = _card(state, card_id)
    if card.status == "cancelled":
        raise ToolError(f"Card {card.id} is cancelled and cannot be frozen" + _replacement_hint(card))
    card.status = "frozen"
    return card


@env.tool(idempotent=True)
def unfreeze_card(state: BankState, card_id: Ref) -> Card:
    """Reactivate a frozen card.

    Args:
        card_id: The card id (crd_...), from list_cards.
    """
    card = _card(state, card_id)
    if card.status == "cancelled":
        raise ToolError(f"Card {card.id} is cancelled and cannot be reactivated" + _replacement_hint(card))
    _account(state, card.account_id, usable=True)
    card.status = "active"
    return card


def _replacement_hint(card: Card) -> str:
    return f"; its replacement is {card.replaced_by}." if card.replaced_by else "."


@env.tool(destructive=True)
def report_card_lost(state: BankState, card_id: Ref) -> Card:
    """Cancel a lost or stolen card for good and issue a replacement on the same account.

    Returns the new card.

    Args:
        card_id: The card id (crd_...) of the lost card, from list_cards.
    """
    card = _card(state, card_id)
    if card.status == "cancelled":
        raise ToolError(f"Card {card.id} is already cancelled" + _replacement_hint(card))
    acc = _account(state, card.account_id, usable=True)
    new = _issue_card(state, acc)
    card.status = "cancelled"
    card.replaced_by = new.id
    return new


@env.tool
def open_account(
    state: BankState,
    customer_id: Ref,
    kind: AccountKind,
    currency: Currency,
    name: Annotated[str, Field(min_length=1, max_length=60)],
) -> OpenedAccount:
    """Open a new, empty account for a customer; a checking account comes with a debit card.

    Args:
        customer_id: The customer id (cus_...), from find_customer.
        kind: "checking" (payments, card) or "savings" (transfers to own accounts only).
        currency: The account currency, "EUR" or "USD".
        name: A name for the account, e.g. "Holiday Savings".
    """
    customer = _customer(state, customer_id)
    open_count = sum(
        1 for a in state.accounts.values() if a.customer_id == customer.id and a.status != "closed"
    )
    if open_count >= MAX_OPEN_ACCOUNTS:
        raise ToolError(
            f"{customer.name} already has {open_count} open accounts, the most allowed; close one first."
        )
    if not name.strip():
        raise ToolError("name is blank: give the account a name, e.g. 'Holiday Savings'.")
    account_id = state.new_id("acc")
    acc = Account(
        id=account_id,
        customer_id=customer.id,
        name=name.strip(),
        kind=kind,
        currency=currency,
        iban=account_iban(account_id),
        balance_cents=0,
        opened_on=state.now.date(),
    )
    state.accounts[acc.id] = acc
    card = _issue_card(state, acc) if kind == "checking" else None
    return OpenedAccount(account=acc, card=card)


@env.tool(destructive=True)
def close_account(state: BankState, account_id: Ref) -> Account:
    """Close an account for good and cancel its cards; its balance must be exactly zero.

    Args:
        account_id: The account id (acc_...); move any money off it with transfer first.
    """
    acc = _account(state, account_id, usable=True)
    if acc.balance_cents != 0:
        what = "still holds" if acc.balance_cents > 0 else "is overdrawn by"
        raise ToolError(
            f"Account {acc.id} {what} {_fmt(abs(acc.balance_cents), acc.currency)}; it can only be closed "
            "at a zero balance. Transfer the money to another account of the customer (or onto it) first."
        )
    acc.status = "closed"
    acc.closed_on = state.now.date()
    for card in state.cards.values():
        if card.account_id == acc.id:
            card.status = "cancelled"
    return acc
