"""brokerage: one investor's brokerage account: quotes from seeded daily price series, portfolio, orders, watchlists.

Market model (deterministic: prices come only from the seeded daily bars and the clock):

- US equities and ETFs, in USD, whole shares, no commission. Trading days are the days that have a
  bar in the price series; regular hours are 09:30-16:00, extended hours 04:00-09:30 and 16:00-20:00.
- The last price is the previous trading day's close before 09:30, the day's open from 09:30, and the
  day's close from 16:00. Price history shows only bars whose day is over (or today's after 16:00).
- Market orders are accepted during regular hours only and fill at once at the last price. Limit
  orders are accepted from 04:00 to 20:00 on trading days; one that is marketable (buy limit at or
  above the last price, sell limit at or below it) fills at once at the last price, otherwise it rests
  as an open order (good till cancelled) and reserves its cash or shares.
- Cash moves only through the ledger (deposits, buys, sells, dividends); the state model re-adds the
  ledger and refuses any state where cash or positions disagree with it.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time
from itertools import pairwise
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, NaiveDatetime, model_validator

from envreg.env import Environment, EnvState, ToolError, lookup
from envreg.env.vocab import EMAIL

_ID = re.compile(r"^([a-z]+)_(\d+)$")
OPEN, CLOSE = time(9, 30), time(16, 0)
EXT_OPEN, EXT_CLOSE = time(4, 0), time(20, 0)
MAX_DEPOSIT_CENTS = 25_000_000
MAX_WATCHLISTS = 20
MAX_WATCHLIST_SYMBOLS = 50


def _two_decimals(value: float) -> float:
    if round(value, 2) != value:
        raise ValueError("an amount has at most 2 decimals")
    return value


Amount = Annotated[float, Field(ge=0, le=100_000_000), AfterValidator(_two_decimals)]
Signed = Annotated[float, Field(ge=-100_000_000, le=100_000_000), AfterValidator(_two_decimals)]
Price = Annotated[float, Field(gt=0, le=1_000_000), AfterValidator(_two_decimals)]
Id = Annotated[str, Field(max_length=64)]
Symbol = Annotated[str, Field(min_length=1, max_length=10, pattern=r"^[A-Za-z.]{1,10}$")]
Shares = Annotated[int, Field(ge=1, le=1_000_000)]
Side = Literal["buy", "sell"]
MarketStatus = Literal["open", "pre_market", "after_hours", "closed"]


def cents(amount: float) -> int:
    return round(amount * 100)


def dollars(value: int) -> float:
    return value / 100


def _fmt(value_cents: int) -> str:
    return f"${value_cents / 100:,.2f}"


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Holder(Model):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    email: Annotated[str, Field(max_length=254, pattern=EMAIL)]
    account_number: Annotated[str, Field(pattern=r"^\d{4}-\d{4}$", max_length=9)]


class Instrument(Model):
    symbol: Symbol
    name: Annotated[str, Field(min_length=1, max_length=200)]
    kind: Literal["stock", "etf"]
    exchange: Literal["NYSE", "NASDAQ", "NYSE Arca"]
    sector: Annotated[str, Field(max_length=100)]
    description: Annotated[str, Field(max_length=1000)] = ""


class Bar(Model):
    """One trading day's prices."""

    date: date
    open: Price
    high: Price
    low: Price
    close: Price
    volume: int = Field(ge=0)

    @model_validator(mode="after")
    def _range(self) -> Bar:
        if not self.low <= min(self.open, self.close) <= max(self.open, self.close) <= self.high:
            raise ValueError(f"bar {self.date}: open and close must lie between low and high")
        return self


class Position(Model):
    symbol: Symbol
    quantity: Shares
    cost_basis: Amount = Field(description="What the shares held cost in total (average cost method).")


class Order(Model):
    id: Id = Field(pattern=r"^ord_\d{4,}$")
    symbol: Symbol
    side: Side
    order_type: Literal["market", "limit"]
    quantity: Shares
    limit_price: Price | None = None
    status: Literal["open", "filled", "cancelled"]
    placed_at: NaiveDatetime
    filled_at: NaiveDatetime | None = None
    fill_price: Price | None = None
    cancelled_at: NaiveDatetime | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Order:
        if (self.order_type == "limit") != (self.limit_price is not None):
            raise ValueError(f"order {self.id}: limit_price is set exactly for limit orders")
        filled = self.status == "filled"
        if filled != (self.filled_at is not None) or filled != (self.fill_price is not None):
            raise ValueError(f"order {self.id}: filled_at and fill_price are set exactly when it is filled")
        if (self.status == "cancelled") != (self.cancelled_at is not None):
            raise ValueError(f"order {self.id}: cancelled_at is set exactly when it is cancelled")
        if self.order_type == "market" and self.status == "open":
            raise ValueError(f"order {self.id}: market orders fill at once and are never open")
        if filled and self.limit_price is not None and self.fill_price is not None:
            worse = (
                self.fill_price > self.limit_price
                if self.side == "buy"
                else self.fill_price < self.limit_price
            )
            if worse:
                raise ValueError(
                    f"order {self.id} filled at {self.fill_price}, beyond its limit {self.limit_price}"
                )
        return self


class Transaction(Model):
    """One ledger line: a cash movement and the cash balance after it."""

    id: Id = Field(pattern=r"^txn_\d{4,}$")
    kind: Literal["deposit", "buy", "sell", "dividend"]
    at: NaiveDatetime
    amount: Signed = Field(description="Cash effect in USD: positive in, negative out.")
    cash_after: Amount
    symbol: Symbol | None = None
    quantity: Shares | None = None
    price: Price | None = None
    order_id: Id | None = None
    realized_pnl: Signed | None = Field(default=None, description="Sells: proceeds minus the average cost.")

    @model_validator(mode="after")
    def _shape(self) -> Transaction:
        trade = self.kind in ("buy", "sell")
        if trade != (self.quantity is not None and self.price is not None and self.order_id is not None):
            raise ValueError(f"transaction {self.id}: exactly trades have quantity, price and order_id")
        if (self.kind == "sell") != (self.realized_pnl is not None):
            raise ValueError(f"transaction {self.id}: exactly sells have realized_pnl")
        if (self.symbol is None) != (self.kind == "deposit"):
            raise ValueError(f"transaction {self.id}: every kind but deposit names a symbol")
        if (self.amount > 0) != (self.kind != "buy") or self.amount == 0:
            raise ValueError(
                f"transaction {self.id}: a {self.kind} must move cash {'out' if self.kind == 'buy' else 'in'}"
            )
        if (
            trade
            and self.quantity is not None
            and self.price is not None
            and abs(cents(self.amount)) != cents(self.price) * self.quantity
        ):
            raise ValueError(f"transaction {self.id}: amount is not quantity x price")
        return self


class Watchlist(Model):
    id: Id = Field(pattern=r"^wl_\d{4,}$")
    name: Annotated[str, Field(min_length=1, max_length=100)]
    symbols: list[Symbol] = Field(default_factory=list, max_length=MAX_WATCHLIST_SYMBOLS)
    created_at: NaiveDatetime


class BrokerageState(EnvState):
    holder: Holder
    cash: Amount = Field(description="Settled cash in USD, including what open buy orders reserve.")
    instruments: dict[str, Instrument] = Field(default_factory=dict, max_length=500)
    prices: dict[Symbol, Annotated[list[Bar], Field(max_length=5000)]] = Field(
        default_factory=dict, max_length=500, description="Daily bars per symbol, oldest first."
    )
    positions: dict[str, Position] = Field(default_factory=dict, max_length=500)
    orders: dict[str, Order] = Field(default_factory=dict, max_length=10_000)
    transactions: list[Transaction] = Field(default_factory=list, max_length=20_000)
    watchlists: dict[str, Watchlist] = Field(default_factory=dict, max_length=MAX_WATCHLISTS)

    @model_validator(mode="after")
    def _integrity(self) -> BrokerageState:
        for table, attr in (
            ("instruments", "symbol"),
            ("positions", "symbol"),
            ("orders", "id"),
            ("watchlists", "id"),
        ):
            for key, item in getattr(self, table).items():
                if key != getattr(item, attr):
                    raise ValueError(f"{table}: key {key!r} holds {getattr(item, attr)!r}")
        for symbol, bars in self.prices.items():
            if symbol not in self.instruments:
                raise ValueError(f"prices for unknown symbol {symbol!r}")
            for earlier, later in pairwise(bars):
                if later.date <= earlier.date:
                    raise ValueError(f"prices of {symbol}: bars must be in date order, one per day")
        for symbol in self.instruments:
            if not self.prices.get(symbol):
                raise ValueError(f"instrument {symbol} has no price series")
        for wl in self.watchlists.values():
            for symbol in wl.symbols:
                if symbol not in self.instruments:
                    raise ValueError(f"watchlist {wl.id} lists unknown symbol {symbol!r}")
            if len(set(wl.symbols)) != len(wl.symbols):
                raise ValueError(f"watchlist {wl.id} lists a symbol twice")
        self._check_ledger()
        ids = [*self.orders, *self.watchlists, *(t.id for t in self.transactions)]
        for ident in ids:
            if m := _ID.match(ident):
                prefix, n = m.group(1), int(m.group(2))
                if self.id_counters.get(prefix, 0) < n:
                    raise ValueError(
                        f"id_counters[{prefix!r}] is {self.id_counters.get(prefix, 0)} but {ident} exists: "
                        "new ids would collide"
                    )
        return self

    def _check_ledger(self) -> None:
        cash = 0
        held: dict[str, list[int]] = {}  # symbol -> [quantity, cost cents]
        seen: set[str] = set()
        filled_by: dict[str, str] = {}
        previous: datetime | None = None
        for txn in self.transactions:
            if txn.id in seen:
                raise ValueError(f"transaction id {txn.id} is used twice")
            seen.add(txn.id)
            if txn.at > self.now or (previous is not None and txn.at < previous):
                raise ValueError(f"transaction {txn.id} is out of time order or after now")
            previous = txn.at
            if txn.symbol is not None and txn.symbol not in self.instruments:
                raise ValueError(f"transaction {txn.id} is for unknown symbol {txn.symbol!r}")
            cash += cents(txn.amount)
            if cents(txn.cash_after) != cash:
                raise ValueError(
                    f"transaction {txn.id}: cash_after {txn.cash_after} is not the running cash {dollars(cash)}"
                )
            if txn.kind in ("buy", "sell") and txn.symbol and txn.quantity and txn.order_id:
                order = self.orders.get(txn.order_id)
                if (
                    order is None
                    or order.status != "filled"
                    or order.side != txn.kind
                    or order.symbol != txn.symbol
                ):
                    raise ValueError(
                        f"transaction {txn.id} does not match a filled {txn.kind} order {txn.order_id}"
                    )
                if order.quantity != txn.quantity or order.fill_price != txn.price:
                    raise ValueError(f"transaction {txn.id} differs from its order {order.id}")
                if txn.order_id in filled_by:
                    raise ValueError(f"order {txn.order_id} is filled by two transactions")
                filled_by[txn.order_id] = txn.id
                qty, cost = held.get(txn.symbol, [0, 0])
                if txn.kind == "buy":
                    held[txn.symbol] = [qty + txn.quantity, cost - cents(txn.amount)]
                else:
                    if txn.quantity > qty:
                        raise ValueError(
                            f"transaction {txn.id} sells {txn.quantity} {txn.symbol} but only {qty} are held"
                        )
                    sold_cost = round(cost * txn.quantity / qty)
                    if txn.realized_pnl is None or cents(txn.realized_pnl) != cents(txn.amount) - sold_cost:
                        raise ValueError(
                            f"transaction {txn.id}: realized_pnl is not proceeds minus average cost"
                        )
                    held[txn.symbol] = [qty - txn.quantity, cost - sold_cost]
        for order in self.orders.values():
            if order.status == "filled" and order.id not in filled_by:
                raise ValueError(f"order {order.id} is filled but no transaction records it")
            if order.symbol not in self.instruments:
                raise ValueError(f"order {order.id} is for unknown symbol {order.symbol!r}")
        if cents(self.cash) != cash:
            raise ValueError(f"cash {self.cash} is not the sum of the ledger ({dollars(cash)})")
        expected = {s: qc for s, qc in held.items() if qc[0] > 0}
        actual = {s: [p.quantity, cents(p.cost_basis)] for s, p in self.positions.items()}
        if expected != actual:
            raise ValueError(
                f"positions do not match the trades in the ledger (expected {expected}, got {actual})"
            )
        reserved = sum(
            cents(o.limit_price) * o.quantity
            for o in self.orders.values()
            if o.status == "open" and o.side == "buy" and o.limit_price is not None
        )
        if reserved > cash:
            raise ValueError(
                f"open buy orders reserve {dollars(reserved)}, more than the cash {dollars(cash)}"
            )
        for symbol, (qty, _) in expected.items():
            selling = sum(
                o.quantity
                for o in self.orders.values()
                if o.status == "open" and o.side == "sell" and o.symbol == symbol
            )
            if selling > qty:
                raise ValueError(f"open sell orders for {symbol} exceed the {qty} shares held")


# ---------------------------------------------------------------- results


class Quote(Model):
    symbol: str
    name: str
    last_price: float
    previous_close: float | None
    change: float | None = Field(description="last_price minus previous_close.")
    change_percent: float | None
    market_status: MarketStatus
    as_of: NaiveDatetime


class Holding(Model):
    symbol: str
    name: str
    quantity: int
    available_quantity: int = Field(description="Shares not reserved by open sell orders.")
    average_cost: float
    cost_basis: float
    last_price: float
    market_value: float
    unrealized_pnl: float


class Portfolio(Model):
    cash: float
    reserved_cash: float = Field(description="Held for open buy limit orders.")
    buying_power: float = Field(description="Cash that new buy orders can use.")
    positions: list[Holding]
    positions_value: float
    total_value: float = Field(description="Cash plus the market value of the positions.")
    currency: Literal["USD"] = "USD"
    as_of: NaiveDatetime


env = Environment(
    "brokerage",
    BrokerageState,
    version="1.0.1",
    domain="finance",
    description=(
        "A brokerage account for US stocks and ETFs with deterministic quotes from seeded daily price "
        "series: search instruments, quotes and price history, portfolio and buying power, market and "
        "limit orders with market hours, cancellations, cash deposits, the activity ledger and watchlists."
    ),
)


# ---------------------------------------------------------------- market helpers


def _instrument(state: BrokerageState, symbol: str) -> Instrument:
    key = symbol.strip().upper()
    if key not in state.instruments:
        raise ToolError(f"Unknown symbol {symbol!r}. Find symbols with search_instruments.")
    return state.instruments[key]


def _today_bar(state: BrokerageState, symbol: str) -> Bar | None:
    today = state.now.date()
    return next((b for b in state.prices[symbol] if b.date == today), None)


def _market_status(state: BrokerageState) -> MarketStatus:
    today = state.now.date()
    if not any(b.date == today for bars in state.prices.values() for b in bars):
        return "closed"
    t = state.now.time()
    if OPEN <= t < CLOSE:
        return "open"
    if EXT_OPEN <= t < OPEN:
        return "pre_market"
    if CLOSE <= t < EXT_CLOSE:
        return "after_hours"
    return "closed"


def _last_price_cents(state: BrokerageState, symbol: str) -> int:
    bar = _today_bar(state, symbol)
    t = state.now.time()
    if bar is not None and t >= CLOSE:
        return cents(bar.close)
    if bar is not None and t >= OPEN:
        return cents(bar.open)
    past = [b for b in state.prices[symbol] if b.date < state.now.date()]
    if not past:
        raise ToolError(f"{symbol} has no price yet on {state.now.date().isoformat()}.")
    return cents(past[-1].close)


def _previous_close_cents(state: BrokerageState, symbol: str) -> int | None:
    """The close before the session the last price comes from (today's, or the latest finished one)."""
    past = [b for b in state.prices[symbol] if b.date < state.now.date()]
    if _today_bar(state, symbol) is None or state.now.time() < OPEN:
        past = past[:-1]
    return cents(past[-1].close) if past else None


def _reserved_cash(state: BrokerageState) -> int:
    return sum(
        cents(o.limit_price) * o.quantity
        for o in state.orders.values()
        if o.status == "open" and o.side == "buy" and o.limit_price is not None
    )


def _reserved_shares(state: BrokerageState, symbol: str) -> int:
    return sum(
        o.quantity
        for o in state.orders.values()
        if o.status == "open" and o.side == "sell" and o.symbol == symbol
    )


def _post(state: BrokerageState, kind: str, amount: int, **fields: object) -> Transaction:
    cash = cents(state.cash) + amount
    txn = Transaction(
        id=state.new_id("txn"),
        kind=kind,
        at=state.now,
        amount=dollars(amount),
        cash_after=dollars(cash),
        **fields,
    )
    state.transactions.append(txn)
    state.cash = dollars(cash)
    return txn


def _book_fill(state: BrokerageState, order: Order) -> None:
    """Post a filled order to the ledger and the positions."""
    assert order.fill_price is not None
    price, qty = cents(order.fill_price), order.quantity
    position = state.positions.get(order.symbol)
    if order.side == "buy":
        _post(
            state,
            "buy",
            -price * qty,
            symbol=order.symbol,
            quantity=qty,
            price=dollars(price),
            order_id=order.id,
        )
        if position is None:
            state.positions[order.symbol] = Position(
                symbol=order.symbol, quantity=qty, cost_basis=dollars(price * qty)
            )
        else:
            position.quantity += qty
            position.cost_basis = dollars(cents(position.cost_basis) + price * qty)
    else:
        assert position is not None
        sold_cost = round(cents(position.cost_basis) * qty / position.quantity)
        _post(
            state,
            "sell",
            price * qty,
            symbol=order.symbol,
            quantity=qty,
            price=dollars(price),
            order_id=order.id,
            realized_pnl=dollars(price * qty - sold_cost),
        )
        if qty == position.quantity:
            del state.positions[order.symbol]
        else:
            position.quantity -= qty
            position.cost_basis = dollars(cents(position.cost_basis) - sold_cost)


# ---------------------------------------------------------------- market data


@env.tool(read_only=True)
def search_instruments(
    state: BrokerageState,
    query: Annotated[str, Field(max_length=100)] = "",
    kind: Literal["stock", "etf"] | None = None,
    limit: Annotated[int, Field(ge=1, le=50)] = 10,
) -> list[Instrument]:
    """Find stocks and ETFs whose symbol, name or sector contains the query (any case).

    Args:
        query: Part of a symbol, company name or sector, e.g. "contoso" or "energy"; empty lists all.
        kind: Only "stock" or only "etf".
        limit: The most instruments to return (1-50, default 10).
    """
    q = query.strip().lower()
    found = [
        i
        for i in state.instruments.values()
        if (q in i.symbol.lower() or q in i.name.lower() or q in i.sector.lower())
        and (kind is None or i.kind == kind)
    ]
    found.sort(key=lambda i: (i.symbol.lower() != q, i.symbol))
    return found[:limit]


@env.tool(read_only=True)
def get_quote(state: BrokerageState, symbol: Symbol) -> Quote:
    """Get the last price of a stock or ETF, its change since the previous close, and the market status.

    Before 09:30 the last price is the latest close, from 09:30 the day's open, from 16:00 its close.
    The change is against the close before that session (on a weekend: Friday's move).

    Args:
        symbol: The ticker symbol, e.g. "CTSO" (from search_instruments).
    """
    inst = _instrument(state, symbol)
    last = _last_price_cents(state, inst.symbol)
    prev = _previous_close_cents(state, inst.symbol)
    change = None if prev is None else last - prev
    return Quote(
        symbol=inst.symbol,
        name=inst.name,
        last_price=dollars(last),
        previous_close=None if prev is None else dollars(prev),
        change=None if change is None else dollars(change),
        change_percent=None if prev is None or change is None else round(change * 100 / prev, 2),
        market_status=_market_status(state),
        as_of=state.now,
    )


@env.tool(read_only=True)
def get_price_history(
    state: BrokerageState, symbol: Symbol, start_date: date, end_date: date | None = None
) -> list[Bar]:
    """Get daily bars (open, high, low, close, volume) of a symbol, oldest first, for days that are over.

    Args:
        symbol: The ticker symbol, e.g. "NWT".
        start_date: The first day, e.g. "2025-12-01".
        end_date: The last day (inclusive); omit for up to today.
    """
    inst = _instrument(state, symbol)
    last = end_date or state.now.date()
    if last < start_date:
        raise ToolError(f"end_date {last.isoformat()} is before start_date {start_date.isoformat()}.")
    today = state.now.date()
    over = state.now.time() >= CLOSE
    return [
        b
        for b in state.prices[inst.symbol]
        if start_date <= b.date <= last and (b.date < today or (b.date == today and over))
    ]


# ---------------------------------------------------------------- account


@env.tool(read_only=True)
def get_portfolio(state: BrokerageState) -> Portfolio:
    """Show cash, reserved cash, buying power, every position with its value and unrealized P&L, and the total."""
    holdings = []
    for position in sorted(state.positions.values(), key=lambda p: p.symbol):
        last = _last_price_cents(state, position.symbol)
        value = last * position.quantity
        holdings.append(
            Holding(
                symbol=position.symbol,
                name=state.instruments[position.symbol].name,
                quantity=position.quantity,
                available_quantity=position.quantity - _reserved_shares(state, position.symbol),
                average_cost=round(cents(position.cost_basis) / position.quantity / 100, 2),
                cost_basis=position.cost_basis,
                last_price=dollars(last),
                market_value=dollars(value),
                unrealized_pnl=dollars(value - cents(position.cost_basis)),
            )
        )
    reserved = _reserved_cash(state)
    positions_value = sum(cents(h.market_value) for h in holdings)
    return Portfolio(
        cash=state.cash,
        reserved_cash=dollars(reserved),
        buying_power=dollars(cents(state.cash) - reserved),
        positions=holdings,
        positions_value=dollars(positions_value),
        total_value=dollars(cents(state.cash) + positions_value),
        as_of=state.now,
    )


@env.tool
def deposit_funds(state: BrokerageState, amount: Amount) -> Transaction:
    """Move cash into the account from the holder's linked bank account; available at once.

    Args:
        amount: USD to deposit, from 1.00 to 250,000.00.
    """
    value = cents(amount)
    if not 100 <= value <= MAX_DEPOSIT_CENTS:
        raise ToolError(f"A deposit is between $1.00 and {_fmt(MAX_DEPOSIT_CENTS)}; got {_fmt(value)}.")
    return _post(state, "deposit", value)


@env.tool(read_only=True)
def list_transactions(
    state: BrokerageState,
    kind: Literal["deposit", "buy", "sell", "dividend"] | None = None,
    symbol: Symbol | None = None,
    limit: Annotated[int, Field(ge=1, le=100)] = 20,
) -> list[Transaction]:
    """List the account's activity (deposits, buys, sells, dividends), newest first, with the cash after each.

    Args:
        kind: Only deposit, buy, sell or dividend lines.
        symbol: Only lines for this symbol.
        limit: The most lines to return (1-100, default 20).
    """
    wanted = symbol.strip().upper() if symbol else None
    found = [
        t
        for t in state.transactions
        if (kind is None or t.kind == kind) and (wanted is None or t.symbol == wanted)
    ]
    return list(reversed(found))[:limit]


# ---------------------------------------------------------------- orders


@env.tool
def place_order(
    state: BrokerageState,
    symbol: Symbol,
    side: Side,
    quantity: Shares,
    order_type: Literal["market", "limit"] = "market",
    limit_price: Price | None = None,
) -> Order:
    """Buy or sell whole shares.

    Market orders: regular hours only (09:30-16:00 on trading days), filled at once at the last price.
    Limit orders: 04:00-20:00 on trading days; filled at once at the last price when marketable (a buy
    limit at or above it, a sell limit at or below it), otherwise left open until cancelled. Buys need
    buying power (cash not reserved by open buy orders); sells need shares not reserved by open sells.

    Args:
        symbol: The ticker symbol, e.g. "FBKM".
        side: "buy" or "sell".
        quantity: Whole shares, 1 or more.
        order_type: "market" (default) or "limit".
        limit_price: Limit orders only: the highest price to pay (buy) or lowest to accept (sell), USD.
    """
    inst = _instrument(state, symbol)
    if order_type == "limit" and limit_price is None:
        raise ToolError("A limit order needs a limit_price.")
    if order_type == "market" and limit_price is not None:
        raise ToolError("A market order takes no limit_price; use order_type 'limit' to set one.")
    status = _market_status(state)
    if order_type == "market" and status != "open":
        raise ToolError(
            f"The market is {status.replace('_', ' ')} ({state.now.strftime('%a %Y-%m-%d %H:%M')}); market orders "
            "are accepted 09:30-16:00 on trading days. Place a limit order instead (04:00-20:00) or wait."
        )
    if status == "closed":
        raise ToolError(
            f"The market is closed ({state.now.strftime('%a %Y-%m-%d %H:%M')}); orders are accepted 04:00-20:00 "
            "on trading days."
        )
    last = _last_price_cents(state, inst.symbol)
    if side == "buy":
        need = (cents(limit_price) if limit_price is not None else last) * quantity
        power = cents(state.cash) - _reserved_cash(state)
        if need > power:
            raise ToolError(
                f"Buying {quantity} {inst.symbol} needs {_fmt(need)} but the buying power is {_fmt(power)}. "
                "Deposit funds with deposit_funds or buy fewer shares."
            )
    else:
        position = state.positions.get(inst.symbol)
        held = position.quantity if position else 0
        free = held - _reserved_shares(state, inst.symbol)
        if held == 0:
            raise ToolError(
                f"No {inst.symbol} shares are held, so there are none to sell (no short selling)."
            )
        if quantity > free:
            raise ToolError(
                f"Only {free} {inst.symbol} shares can be sold ({held} held, {held - free} reserved by open "
                "sell orders)."
            )
    marketable = (
        limit_price is None
        or (side == "buy" and last <= cents(limit_price))
        or (side == "sell" and last >= cents(limit_price))
    )
    order = Order(
        id=state.new_id("ord"),
        symbol=inst.symbol,
        side=side,
        order_type=order_type,
        quantity=quantity,
        limit_price=limit_price,
        status="filled" if marketable else "open",
        placed_at=state.now,
        filled_at=state.now if marketable else None,
        fill_price=dollars(last) if marketable else None,
    )
    state.orders[order.id] = order
    if marketable:
        _book_fill(state, order)
    return order


@env.tool(read_only=True)
def list_orders(
    state: BrokerageState,
    status: Literal["open", "filled", "cancelled"] | None = None,
    symbol: Symbol | None = None,
) -> list[Order]:
    """List orders, newest first.

    Args:
        status: Only open, filled or cancelled orders.
        symbol: Only orders for this symbol.
    """
    wanted = symbol.strip().upper() if symbol else None
    found = [
        o
        for o in state.orders.values()
        if (status is None or o.status == status) and (wanted is None or o.symbol == wanted)
    ]
    return sorted(found, key=lambda o: (o.placed_at, o.id), reverse=True)


@env.tool(read_only=True)
def get_order(state: BrokerageState, order_id: Id) -> Order:
    """Get one order: its status, and when filled its price and time.

    Args:
        order_id: The order id (ord_...), from place_order or list_orders.
    """
    return lookup(state.orders, order_id, "order", "List orders with list_orders.")


@env.tool(destructive=True)
def cancel_order(state: BrokerageState, order_id: Id) -> Order:
    """Cancel an open limit order; the cash or shares it reserved become available again.

    Args:
        order_id: The order id (ord_...) of an open order, from list_orders(status="open").
    """
    order = lookup(state.orders, order_id, "order", "List orders with list_orders.")
    if order.status != "open":
        raise ToolError(f"Order {order.id} is {order.status}; only open orders can be cancelled.")
    order.status, order.cancelled_at = "cancelled", state.now
    return order


# ---------------------------------------------------------------- watchlists


@env.tool(read_only=True)
def list_watchlists(state: BrokerageState) -> list[Watchlist]:
    """List the holder's watchlists with their symbols."""
    return sorted(state.watchlists.values(), key=lambda w: w.id)


@env.tool
def create_watchlist(
    state: BrokerageState,
    name: Annotated[str, Field(min_length=1, max_length=100)],
    symbols: Annotated[list[Symbol], Field(max_length=MAX_WATCHLIST_SYMBOLS)] | None = None,
) -> Watchlist:
    """Create a watchlist, optionally with symbols in it (at most 20 watchlists, 50 symbols each).

    Args:
        name: A name not used by another watchlist, e.g. "Energy ideas".
        symbols: Ticker symbols to put in it, e.g. ["LTCY", "CBND"].
    """
    name = name.strip()
    if not name:
        raise ToolError("name is blank; give the watchlist a name.")
    if any(w.name.lower() == name.lower() for w in state.watchlists.values()):
        raise ToolError(
            f"A watchlist named {name!r} already exists; pick another name or use update_watchlist."
        )
    if len(state.watchlists) >= MAX_WATCHLISTS:
        raise ToolError(f"At most {MAX_WATCHLISTS} watchlists; delete one first.")
    clean: list[str] = []
    for symbol in symbols or []:
        inst = _instrument(state, symbol)
        if inst.symbol not in clean:
            clean.append(inst.symbol)
    wl = Watchlist(id=state.new_id("wl"), name=name, symbols=clean, created_at=state.now)
    state.watchlists[wl.id] = wl
    return wl


@env.tool(idempotent=True)
def update_watchlist(
    state: BrokerageState,
    watchlist_id: Id,
    add: Annotated[list[Symbol], Field(max_length=MAX_WATCHLIST_SYMBOLS)] | None = None,
    remove: Annotated[list[Symbol], Field(max_length=MAX_WATCHLIST_SYMBOLS)] | None = None,
) -> Watchlist:
    """Add symbols to and remove symbols from a watchlist; adding one already there changes nothing.

    Args:
        watchlist_id: The watchlist (wl_...), from list_watchlists.
        add: Symbols to add, e.g. ["PRSN"].
        remove: Symbols to take out; each must be in the watchlist.
    """
    wl = lookup(state.watchlists, watchlist_id, "watchlist", "List watchlists with list_watchlists.")
    if not add and not remove:
        raise ToolError("Nothing to change: give symbols to add or remove.")
    for symbol in remove or []:
        key = symbol.strip().upper()
        if key not in wl.symbols:
            raise ToolError(
                f"{key} is not in watchlist {wl.id} ({wl.name}); it has {', '.join(wl.symbols) or 'nothing'}."
            )
        wl.symbols.remove(key)
    for symbol in add or []:
        inst = _instrument(state, symbol)
        if inst.symbol not in wl.symbols:
            wl.symbols.append(inst.symbol)
    if len(wl.symbols) > MAX_WATCHLIST_SYMBOLS:
        raise ToolError(f"A watchlist holds at most {MAX_WATCHLIST_SYMBOLS} symbols.")
    return wl


@env.tool(destructive=True)
def delete_watchlist(state: BrokerageState, watchlist_id: Id) -> Watchlist:
    """Delete a watchlist (the instruments and positions are not affected).

    Args:
        watchlist_id: The watchlist (wl_...), from list_watchlists.
    """
    wl = lookup(state.watchlists, watchlist_id, "watchlist", "List watchlists with list_watchlists.")
    del state.watchlists[wl.id]
    return wl
