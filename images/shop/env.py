"""shop: an online store seen from one signed-in shopper: catalog, cart, checkout, orders, returns, reviews.

Store rules (the tools enforce them and their docstrings repeat them to the agent):

- Prices are in USD. Money in arguments and results is an `amount` in dollars with at most 2 decimals.
- The store ships within the United States only, to San Francisco, New York, Chicago, Seattle, Boston
  and Austin; sales tax is the ship-to city's combined rate, charged on the items (not on shipping).
- Shipping: standard is free from $35.00 of items, $5.99 below that, and arrives in 5 business days;
  express costs $12.99 and arrives in 2 business days.
- At most 10 of one product per order; stock is taken at checkout and put back when an order is
  cancelled. Only orders that have not shipped yet can be cancelled (refunded in full).
- Delivered items can be returned within 30 days of delivery, except final-sale products; the refund
  is the items' price plus the tax paid on them, to the payment method of the order.
- A review can be written for a product from a delivered order, one per product.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, NaiveDatetime, model_validator

from envreg.env import Environment, EnvState, ToolError, lookup
from envreg.env.vocab import EMAIL, City

_ID = re.compile(r"^([a-z]+)_(\d+)$")

TAX_RATES = {  # combined state + local sales tax, percent
    "San Francisco": 8.625,
    "New York": 8.875,
    "Chicago": 10.25,
    "Seattle": 10.35,
    "Boston": 6.25,
    "Austin": 8.25,
}
OTHER_CITIES = ("London", "Paris", "Berlin", "Madrid", "Tokyo", "Sydney")
FREE_SHIPPING_FROM_CENTS = 3500
SHIPPING = {"standard": (599, 5), "express": (1299, 2)}  # fee in cents, business days
MAX_PER_PRODUCT = 10
MAX_CART_LINES = 50
RETURN_WINDOW = timedelta(days=30)


def _two_decimals(value: float) -> float:
    if round(value, 2) != value:
        raise ValueError("an amount has at most 2 decimals (cents)")
    return value


Amount = Annotated[float, Field(ge=0, le=1_000_000), AfterValidator(_two_decimals)]
Id = Annotated[str, Field(max_length=64)]
Name = Annotated[str, Field(min_length=1, max_length=200)]
Text = Annotated[str, Field(max_length=2000)]
Quantity = Annotated[int, Field(ge=1, le=MAX_PER_PRODUCT)]
Category = Literal["electronics", "home", "kitchen", "outdoors", "books", "clothing", "grocery"]
ShippingSpeed = Literal["standard", "express"]
OrderStatus = Literal["placed", "shipped", "delivered", "cancelled"]


def cents(amount: float) -> int:
    return round(amount * 100)


def dollars(value: int) -> float:
    return value / 100


def _tax_cents(items_cents: int, rate_percent: float) -> int:
    """Sales tax on `items_cents`, rounded half up to the cent."""
    return int(items_cents * rate_percent / 100 + 0.5)


def _add_business_days(day: date, n: int) -> date:
    while n:
        day += timedelta(days=1)
        if day.weekday() < 5:
            n -= 1
    return day


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Shopper(Model):
    """The signed-in customer."""

    name: Name
    email: Annotated[str, Field(max_length=254, pattern=EMAIL)]


class Product(Model):
    """A product in the catalog."""

    id: Id = Field(pattern=r"^prd_\d{4,}$")
    name: Name
    brand: Name
    category: Category
    description: Text
    price: Amount = Field(description="Price in USD.")
    stock: int = Field(ge=0, le=100_000, description="Units in the warehouse.")
    final_sale: bool = Field(default=False, description="Final-sale products cannot be returned.")


class ProductView(Product):
    """A product with its review summary."""

    rating: float | None = Field(
        description="Average review rating (1-5, one decimal); null without reviews."
    )
    review_count: int
    in_stock: bool


class PaymentMethod(Model):
    """A saved card or a store gift card."""

    id: Id = Field(pattern=r"^pm_\d{4,}$")
    kind: Literal["card", "gift_card"]
    label: Name = Field(description='How the shopper knows it, e.g. "Visa ending 4242".')
    expires_on: date | None = Field(default=None, description="Cards only: the last valid day.")
    balance: Amount | None = Field(default=None, description="Gift cards only: what is left to spend, USD.")

    @model_validator(mode="after")
    def _kind_fields(self) -> PaymentMethod:
        if self.kind == "card" and (self.expires_on is None or self.balance is not None):
            raise ValueError(f"card {self.id} needs expires_on and no balance")
        if self.kind == "gift_card" and (self.balance is None or self.expires_on is not None):
            raise ValueError(f"gift card {self.id} needs a balance and no expires_on")
        return self


class CartLine(Model):
    product_id: Id
    quantity: Quantity


class CartLineView(Model):
    product_id: str
    name: str
    unit_price: float
    quantity: int
    line_total: float
    in_stock: bool = Field(description="Whether the warehouse has this quantity now.")


class Cart(Model):
    lines: list[CartLineView]
    item_count: int
    subtotal: float = Field(description="Items total in USD, before shipping and tax.")
    currency: Literal["USD"] = "USD"


class OrderLine(Model):
    product_id: Id
    name: Name
    unit_price: Amount
    quantity: Quantity
    returned_quantity: int = Field(default=0, ge=0, le=MAX_PER_PRODUCT)

    @model_validator(mode="after")
    def _returned(self) -> OrderLine:
        if self.returned_quantity > self.quantity:
            raise ValueError(f"{self.product_id}: returned_quantity exceeds the quantity ordered")
        return self


class Order(Model):
    """An order: what was bought, where it goes, what it cost, and where it is."""

    id: Id = Field(pattern=r"^ord_\d{4,}$")
    lines: list[OrderLine] = Field(min_length=1, max_length=MAX_CART_LINES)
    address: Text = Field(description="Street address it ships to.")
    city: City
    shipping: ShippingSpeed
    tax_rate: float = Field(ge=0, le=20, description="Sales tax rate in percent.")
    subtotal: Amount
    shipping_fee: Amount
    tax: Amount
    amount: Amount = Field(description="What was charged: subtotal + shipping_fee + tax, USD.")
    currency: Literal["USD"] = "USD"
    email: Annotated[str, Field(max_length=254, pattern=EMAIL)] = Field(description="Receipt address.")
    payment_method_id: Id
    refunded: Amount = Field(default=0, description="Refunded so far (cancellation and returns), USD.")
    status: OrderStatus
    placed_at: NaiveDatetime
    estimated_delivery: date
    shipped_at: NaiveDatetime | None = None
    delivered_at: NaiveDatetime | None = None
    cancelled_at: NaiveDatetime | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Order:
        subtotal = sum(cents(line.unit_price) * line.quantity for line in self.lines)
        if cents(self.subtotal) != subtotal:
            raise ValueError(f"order {self.id}: subtotal {self.subtotal} is not the sum of its lines")
        if cents(self.tax) != _tax_cents(subtotal, self.tax_rate):
            raise ValueError(f"order {self.id}: tax {self.tax} is not {self.tax_rate}% of {self.subtotal}")
        if cents(self.amount) != subtotal + cents(self.shipping_fee) + cents(self.tax):
            raise ValueError(f"order {self.id}: amount is not subtotal + shipping_fee + tax")
        if self.refunded > self.amount:
            raise ValueError(f"order {self.id}: refunded {self.refunded} exceeds the amount charged")
        stamps = {
            "shipped_at": self.status in ("shipped", "delivered"),
            "delivered_at": self.status == "delivered",
            "cancelled_at": self.status == "cancelled",
        }
        for attr, needed in stamps.items():
            if (getattr(self, attr) is not None) != needed:
                raise ValueError(f"order {self.id}: {attr} must be set exactly when the order is {attr[:-3]}")
        if self.status == "cancelled" and self.refunded != self.amount:
            raise ValueError(f"order {self.id}: a cancelled order is refunded in full")
        if self.shipped_at and self.shipped_at < self.placed_at:
            raise ValueError(f"order {self.id} shipped before it was placed")
        if self.delivered_at and self.shipped_at and self.delivered_at < self.shipped_at:
            raise ValueError(f"order {self.id} was delivered before it shipped")
        if len({line.product_id for line in self.lines}) != len(self.lines):
            raise ValueError(f"order {self.id}: a product appears on two lines")
        return self


class ReturnLine(Model):
    product_id: Id
    quantity: Quantity


class Return(Model):
    """A return of delivered items, refunded when it is created."""

    id: Id = Field(pattern=r"^ret_\d{4,}$")
    order_id: Id
    lines: list[ReturnLine] = Field(min_length=1, max_length=MAX_CART_LINES)
    reason: Text
    refund: Amount = Field(description="Items' price plus their tax, USD.")
    created_at: NaiveDatetime
    ship_back_by: date = Field(description="The items must be sent back by this day.")


class Review(Model):
    id: Id = Field(pattern=r"^rev_\d{4,}$")
    product_id: Id
    author: Name
    rating: int = Field(ge=1, le=5)
    title: Annotated[str, Field(min_length=1, max_length=120)]
    body: Text
    created_at: NaiveDatetime
    verified_purchase: bool
    by_shopper: bool = Field(default=False, description="Written by the signed-in shopper.")


class ShopState(EnvState):
    """The catalog, the shopper's cart, payment methods, orders, returns, and every review."""

    shopper: Shopper
    products: dict[str, Product] = Field(default_factory=dict, max_length=5000)
    payment_methods: dict[str, PaymentMethod] = Field(default_factory=dict, max_length=20)
    cart: list[CartLine] = Field(default_factory=list, max_length=MAX_CART_LINES)
    orders: dict[str, Order] = Field(default_factory=dict, max_length=5000)
    returns: dict[str, Return] = Field(default_factory=dict, max_length=5000)
    reviews: dict[str, Review] = Field(default_factory=dict, max_length=20000)

    @model_validator(mode="after")
    def _integrity(self) -> ShopState:
        ids: list[str] = []
        for table in ("products", "payment_methods", "orders", "returns", "reviews"):
            for key, item in getattr(self, table).items():
                if key != item.id:
                    raise ValueError(f"{table}: key {key!r} holds {item.id!r}; store each under its own id")
                ids.append(item.id)
        for line in self.cart:
            if line.product_id not in self.products:
                raise ValueError(f"the cart holds unknown product {line.product_id!r}")
        if len({line.product_id for line in self.cart}) != len(self.cart):
            raise ValueError("the cart lists a product twice; one line per product")
        returned: dict[tuple[str, str], int] = {}
        for ret in self.returns.values():
            order = self.orders.get(ret.order_id)
            if order is None:
                raise ValueError(f"return {ret.id} is for unknown order {ret.order_id!r}")
            if order.status != "delivered" or order.delivered_at is None:
                raise ValueError(f"return {ret.id}: order {order.id} was not delivered")
            for line in ret.lines:
                key = (order.id, line.product_id)
                returned[key] = returned.get(key, 0) + line.quantity
            if ret.created_at > self.now:
                raise ValueError(f"return {ret.id} is created after now")
        for order in self.orders.values():
            if order.payment_method_id not in self.payment_methods:
                raise ValueError(f"order {order.id} was paid with unknown payment method")
            if (
                order.placed_at > self.now
                or max(
                    t
                    for t in (order.placed_at, order.shipped_at, order.delivered_at, order.cancelled_at)
                    if t
                )
                > self.now
            ):
                raise ValueError(f"order {order.id} has a timestamp after now ({self.now.isoformat()})")
            refunds = sum(cents(r.refund) for r in self.returns.values() if r.order_id == order.id)
            if order.status != "cancelled" and cents(order.refunded) != refunds:
                raise ValueError(f"order {order.id}: refunded {order.refunded} is not the sum of its returns")
            for line in order.lines:
                if line.product_id not in self.products:
                    raise ValueError(f"order {order.id} lists unknown product {line.product_id!r}")
                if line.returned_quantity != returned.get((order.id, line.product_id), 0):
                    raise ValueError(
                        f"order {order.id}: returned_quantity of {line.product_id} does not match its returns"
                    )
        for ret in self.returns.values():
            order_products = {line.product_id for line in self.orders[ret.order_id].lines}
            for line in ret.lines:
                if line.product_id not in order_products:
                    raise ValueError(
                        f"return {ret.id} returns {line.product_id}, which order {ret.order_id} lacks"
                    )
        by_shopper: set[str] = set()
        for review in self.reviews.values():
            if review.product_id not in self.products:
                raise ValueError(f"review {review.id} is about unknown product {review.product_id!r}")
            if review.by_shopper:
                if review.product_id in by_shopper:
                    raise ValueError(f"the shopper reviewed {review.product_id} twice")
                by_shopper.add(review.product_id)
            if review.created_at > self.now:
                raise ValueError(f"review {review.id} is created after now")
        for ident in ids:
            if m := _ID.match(ident):
                prefix, n = m.group(1), int(m.group(2))
                if self.id_counters.get(prefix, 0) < n:
                    raise ValueError(
                        f"id_counters[{prefix!r}] is {self.id_counters.get(prefix, 0)} but {ident} exists: "
                        "new ids would collide"
                    )
        return self


class CheckoutQuote(Model):
    """What the cart would cost if checked out now."""

    subtotal: float
    shipping_fee: float
    tax_rate: float
    tax: float
    amount: float
    currency: Literal["USD"] = "USD"


class Cancellation(Model):
    order: Order
    refund: float = Field(description="Refunded now, USD.")
    refunded_to: str = Field(description="The payment method refunded.")


env = Environment(
    "shop",
    ShopState,
    version="1.0.1",
    domain="commerce",
    description=(
        "An online store for one signed-in shopper: search the catalog, read product details and "
        "reviews, fill a cart, check out with US shipping and sales tax, track and cancel orders, "
        "return delivered items for a refund, and review purchased products."
    ),
)


# ---------------------------------------------------------------- helpers


def _product(state: ShopState, product_id: str) -> Product:
    return lookup(state.products, product_id, "product", "Find products with search_products.")


def _order(state: ShopState, order_id: str) -> Order:
    return lookup(state.orders, order_id, "order", "List orders with list_orders.")


def _view(state: ShopState, product: Product) -> ProductView:
    ratings = [r.rating for r in state.reviews.values() if r.product_id == product.id]
    return ProductView(
        **product.model_dump(),
        rating=round(sum(ratings) / len(ratings), 1) if ratings else None,
        review_count=len(ratings),
        in_stock=product.stock > 0,
    )


def _cart(state: ShopState) -> Cart:
    lines = []
    for line in state.cart:
        product = state.products[line.product_id]
        lines.append(
            CartLineView(
                product_id=product.id,
                name=product.name,
                unit_price=product.price,
                quantity=line.quantity,
                line_total=dollars(cents(product.price) * line.quantity),
                in_stock=product.stock >= line.quantity,
            )
        )
    return Cart(
        lines=lines,
        item_count=sum(line.quantity for line in lines),
        subtotal=dollars(sum(cents(line.line_total) for line in lines)),
    )


def _ship_to(city: str) -> float:
    if city not in TAX_RATES:
        raise ToolError(
            f"The store ships within the United States only; {city} is not served. "
            f"Ship to one of: {', '.join(TAX_RATES)}."
        )
    return TAX_RATES[city]


def _quote(subtotal_cents: int, city: str, shipping: str) -> CheckoutQuote:
    rate = _ship_to(city)
    fee, _ = SHIPPING[shipping]
    if shipping == "standard" and subtotal_cents >= FREE_SHIPPING_FROM_CENTS:
        fee = 0
    tax = _tax_cents(subtotal_cents, rate)
    return CheckoutQuote(
        subtotal=dollars(subtotal_cents),
        shipping_fee=dollars(fee),
        tax_rate=rate,
        tax=dollars(tax),
        amount=dollars(subtotal_cents + fee + tax),
    )


def _refund_to(state: ShopState, order: Order, amount_cents: int) -> None:
    pm = state.payment_methods[order.payment_method_id]
    if pm.kind == "gift_card" and pm.balance is not None:
        pm.balance = dollars(cents(pm.balance) + amount_cents)
    order.refunded = dollars(cents(order.refunded) + amount_cents)


# ---------------------------------------------------------------- catalog


@env.tool(read_only=True)
def search_products(
    state: ShopState,
    query: Annotated[str, Field(max_length=200)] = "",
    category: Category | None = None,
    max_price: Amount | None = None,
    in_stock_only: bool = False,
    sort: Literal["relevance", "price_low_to_high", "price_high_to_low", "rating"] = "relevance",
    limit: Annotated[int, Field(ge=1, le=50)] = 10,
) -> list[ProductView]:
    """Search the catalog; every word of the query must appear in the name, brand, category or description.

    Args:
        query: Words to look for, e.g. "wireless headphones"; empty lists everything (with the filters).
        category: Only this category: electronics, home, kitchen, outdoors, books, clothing or grocery.
        max_price: Only products at or below this price, in USD.
        in_stock_only: Leave out products that are out of stock.
        sort: relevance (name matches first), price_low_to_high, price_high_to_low or rating.
        limit: The most products to return (1-50, default 10).
    """
    words = query.lower().split()
    hits: list[tuple[int, ProductView]] = []
    for product in state.products.values():
        text = f"{product.name} {product.brand} {product.category} {product.description}".lower()
        if not all(w in text for w in words):
            continue
        if category is not None and product.category != category:
            continue
        if max_price is not None and product.price > max_price:
            continue
        if in_stock_only and product.stock == 0:
            continue
        in_name = sum(w in product.name.lower() for w in words)
        hits.append((in_name, _view(state, product)))
    if sort == "relevance":
        hits.sort(key=lambda h: (-h[0], h[1].id))
    elif sort == "price_low_to_high":
        hits.sort(key=lambda h: (h[1].price, h[1].id))
    elif sort == "price_high_to_low":
        hits.sort(key=lambda h: (-h[1].price, h[1].id))
    else:
        hits.sort(key=lambda h: (-(h[1].rating or 0), -h[1].review_count, h[1].id))
    return [view for _, view in hits[:limit]]


@env.tool(read_only=True)
def get_product(state: ShopState, product_id: Id) -> ProductView:
    """Get one product: description, price, stock, whether it is final sale, and its average rating.

    Args:
        product_id: The product id (prd_...), from search_products.
    """
    return _view(state, _product(state, product_id))


@env.tool(read_only=True)
def list_reviews(
    state: ShopState,
    product_id: Id,
    min_rating: Annotated[int, Field(ge=1, le=5)] = 1,
    limit: Annotated[int, Field(ge=1, le=50)] = 10,
) -> list[Review]:
    """List a product's reviews, newest first.

    Args:
        product_id: The product id (prd_...), from search_products.
        min_rating: Only reviews with at least this many stars (1-5).
        limit: The most reviews to return (1-50, default 10).
    """
    _product(state, product_id)
    found = [r for r in state.reviews.values() if r.product_id == product_id and r.rating >= min_rating]
    found.sort(key=lambda r: (r.created_at, r.id), reverse=True)
    return found[:limit]


# ---------------------------------------------------------------- cart and checkout


@env.tool(read_only=True)
def view_cart(state: ShopState) -> Cart:
    """Show the cart: each product with its quantity and price, and the items subtotal in USD."""
    return _cart(state)


@env.tool
def add_to_cart(state: ShopState, product_id: Id, quantity: Quantity = 1) -> Cart:
    """Put a product in the cart, or add to its quantity if it is already there (at most 10 of one product).

    Args:
        product_id: The product id (prd_...), from search_products.
        quantity: How many to add (1-10, default 1).
    """
    product = _product(state, product_id)
    line = next((line for line in state.cart if line.product_id == product.id), None)
    total = quantity + (line.quantity if line else 0)
    if total > MAX_PER_PRODUCT:
        raise ToolError(
            f"At most {MAX_PER_PRODUCT} of one product per order; the cart already has "
            f"{line.quantity if line else 0} of {product.id}."
        )
    if product.stock == 0:
        raise ToolError(f"{product.name} ({product.id}) is out of stock; search_products finds alternatives.")
    if product.stock < total:
        raise ToolError(
            f"Only {product.stock} of {product.name} ({product.id}) in stock"
            + (f", and the cart already has {line.quantity}." if line else ".")
            + " Choose a smaller quantity or another product."
        )
    if line is None:
        if len(state.cart) >= MAX_CART_LINES:
            raise ToolError(f"The cart is full ({MAX_CART_LINES} products); check out or remove something.")
        state.cart.append(CartLine(product_id=product.id, quantity=quantity))
    else:
        line.quantity = total
    return _cart(state)


@env.tool(idempotent=True)
def update_cart_item(
    state: ShopState, product_id: Id, quantity: Annotated[int, Field(ge=0, le=MAX_PER_PRODUCT)]
) -> Cart:
    """Set the quantity of a product in the cart; 0 removes it from the cart.

    Args:
        product_id: The product id (prd_...) of a cart line, from view_cart.
        quantity: The new quantity (0-10); 0 removes the line.
    """
    line = next((line for line in state.cart if line.product_id == product_id), None)
    if line is None:
        raise ToolError(
            f"{product_id!r} is not in the cart; view_cart shows what is. Use add_to_cart to add it."
        )
    if quantity == 0:
        state.cart.remove(line)
        return _cart(state)
    product = state.products[product_id]
    if product.stock < quantity:
        raise ToolError(f"Only {product.stock} of {product.name} ({product.id}) in stock.")
    line.quantity = quantity
    return _cart(state)


@env.tool(read_only=True)
def list_payment_methods(state: ShopState) -> list[PaymentMethod]:
    """List the shopper's saved cards and gift cards (with what is left on each gift card)."""
    return sorted(state.payment_methods.values(), key=lambda p: p.id)


@env.tool
def checkout(
    state: ShopState,
    address: Annotated[str, Field(min_length=1, max_length=300)],
    city: City,
    payment_method_id: Id,
    shipping: ShippingSpeed = "standard",
) -> Order:
    """Place an order for everything in the cart and charge it; the cart is emptied.

    The charge is the items, plus shipping (standard: free from $35.00 of items, else $5.99, 5
    business days; express: $12.99, 2 business days), plus the city's sales tax on the items. A gift
    card must cover the whole amount; an expired card is refused. Ships to San Francisco, New York,
    Chicago, Seattle, Boston and Austin only.

    Args:
        address: Street address, e.g. "742 Evergreen Terrace, Apt 3".
        city: The ship-to city, e.g. "Seattle".
        payment_method_id: The card or gift card to charge (pm_...), from list_payment_methods.
        shipping: "standard" (default) or "express".
    """
    if not state.cart:
        raise ToolError("The cart is empty; add products with add_to_cart first.")
    if not address.strip():
        raise ToolError("The address is blank; give the street address to ship to.")
    quote = _quote(
        sum(cents(state.products[line.product_id].price) * line.quantity for line in state.cart),
        city,
        shipping,
    )
    pm = lookup(state.payment_methods, payment_method_id, "payment method", "See list_payment_methods.")
    if pm.kind == "card" and pm.expires_on is not None and pm.expires_on < state.now.date():
        raise ToolError(
            f"{pm.label} ({pm.id}) expired on {pm.expires_on.isoformat()}; use another payment method."
        )
    if pm.kind == "gift_card" and pm.balance is not None:
        if pm.balance < quote.amount:
            raise ToolError(
                f"{pm.label} ({pm.id}) has ${pm.balance:.2f} left but the order comes to ${quote.amount:.2f}; "
                "pay with a card instead."
            )
        pm.balance = dollars(cents(pm.balance) - cents(quote.amount))
    lines = []
    for line in state.cart:
        product = state.products[line.product_id]
        if product.stock < line.quantity:
            raise ToolError(
                f"Only {product.stock} of {product.name} ({product.id}) left; lower its quantity with "
                "update_cart_item, then check out again."
            )
        product.stock -= line.quantity
        lines.append(
            OrderLine(
                product_id=product.id, name=product.name, unit_price=product.price, quantity=line.quantity
            )
        )
    order = Order(
        id=state.new_id("ord"),
        lines=lines,
        address=address.strip(),
        city=city,
        shipping=shipping,
        tax_rate=quote.tax_rate,
        subtotal=quote.subtotal,
        shipping_fee=quote.shipping_fee,
        tax=quote.tax,
        amount=quote.amount,
        email=state.shopper.email,
        payment_method_id=pm.id,
        status="placed",
        placed_at=state.now,
        estimated_delivery=_add_business_days(state.now.date(), SHIPPING[shipping][1]),
    )
    state.orders[order.id] = order
    state.cart = []
    return order


# ---------------------------------------------------------------- orders, returns, reviews


@env.tool(read_only=True)
def list_orders(state: ShopState, status: OrderStatus | None = None) -> list[Order]:
    """List the shopper's orders, newest first.

    Args:
        status: Only orders with this status: placed, shipped, delivered or cancelled; omit for all.
    """
    found = [o for o in state.orders.values() if status is None or o.status == status]
    return sorted(found, key=lambda o: (o.placed_at, o.id), reverse=True)


@env.tool(read_only=True)
def get_order(state: ShopState, order_id: Id) -> Order:
    """Get one order: its lines, charges, refunds, status, and shipping and delivery dates.

    Args:
        order_id: The order id (ord_...), from list_orders or checkout.
    """
    return _order(state, order_id)


@env.tool(destructive=True)
def cancel_order(state: ShopState, order_id: Id) -> Cancellation:
    """Cancel an order that has not shipped yet; it is refunded in full and its items go back in stock.

    Args:
        order_id: The order id (ord_...), from list_orders.
    """
    order = _order(state, order_id)
    if order.status != "placed":
        hint = {
            "cancelled": "it is already cancelled.",
            "shipped": "it has shipped. Once it is delivered, return the items with request_return.",
            "delivered": "it was delivered; return the items with request_return instead.",
        }[order.status]
        raise ToolError(f"Order {order.id} cannot be cancelled: {hint}")
    for line in order.lines:
        state.products[line.product_id].stock += line.quantity
    refund = cents(order.amount) - cents(order.refunded)
    _refund_to(state, order, refund)
    order.status, order.cancelled_at = "cancelled", state.now
    return Cancellation(order=order, refund=dollars(refund), refunded_to=order.payment_method_id)


@env.tool
def request_return(
    state: ShopState,
    order_id: Id,
    product_id: Id,
    quantity: Quantity,
    reason: Annotated[str, Field(min_length=1, max_length=500)],
) -> Return:
    """Return delivered items of an order for a refund of their price plus the tax paid on them.

    Allowed within 30 days of delivery, for products that are not final sale, up to the quantity
    delivered minus what was already returned. The refund goes to the order's payment method at
    once; the items must be shipped back within 14 days.

    Args:
        order_id: The delivered order (ord_...), from list_orders.
        product_id: The product to return (prd_...), one of the order's lines.
        quantity: How many of it to return.
        reason: Why, in the shopper's words, e.g. "Too small".
    """
    order = _order(state, order_id)
    if order.status != "delivered" or order.delivered_at is None:
        raise ToolError(
            f"Order {order.id} is {order.status}; only delivered orders can be returned"
            + (" (cancel it instead)." if order.status == "placed" else ".")
        )
    deadline = order.delivered_at + RETURN_WINDOW
    if state.now > deadline:
        raise ToolError(
            f"Order {order.id} was delivered on {order.delivered_at.date().isoformat()}; the 30-day return "
            f"window closed on {deadline.date().isoformat()}."
        )
    line = next((line for line in order.lines if line.product_id == product_id), None)
    if line is None:
        have = ", ".join(line.product_id for line in order.lines)
        raise ToolError(f"Order {order.id} has no {product_id!r}; its products are {have}.")
    if state.products[product_id].final_sale:
        raise ToolError(f"{line.name} ({product_id}) was a final-sale product and cannot be returned.")
    left = line.quantity - line.returned_quantity
    if left == 0:
        raise ToolError(f"All {line.quantity} of {line.name} from order {order.id} were already returned.")
    if quantity > left:
        raise ToolError(
            f"Only {left} of {line.name} can still be returned from order {order.id} "
            f"({line.quantity} bought, {line.returned_quantity} returned)."
        )
    items = cents(line.unit_price) * quantity
    refund = items + _tax_cents(items, order.tax_rate)
    refund = min(refund, cents(order.amount) - cents(order.refunded))
    line.returned_quantity += quantity
    _refund_to(state, order, refund)
    ret = Return(
        id=state.new_id("ret"),
        order_id=order.id,
        lines=[ReturnLine(product_id=product_id, quantity=quantity)],
        reason=reason.strip(),
        refund=dollars(refund),
        created_at=state.now,
        ship_back_by=state.now.date() + timedelta(days=14),
    )
    state.returns[ret.id] = ret
    return ret


@env.tool
def write_review(
    state: ShopState,
    product_id: Id,
    rating: Annotated[int, Field(ge=1, le=5)],
    title: Annotated[str, Field(min_length=1, max_length=120)],
    body: Annotated[str, Field(max_length=2000)] = "",
) -> Review:
    """Review a product the shopper received in a delivered order (one review per product).

    Args:
        product_id: The product id (prd_...), from a delivered order (get_order).
        rating: Stars from 1 (poor) to 5 (excellent).
        title: A short headline, e.g. "Great sound, short battery life".
        body: The review text (optional).
    """
    product = _product(state, product_id)
    delivered = any(
        o.status == "delivered" and any(line.product_id == product.id for line in o.lines)
        for o in state.orders.values()
    )
    if not delivered:
        raise ToolError(
            f"{product.name} ({product.id}) is not in any delivered order of the shopper; only received "
            "products can be reviewed."
        )
    existing = next((r for r in state.reviews.values() if r.by_shopper and r.product_id == product.id), None)
    if existing is not None:
        raise ToolError(f"The shopper already reviewed {product.id} ({existing.id}).")
    if not title.strip():
        raise ToolError("The title is blank; give the review a short headline.")
    review = Review(
        id=state.new_id("rev"),
        product_id=product.id,
        author=state.shopper.name,
        rating=rating,
        title=title.strip(),
        body=body.strip(),
        created_at=state.now,
        verified_purchase=True,
        by_shopper=True,
    )
    state.reviews[review.id] = review
    return review
