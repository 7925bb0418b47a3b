"""payments: a card payments account of one merchant: customers, cards, charges, refunds and invoices.

The account runs in test mode: cards behave like the well-known test cards, so outcomes are
deterministic. A card ending 0002 is declined, one ending 9995 has insufficient funds, one ending
9987 is reported lost; every other valid card number is approved.

Rules (the tools enforce them and their docstrings repeat them to the agent):

- Money is an `amount` in major units of its `currency` (USD, EUR, GBP, JPY, AUD) with at most 2
  decimals (JPY: whole yen). Minimum charge: 0.50 USD / EUR / AUD, 0.30 GBP, 50 JPY.
- A declined charge is an error and records nothing; the agent asks for another card.
- Refunds go back to the charge's card, in one or more parts, never more than was charged.
- Invoices are open from creation; paying one charges a card of the invoice's customer for the
  total; an open invoice can be voided, a paid one only refunded (through its charge).
- An `idempotency_key` on a charge makes retries safe: the same key returns the first charge.
"""

from __future__ import annotations

import hashlib
import re
from datetime import date
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, NaiveDatetime, model_validator

from envreg.env import Environment, EnvState, ToolError, lookup
from envreg.env.vocab import Currency, Email

_ID = re.compile(r"^([a-z]+)_(\d+)$")

MIN_CHARGE_CENTS = {"USD": 50, "EUR": 50, "GBP": 30, "JPY": 5000, "AUD": 50}
TEST_DECLINES = {
    "0002": ("card_declined", "The card was declined."),
    "9995": ("insufficient_funds", "The card has insufficient funds."),
    "9987": ("lost_card", "The card was reported lost."),
}
Brand = Literal["visa", "mastercard", "amex", "discover"]
BRAND_NAMES = {"visa": "Visa", "mastercard": "Mastercard", "amex": "American Express", "discover": "Discover"}
MAX_INVOICE_LINES = 50
MAX_AMOUNT_CENTS = 99_999_999


def _two_decimals(value: float) -> float:
    if round(value, 2) != value:
        raise ValueError("an amount has at most 2 decimals")
    return value


Amount = Annotated[float, Field(ge=0, le=999_999.99), AfterValidator(_two_decimals)]
Id = Annotated[str, Field(max_length=64)]
Name = Annotated[str, Field(min_length=1, max_length=200)]
Description = Annotated[str, Field(max_length=500)]


def cents(amount: float) -> int:
    return round(amount * 100)


def major(value: int) -> float:
    return value / 100


def _money(value_cents: int, currency: str) -> str:
    return (
        f"{value_cents // 100:,} {currency}" if currency == "JPY" else f"{value_cents / 100:,.2f} {currency}"
    )


def _num(amount: float) -> str:
    return f"{amount:.2f}".rstrip("0").rstrip(".")


def _check_amount(amount: float, currency: str, what: str = "amount") -> int:
    value = cents(amount)
    if currency == "JPY" and value % 100:
        raise ToolError(f"{what} {_num(amount)} JPY has decimals; yen amounts are whole numbers.")
    if value < MIN_CHARGE_CENTS[currency]:
        raise ToolError(
            f"{what} {_num(amount)} {currency} is below the minimum of "
            f"{_money(MIN_CHARGE_CENTS[currency], currency)}."
        )
    if value > MAX_AMOUNT_CENTS:
        raise ToolError(
            f"{what} {_num(amount)} {currency} is above the maximum of {_money(MAX_AMOUNT_CENTS, currency)}; "
            "split it into several invoices or charges."
        )
    return value


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _brand(digits: str) -> Brand | None:
    if digits[0] == "4" and len(digits) in (13, 16, 19):
        return "visa"
    if len(digits) == 16 and (51 <= int(digits[:2]) <= 55 or 2221 <= int(digits[:4]) <= 2720):
        return "mastercard"
    if len(digits) == 15 and digits[:2] in ("34", "37"):
        return "amex"
    if len(digits) == 16 and (digits[:4] == "6011" or digits[:2] == "65"):
        return "discover"
    return None


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Merchant(Model):
    name: Name
    email: Email
    default_currency: Currency


class Customer(Model):
    """A customer of the merchant."""

    id: Id = Field(pattern=r"^cus_\d{4,}$")
    name: Name
    email: Email
    description: Description = ""
    default_payment_method_id: Id | None = Field(
        default=None, description="The card used when none is named (pay_invoice)."
    )
    created_at: NaiveDatetime


class PaymentMethod(Model):
    """A card saved on a customer; only its brand, last 4 digits, expiry and fingerprint are kept."""

    id: Id = Field(pattern=r"^pm_\d{4,}$")
    customer_id: Id
    brand: Brand
    last4: str = Field(pattern=r"^\d{4}$", max_length=4)
    exp_month: int = Field(ge=1, le=12)
    exp_year: int = Field(ge=2000, le=2100)
    fingerprint: str = Field(
        pattern=r"^[0-9a-f]{16}$", max_length=16, description="The same card number gives the same one."
    )
    status: Literal["active", "detached"] = "active"
    created_at: NaiveDatetime


class Refund(Model):
    id: Id = Field(pattern=r"^re_\d{4,}$")
    charge_id: Id
    amount: Amount
    currency: Currency
    reason: Literal["requested_by_customer", "duplicate", "fraudulent"]
    created_at: NaiveDatetime


class Charge(Model):
    """A successful card payment."""

    id: Id = Field(pattern=r"^ch_\d{4,}$")
    customer_id: Id
    payment_method_id: Id
    amount: Amount
    currency: Currency
    description: Description = ""
    status: Literal["succeeded", "partially_refunded", "refunded"] = "succeeded"
    amount_refunded: Amount = 0
    invoice_id: Id | None = Field(default=None, description="The invoice this charge paid, if any.")
    idempotency_key: Annotated[str, Field(max_length=64)] | None = None
    created_at: NaiveDatetime

    @model_validator(mode="after")
    def _status(self) -> Charge:
        if self.amount_refunded > self.amount:
            raise ValueError(
                f"charge {self.id} refunds {self.amount_refunded}, more than its amount {self.amount}"
            )
        expected = (
            "succeeded"
            if self.amount_refunded == 0
            else "refunded"
            if self.amount_refunded == self.amount
            else "partially_refunded"
        )
        if self.status != expected:
            raise ValueError(f"charge {self.id} is {self.status} but its refunds make it {expected}")
        return self


class ChargeView(Charge):
    refunds: list[Refund]


class InvoiceLine(Model):
    description: Annotated[str, Field(min_length=1, max_length=200)]
    quantity: int = Field(ge=1, le=10_000)
    unit_amount: Amount = Field(description="Price of one unit, in the invoice's currency.")


class Invoice(Model):
    id: Id = Field(pattern=r"^in_\d{4,}$")
    customer_id: Id
    currency: Currency
    lines: list[InvoiceLine] = Field(min_length=1, max_length=MAX_INVOICE_LINES)
    amount: Amount = Field(description="The total due: sum of quantity x unit_amount.")
    memo: Description = ""
    status: Literal["open", "paid", "void"] = "open"
    due_date: date
    created_at: NaiveDatetime
    paid_at: NaiveDatetime | None = None
    charge_id: Id | None = None
    voided_at: NaiveDatetime | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Invoice:
        total = sum(cents(line.unit_amount) * line.quantity for line in self.lines)
        if cents(self.amount) != total:
            raise ValueError(
                f"invoice {self.id}: amount {self.amount} is not the sum of its lines ({major(total)})"
            )
        paid = self.status == "paid"
        if paid != (self.paid_at is not None) or paid != (self.charge_id is not None):
            raise ValueError(f"invoice {self.id}: paid_at and charge_id are set exactly when it is paid")
        if (self.status == "void") != (self.voided_at is not None):
            raise ValueError(f"invoice {self.id}: voided_at is set exactly when it is void")
        return self


class InvoiceView(Invoice):
    overdue: bool = Field(description="Open and past its due date.")


class PaymentsState(EnvState):
    merchant: Merchant
    customers: dict[str, Customer] = Field(default_factory=dict, max_length=10_000)
    payment_methods: dict[str, PaymentMethod] = Field(default_factory=dict, max_length=20_000)
    charges: dict[str, Charge] = Field(default_factory=dict, max_length=50_000)
    refunds: dict[str, Refund] = Field(default_factory=dict, max_length=50_000)
    invoices: dict[str, Invoice] = Field(default_factory=dict, max_length=20_000)

    @model_validator(mode="after")
    def _integrity(self) -> PaymentsState:
        ids: list[str] = []
        for table in ("customers", "payment_methods", "charges", "refunds", "invoices"):
            for key, item in getattr(self, table).items():
                if key != item.id:
                    raise ValueError(f"{table}: key {key!r} holds {item.id!r}; store each under its own id")
                ids.append(item.id)
                for stamp in ("created_at", "paid_at", "voided_at"):
                    at = getattr(item, stamp, None)
                    if at is not None and at > self.now:
                        raise ValueError(
                            f"{item.id}: {stamp} {at.isoformat()} is after now ({self.now.isoformat()})"
                        )
        emails: dict[str, str] = {}
        for customer in self.customers.values():
            if customer.email.lower() in emails:
                raise ValueError(
                    f"customers {emails[customer.email.lower()]} and {customer.id} share the email {customer.email}"
                )
            emails[customer.email.lower()] = customer.id
            if customer.default_payment_method_id is not None:
                pm = self.payment_methods.get(customer.default_payment_method_id)
                if pm is None or pm.customer_id != customer.id or pm.status != "active":
                    raise ValueError(
                        f"customer {customer.id}: default payment method {customer.default_payment_method_id} "
                        "must be an active card of theirs"
                    )
        for pm in self.payment_methods.values():
            if pm.customer_id not in self.customers:
                raise ValueError(f"payment method {pm.id} belongs to unknown customer {pm.customer_id!r}")
        refunded: dict[str, int] = {}
        for refund in self.refunds.values():
            charge = self.charges.get(refund.charge_id)
            if charge is None:
                raise ValueError(f"refund {refund.id} is for unknown charge {refund.charge_id!r}")
            if refund.currency != charge.currency:
                raise ValueError(
                    f"refund {refund.id} is in {refund.currency}, its charge in {charge.currency}"
                )
            refunded[charge.id] = refunded.get(charge.id, 0) + cents(refund.amount)
        keys: set[str] = set()
        for charge in self.charges.values():
            pm = self.payment_methods.get(charge.payment_method_id)
            if pm is None or pm.customer_id != charge.customer_id:
                raise ValueError(
                    f"charge {charge.id} was paid with a card that is not customer {charge.customer_id}'s"
                )
            if cents(charge.amount_refunded) != refunded.get(charge.id, 0):
                raise ValueError(
                    f"charge {charge.id}: amount_refunded {charge.amount_refunded} is not the sum of its refunds"
                )
            if charge.idempotency_key is not None:
                if charge.idempotency_key in keys:
                    raise ValueError(f"idempotency key {charge.idempotency_key!r} is used by two charges")
                keys.add(charge.idempotency_key)
            if charge.invoice_id is not None:
                invoice = self.invoices.get(charge.invoice_id)
                if invoice is None or invoice.charge_id != charge.id:
                    raise ValueError(
                        f"charge {charge.id} claims invoice {charge.invoice_id}, which it did not pay"
                    )
        for invoice in self.invoices.values():
            if invoice.customer_id not in self.customers:
                raise ValueError(f"invoice {invoice.id} is for unknown customer {invoice.customer_id!r}")
            if invoice.charge_id is not None:
                charge = self.charges.get(invoice.charge_id)
                if charge is None or charge.invoice_id != invoice.id:
                    raise ValueError(
                        f"invoice {invoice.id} is paid by {invoice.charge_id}, which is not its charge"
                    )
                if (charge.amount, charge.currency, charge.customer_id) != (
                    invoice.amount,
                    invoice.currency,
                    invoice.customer_id,
                ):
                    raise ValueError(
                        f"invoice {invoice.id} and its charge {charge.id} differ in amount or customer"
                    )
        for ident in ids:
            if m := _ID.match(ident):
                prefix, n = m.group(1), int(m.group(2))
                if self.id_counters.get(prefix, 0) < n:
                    raise ValueError(
                        f"id_counters[{prefix!r}] is {self.id_counters.get(prefix, 0)} but {ident} exists: "
                        "new ids would collide"
                    )
        return self


env = Environment(
    "payments",
    PaymentsState,
    version="1.0.1",
    domain="commerce",
    description=(
        "A merchant's card payments account (test mode): find and create customers, save cards, "
        "charge them in USD, EUR, GBP, JPY or AUD, refund fully or in part, and issue, pay and void invoices."
    ),
)


# ---------------------------------------------------------------- helpers


def _customer(state: PaymentsState, customer_id: str) -> Customer:
    return lookup(state.customers, customer_id, "customer", "Find customers with find_customers.")


def _charge(state: PaymentsState, charge_id: str) -> Charge:
    return lookup(state.charges, charge_id, "charge", "List charges with list_charges.")


def _invoice(state: PaymentsState, invoice_id: str) -> Invoice:
    return lookup(state.invoices, invoice_id, "invoice", "List invoices with list_invoices.")


def _usable_card(state: PaymentsState, customer: Customer, payment_method_id: str) -> PaymentMethod:
    pm = lookup(
        state.payment_methods,
        payment_method_id,
        "payment method",
        f"List the customer's cards with list_payment_methods({customer.id!r}).",
    )
    if pm.customer_id != customer.id:
        raise ToolError(
            f"Payment method {pm.id} belongs to another customer, not {customer.name} ({customer.id}); "
            f"use one of theirs (list_payment_methods)."
        )
    if pm.status != "active":
        raise ToolError(f"Payment method {pm.id} was removed; use another of {customer.name}'s cards.")
    if (pm.exp_year, pm.exp_month) < (state.now.year, state.now.month):
        raise ToolError(
            f"{BRAND_NAMES[pm.brand]} ending {pm.last4} ({pm.id}) expired at the end of {pm.exp_month:02d}/{pm.exp_year}; "
            "ask the customer for another card and save it with add_card."
        )
    if pm.last4 in TEST_DECLINES:
        code, text = TEST_DECLINES[pm.last4]
        raise ToolError(
            f"Declined ({code}): {text} {BRAND_NAMES[pm.brand]} ending {pm.last4} ({pm.id}) was not charged; "
            "ask the customer for another card."
        )
    return pm


def _charge_view(state: PaymentsState, charge: Charge) -> ChargeView:
    refunds = sorted((r for r in state.refunds.values() if r.charge_id == charge.id), key=lambda r: r.id)
    return ChargeView(**charge.model_dump(), refunds=refunds)


def _invoice_view(state: PaymentsState, invoice: Invoice) -> InvoiceView:
    return InvoiceView(
        **invoice.model_dump(), overdue=invoice.status == "open" and invoice.due_date < state.now.date()
    )


# ---------------------------------------------------------------- customers and cards


@env.tool(read_only=True)
def find_customers(
    state: PaymentsState,
    email: Email | None = None,
    query: Annotated[str, Field(min_length=1, max_length=200)] | None = None,
) -> list[Customer]:
    """Find customers by email address (exact, any case) or by part of their name.

    Args:
        email: The customer's email address, e.g. "daniel.kim@fabrikam.example".
        query: Part of a name, e.g. "Chen" (or an email address).
    """
    if (email is None) == (query is None):
        raise ToolError("Give either email (an address) or query (part of a name).")
    q = (email or query or "").strip().lower()
    if "@" in q:
        found = [c for c in state.customers.values() if c.email.lower() == q]
    else:
        found = [c for c in state.customers.values() if q and q in c.name.lower()]
    return sorted(found, key=lambda c: c.id)


@env.tool
def create_customer(
    state: PaymentsState, name: Name, email: Email, description: Description = ""
) -> Customer:
    """Create a customer; the email address must not belong to another customer.

    Args:
        name: The customer's full name or company name.
        email: Their email address; receipts and invoices go there.
        description: An optional note, e.g. "Wholesale account".
    """
    if not name.strip():
        raise ToolError("name is blank; give the customer's name.")
    for other in state.customers.values():
        if other.email.lower() == email.lower():
            raise ToolError(
                f"{other.email} is already customer {other.id} ({other.name}); use that customer."
            )
    customer = Customer(
        id=state.new_id("cus"), name=name.strip(), email=email, description=description, created_at=state.now
    )
    state.customers[customer.id] = customer
    return customer


@env.tool(read_only=True)
def list_payment_methods(state: PaymentsState, customer_id: Id) -> list[PaymentMethod]:
    """List a customer's saved cards that are not removed (brand, last 4 digits, expiry).

    Args:
        customer_id: The customer id (cus_...), from find_customers.
    """
    _customer(state, customer_id)
    return [
        pm for pm in state.payment_methods.values() if pm.customer_id == customer_id and pm.status == "active"
    ]


@env.tool
def add_card(
    state: PaymentsState,
    customer_id: Id,
    card_number: Annotated[str, Field(min_length=12, max_length=23)],
    exp_month: Annotated[int, Field(ge=1, le=12)],
    exp_year: Annotated[int, Field(ge=2000, le=2100)],
    make_default: bool = False,
) -> PaymentMethod:
    """Save a card on a customer. The number is checked (Luhn) and only its last 4 digits are kept.

    The first card of a customer becomes their default. Saving a card the customer already has
    returns that payment method (with the expiry date given now).

    Args:
        customer_id: The customer id (cus_...), from find_customers.
        card_number: The card number, spaces allowed, e.g. "4242 4242 4242 4242".
        exp_month: Expiry month, 1-12.
        exp_year: Expiry year, four digits, e.g. 2028.
        make_default: Make it the customer's default card.
    """
    customer = _customer(state, customer_id)
    digits = re.sub(r"[\s-]", "", card_number)
    if not digits.isdigit() or not 13 <= len(digits) <= 19 or not _luhn_ok(digits):
        raise ToolError(
            "That is not a valid card number (wrong length or check digit); ask the customer to re-check it."
        )
    brand = _brand(digits)
    if brand is None:
        raise ToolError("Only Visa, Mastercard, American Express and Discover cards are accepted.")
    if (exp_year, exp_month) < (state.now.year, state.now.month):
        raise ToolError(f"The card expired at the end of {exp_month:02d}/{exp_year}; ask for a current card.")
    fingerprint = hashlib.sha256(digits.encode()).hexdigest()[:16]
    for pm in state.payment_methods.values():
        if pm.customer_id == customer.id and pm.fingerprint == fingerprint and pm.status == "active":
            if (pm.exp_month, pm.exp_year) != (exp_month, exp_year):
                pm.exp_month, pm.exp_year = exp_month, exp_year
            if make_default:
                customer.default_payment_method_id = pm.id
            return pm
    pm = PaymentMethod(
        id=state.new_id("pm"),
        customer_id=customer.id,
        brand=brand,
        last4=digits[-4:],
        exp_month=exp_month,
        exp_year=exp_year,
        fingerprint=fingerprint,
        created_at=state.now,
    )
    state.payment_methods[pm.id] = pm
    if make_default or customer.default_payment_method_id is None:
        customer.default_payment_method_id = pm.id
    return pm


@env.tool(destructive=True, idempotent=True)
def remove_card(state: PaymentsState, payment_method_id: Id) -> PaymentMethod:
    """Remove a saved card from its customer; past charges keep referring to it.

    If it was the default card, the customer's newest remaining card becomes the default.

    Args:
        payment_method_id: The card (pm_...), from list_payment_methods.
    """
    pm = lookup(state.payment_methods, payment_method_id, "payment method", "See list_payment_methods.")
    if pm.status == "detached":
        return pm
    pm.status = "detached"
    customer = state.customers[pm.customer_id]
    if customer.default_payment_method_id == pm.id:
        rest = [
            p for p in state.payment_methods.values() if p.customer_id == customer.id and p.status == "active"
        ]
        customer.default_payment_method_id = (
            max(rest, key=lambda p: (p.created_at, p.id)).id if rest else None
        )
    return pm


# ---------------------------------------------------------------- charges and refunds


@env.tool
def create_charge(
    state: PaymentsState,
    customer_id: Id,
    amount: Amount,
    currency: Currency,
    payment_method_id: Id | None = None,
    description: Description = "",
    idempotency_key: Annotated[str, Field(min_length=1, max_length=64)] | None = None,
) -> ChargeView:
    """Charge a customer's card now.

    Minimums: 0.50 USD / EUR / AUD, 0.30 GBP, 50 JPY (whole yen). A declined or expired card is an
    error and nothing is recorded. Retrying with the same idempotency_key returns the first charge
    instead of charging twice.

    Args:
        customer_id: The customer id (cus_...), from find_customers.
        amount: The amount in major units, e.g. 49.99.
        currency: USD, EUR, GBP, JPY or AUD.
        payment_method_id: The card (pm_...); omit to use the customer's default card.
        description: Shown on the receipt, e.g. "Order ord_0006".
        idempotency_key: A unique key for this payment attempt, e.g. "order-ord_0006".
    """
    customer = _customer(state, customer_id)
    if idempotency_key is not None:
        for charge in state.charges.values():
            if charge.idempotency_key == idempotency_key:
                if (charge.customer_id, charge.amount, charge.currency) != (customer.id, amount, currency):
                    raise ToolError(
                        f"idempotency_key {idempotency_key!r} was already used for charge {charge.id} "
                        f"({_money(cents(charge.amount), charge.currency)} to {charge.customer_id}); use a new key."
                    )
                return _charge_view(state, charge)
    value = _check_amount(amount, currency)
    card_id = payment_method_id or customer.default_payment_method_id
    if card_id is None:
        raise ToolError(f"{customer.name} ({customer.id}) has no saved card; save one with add_card first.")
    pm = _usable_card(state, customer, card_id)
    charge = Charge(
        id=state.new_id("ch"),
        customer_id=customer.id,
        payment_method_id=pm.id,
        amount=major(value),
        currency=currency,
        description=description,
        idempotency_key=idempotency_key,
        created_at=state.now,
    )
    state.charges[charge.id] = charge
    return _charge_view(state, charge)


@env.tool(read_only=True)
def get_charge(state: PaymentsState, charge_id: Id) -> ChargeView:
    """Get one charge with its refunds.

    Args:
        charge_id: The charge id (ch_...), from list_charges or create_charge.
    """
    return _charge_view(state, _charge(state, charge_id))


@env.tool(read_only=True)
def list_charges(
    state: PaymentsState,
    customer_id: Id | None = None,
    status: Literal["succeeded", "partially_refunded", "refunded"] | None = None,
    limit: Annotated[int, Field(ge=1, le=100)] = 20,
) -> list[Charge]:
    """List charges, newest first.

    Args:
        customer_id: Only this customer's charges (cus_...); omit for all customers.
        status: Only charges with this status: succeeded, partially_refunded or refunded.
        limit: The most charges to return (1-100, default 20).
    """
    if customer_id is not None:
        _customer(state, customer_id)
    found = [
        c
        for c in state.charges.values()
        if (customer_id is None or c.customer_id == customer_id) and (status is None or c.status == status)
    ]
    found.sort(key=lambda c: (c.created_at, c.id), reverse=True)
    return found[:limit]


@env.tool
def refund_charge(
    state: PaymentsState,
    charge_id: Id,
    amount: Amount | None = None,
    reason: Literal["requested_by_customer", "duplicate", "fraudulent"] = "requested_by_customer",
) -> ChargeView:
    """Refund a charge to its card, in full or in part; several partial refunds may follow each other.

    Args:
        charge_id: The charge id (ch_...), from list_charges.
        amount: How much to refund, in the charge's currency; omit to refund everything not yet refunded.
        reason: requested_by_customer (default), duplicate or fraudulent.
    """
    charge = _charge(state, charge_id)
    left = cents(charge.amount) - cents(charge.amount_refunded)
    if left == 0:
        raise ToolError(f"Charge {charge.id} is already refunded in full.")
    value = left if amount is None else cents(amount)
    if value <= 0:
        raise ToolError("amount must be more than 0.")
    if charge.currency == "JPY" and value % 100:
        raise ToolError(f"{_num(major(value))} JPY has decimals; yen amounts are whole numbers.")
    if value > left:
        raise ToolError(
            f"Charge {charge.id} has only {_money(left, charge.currency)} left to refund "
            f"(charged {_money(cents(charge.amount), charge.currency)}, refunded "
            f"{_money(cents(charge.amount_refunded), charge.currency)})."
        )
    refund = Refund(
        id=state.new_id("re"),
        charge_id=charge.id,
        amount=major(value),
        currency=charge.currency,
        reason=reason,
        created_at=state.now,
    )
    state.refunds[refund.id] = refund
    charge.amount_refunded = major(cents(charge.amount_refunded) + value)
    charge.status = "refunded" if charge.amount_refunded == charge.amount else "partially_refunded"
    return _charge_view(state, charge)


# ---------------------------------------------------------------- invoices


@env.tool
def create_invoice(
    state: PaymentsState,
    customer_id: Id,
    currency: Currency,
    lines: Annotated[list[InvoiceLine], Field(min_length=1, max_length=MAX_INVOICE_LINES)],
    due_date: date,
    memo: Description = "",
) -> InvoiceView:
    """Issue an invoice to a customer; it is open (payable) at once.

    Args:
        customer_id: The customer id (cus_...), from find_customers.
        currency: USD, EUR, GBP, JPY or AUD.
        lines: What is billed: each with description, quantity and unit_amount (price of one unit).
        due_date: The day payment is due, today or later, e.g. "2026-01-31".
        memo: An optional note printed on the invoice.
    """
    customer = _customer(state, customer_id)
    if due_date < state.now.date():
        raise ToolError(
            f"due_date {due_date.isoformat()} is in the past; today is {state.now.date().isoformat()}."
        )
    total = 0
    for line in lines:
        if currency == "JPY" and cents(line.unit_amount) % 100:
            raise ToolError(f"Line {line.description!r}: yen amounts are whole numbers.")
        total += cents(line.unit_amount) * line.quantity
    _check_amount(major(total), currency, "The invoice total")
    invoice = Invoice(
        id=state.new_id("in"),
        customer_id=customer.id,
        currency=currency,
        lines=lines,
        amount=major(total),
        memo=memo,
        due_date=due_date,
        created_at=state.now,
    )
    state.invoices[invoice.id] = invoice
    return _invoice_view(state, invoice)


@env.tool(read_only=True)
def list_invoices(
    state: PaymentsState,
    customer_id: Id | None = None,
    status: Literal["open", "paid", "void"] | None = None,
) -> list[InvoiceView]:
    """List invoices, earliest due first, with whether each open one is overdue.

    Args:
        customer_id: Only this customer's invoices (cus_...); omit for all.
        status: Only invoices with this status: open, paid or void.
    """
    if customer_id is not None:
        _customer(state, customer_id)
    found = [
        i
        for i in state.invoices.values()
        if (customer_id is None or i.customer_id == customer_id) and (status is None or i.status == status)
    ]
    return [_invoice_view(state, i) for i in sorted(found, key=lambda i: (i.due_date, i.id))]


@env.tool(read_only=True)
def get_invoice(state: PaymentsState, invoice_id: Id) -> InvoiceView:
    """Get one invoice: lines, total, status, due date and the charge that paid it.

    Args:
        invoice_id: The invoice id (in_...), from list_invoices or create_invoice.
    """
    return _invoice_view(state, _invoice(state, invoice_id))


@env.tool
def pay_invoice(state: PaymentsState, invoice_id: Id, payment_method_id: Id | None = None) -> InvoiceView:
    """Pay an open invoice by charging a card of its customer for the total.

    Args:
        invoice_id: The invoice id (in_...), from list_invoices.
        payment_method_id: The card (pm_...); omit to use the customer's default card.
    """
    invoice = _invoice(state, invoice_id)
    if invoice.status != "open":
        raise ToolError(f"Invoice {invoice.id} is {invoice.status}; only open invoices can be paid.")
    customer = state.customers[invoice.customer_id]
    card_id = payment_method_id or customer.default_payment_method_id
    if card_id is None:
        raise ToolError(f"{customer.name} ({customer.id}) has no saved card; save one with add_card first.")
    pm = _usable_card(state, customer, card_id)
    charge = Charge(
        id=state.new_id("ch"),
        customer_id=customer.id,
        payment_method_id=pm.id,
        amount=invoice.amount,
        currency=invoice.currency,
        description=f"Invoice {invoice.id}",
        invoice_id=invoice.id,
        created_at=state.now,
    )
    state.charges[charge.id] = charge
    invoice.status, invoice.paid_at, invoice.charge_id = "paid", state.now, charge.id
    return _invoice_view(state, invoice)


@env.tool(destructive=True)
def void_invoice(state: PaymentsState, invoice_id: Id) -> InvoiceView:
    """Void an open invoice so it can no longer be paid. A paid invoice is refunded through its charge instead.

    Args:
        invoice_id: The invoice id (in_...), from list_invoices.
    """
    invoice = _invoice(state, invoice_id)
    if invoice.status == "paid":
        raise ToolError(
            f"Invoice {invoice.id} is paid; refund its charge {invoice.charge_id} with refund_charge instead."
        )
    if invoice.status == "void":
        raise ToolError(f"Invoice {invoice.id} is already void.")
    invoice.status, invoice.voided_at = "void", state.now
    return _invoice_view(state, invoice)
