"""recipes: a recipe book with a pantry, a meal plan and shopping lists generated from the plan.

Every ingredient has one unit (grams, millilitres or pieces), an aisle, and flags (meat, fish, dairy,
egg, honey, gluten) from which the diet tags of the recipes are checked: a recipe tagged "vegan" holds
no animal product, "gluten_free" no gluten, and so on. Quantities in recipes are for the recipe's own
number of servings; the meal plan scales them. A shopping list adds up the planned meals of a date range,
takes off what is in the pantry (optional) and rounds up to whole grams, millilitres or pieces.
"""

from __future__ import annotations

import math
from datetime import date, timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NaiveDatetime, model_validator

from envreg.env import Environment, EnvState, ToolError, fold, id_problems, lookup, matches

Unit = Literal["g", "ml", "piece"]
Aisle = Literal["produce", "dairy", "meat", "seafood", "bakery", "pantry", "spices", "frozen", "drinks"]
Diet = Literal["vegetarian", "vegan", "gluten_free", "dairy_free"]
Meal = Literal["breakfast", "lunch", "dinner", "snack"]
Flag = Literal["meat", "fish", "dairy", "egg", "honey", "gluten"]

Id = Annotated[str, Field(max_length=64)]
IngredientName = Annotated[str, Field(min_length=1, max_length=60)]
Quantity = Annotated[float, Field(gt=0, le=100_000)]

MEAL_ORDER = {"breakfast": 0, "lunch": 1, "dinner": 2, "snack": 3}
FORBIDDEN: dict[str, frozenset[str]] = {
    "vegetarian": frozenset({"meat", "fish"}),
    "vegan": frozenset({"meat", "fish", "dairy", "egg", "honey"}),
    "gluten_free": frozenset({"gluten"}),
    "dairy_free": frozenset({"dairy"}),
}
PLAN_HORIZON_DAYS = 60
MAX_RANGE_DAYS = 31
MAX_PLAN_ENTRIES = 500
MAX_LISTS = 100


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Ingredient(_Model):
    """An ingredient in the lookup table."""

    name: IngredientName
    unit: Unit
    aisle: Aisle
    flags: Annotated[list[Flag], Field(max_length=6)] = Field(default_factory=list)


class RecipeIngredient(_Model):
    ingredient: IngredientName
    quantity: Quantity = Field(description="In the ingredient's unit, for the recipe's servings.")


class Recipe(_Model):
    id: Annotated[str, Field(pattern=r"^rcp_\d{4,}$", max_length=64)]
    title: Annotated[str, Field(min_length=1, max_length=200)]
    cuisine: Annotated[str, Field(min_length=1, max_length=40)]
    meal_types: Annotated[list[Meal], Field(min_length=1, max_length=4)]
    diets: Annotated[list[Diet], Field(max_length=4)] = Field(default_factory=list)
    servings: int = Field(ge=1, le=50)
    prep_minutes: int = Field(ge=0, le=1440)
    cook_minutes: int = Field(ge=0, le=1440)
    calories_per_serving: int = Field(ge=0, le=5000)
    ingredients: Annotated[list[RecipeIngredient], Field(min_length=1, max_length=40)]
    steps: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=1000)]], Field(min_length=1, max_length=30)
    ]
    rating_count: int = Field(default=0, ge=0, description="How many ratings, the user's included.")
    rating_sum: int = Field(default=0, ge=0)
    my_rating: int | None = Field(default=None, ge=1, le=5, description="The user's own rating.")

    @model_validator(mode="after")
    def _ratings(self) -> Recipe:
        if not self.rating_count <= self.rating_sum <= 5 * self.rating_count:
            raise ValueError(
                f"recipe {self.id}: rating_sum {self.rating_sum} is impossible for {self.rating_count} ratings"
            )
        if self.my_rating is not None and self.rating_count == 0:
            raise ValueError(f"recipe {self.id}: my_rating is set but rating_count is 0")
        names = [i.ingredient for i in self.ingredients]
        if len(set(names)) != len(names):
            raise ValueError(f"recipe {self.id}: an ingredient is listed twice")
        return self


class PlanEntry(_Model):
    id: Annotated[str, Field(pattern=r"^mpl_\d{4,}$", max_length=64)]
    date: date
    meal: Meal
    recipe_id: Id
    servings: int = Field(ge=1, le=50)


class ListItem(_Model):
    ingredient: IngredientName
    quantity: float = Field(gt=0, le=1_000_000_000, description="Rounded up, in the ingredient's unit.")
    unit: Unit
    aisle: Aisle
    checked: bool = False


class ShoppingList(_Model):
    id: Annotated[str, Field(pattern=r"^shl_\d{4,}$", max_length=64)]
    name: Annotated[str, Field(min_length=1, max_length=100)]
    start_date: date
    end_date: date
    created_at: NaiveDatetime
    used_pantry: bool
    items: Annotated[list[ListItem], Field(min_length=1, max_length=300)]

    @model_validator(mode="after")
    def _check(self) -> ShoppingList:
        if self.end_date < self.start_date:
            raise ValueError(f"shopping list {self.id} ends before it starts")
        names = [i.ingredient for i in self.items]
        if len(set(names)) != len(names):
            raise ValueError(f"shopping list {self.id}: an ingredient is listed twice")
        return self


class RecipesState(EnvState):
    """The recipe book, the ingredient table, the pantry, the meal plan and shopping lists."""

    ingredients: dict[str, Ingredient] = Field(default_factory=dict, max_length=2000)
    recipes: dict[str, Recipe] = Field(default_factory=dict, max_length=2000)
    pantry: dict[str, Quantity] = Field(
        default_factory=dict, max_length=2000, description="Ingredient name -> quantity on hand (its unit)."
    )
    meal_plan: dict[str, PlanEntry] = Field(default_factory=dict, max_length=MAX_PLAN_ENTRIES)
    shopping_lists: dict[str, ShoppingList] = Field(default_factory=dict, max_length=MAX_LISTS)

    @model_validator(mode="after")
    def _integrity(self) -> RecipesState:
        problems = id_problems(self, {"rcp": self.recipes, "mpl": self.meal_plan, "shl": self.shopping_lists})
        for key, ing in self.ingredients.items():
            if key != ing.name:
                problems.append(f"ingredients: key {key!r} holds {ing.name!r}")
        for recipe in self.recipes.values():
            flags: set[str] = set()
            for item in recipe.ingredients:
                ing = self.ingredients.get(item.ingredient)
                if ing is None:
                    problems.append(f"recipe {recipe.id} uses unknown ingredient {item.ingredient!r}")
                else:
                    flags |= set(ing.flags)
            for diet in recipe.diets:
                clash = sorted(flags & FORBIDDEN[diet])
                if clash:
                    problems.append(f"recipe {recipe.id} is tagged {diet} but contains {', '.join(clash)}")
        for name in self.pantry:
            if name not in self.ingredients:
                problems.append(f"pantry holds unknown ingredient {name!r}")
        slots: dict[tuple[date, str], str] = {}
        for entry in self.meal_plan.values():
            if entry.recipe_id not in self.recipes:
                problems.append(f"meal plan entry {entry.id} uses unknown recipe {entry.recipe_id}")
            slot = (entry.date, entry.meal)
            if slot in slots:
                problems.append(
                    f"meal plan entries {slots[slot]} and {entry.id} are both {entry.meal} on {entry.date}"
                )
            slots[slot] = entry.id
        for sl in self.shopping_lists.values():
            if sl.created_at > self.now:
                problems.append(f"shopping list {sl.id} is created in the future")
            for item in sl.items:
                ing = self.ingredients.get(item.ingredient)
                if ing is None:
                    problems.append(f"shopping list {sl.id} holds unknown ingredient {item.ingredient!r}")
                elif (item.unit, item.aisle) != (ing.unit, ing.aisle):
                    problems.append(
                        f"shopping list {sl.id}: {item.ingredient} must be in {ing.unit}, aisle {ing.aisle}"
                    )
        if problems:
            raise ValueError("; ".join(problems))
        return self


# ---- results ------------------------------------------------------------------------------------------


class RecipeSummary(_Model):
    id: str
    title: str
    cuisine: str
    meal_types: list[Meal]
    diets: list[Diet]
    total_minutes: int
    servings: int
    calories_per_serving: int
    rating: float | None = Field(description="Average rating (1-5, one decimal); null when unrated.")
    rating_count: int
    my_rating: int | None


class Amount(_Model):
    ingredient: str
    quantity: float
    unit: Unit


class RecipeView(RecipeSummary):
    prep_minutes: int
    cook_minutes: int
    ingredients: list[Amount]
    steps: list[str]


class ScaledRecipe(_Model):
    recipe_id: str
    title: str
    servings: int
    ingredients: list[Amount]
    calories_per_serving: int


class PantryItem(_Model):
    ingredient: str
    quantity: float
    unit: Unit
    aisle: Aisle


class PlanEntryView(PlanEntry):
    title: str


class ShoppingListView(ShoppingList):
    remaining: int = Field(description="Items not checked off yet.")


env = Environment(
    "recipes",
    RecipesState,
    version="1.0.0",
    domain="lifestyle",
    description=(
        "A recipe book: search recipes by cuisine, diet and time, scale them, rate them, keep a pantry, "
        "plan meals by date, and generate shopping lists from the plan minus the pantry, grouped by aisle."
    ),
)


# ---- helpers ------------------------------------------------------------------------------------------


def _recipe(state: RecipesState, recipe_id: str) -> Recipe:
    return lookup(state.recipes, recipe_id, "recipe", "Find recipes with search_recipes.")


def _ingredient(state: RecipesState, name: str) -> Ingredient:
    key = fold(name.strip())
    for ing in state.ingredients.values():
        if fold(ing.name) == key:
            return ing
    close = sorted(i.name for i in state.ingredients.values() if matches(name, i.name))
    hint = (
        f" Did you mean: {', '.join(close[:5])}?"
        if close
        else " Ingredient names are like 'garlic clove' or 'olive oil'."
    )
    raise ToolError(f"Unknown ingredient {name!r}.{hint}")


def _rating(recipe: Recipe) -> float | None:
    return round(recipe.rating_sum / recipe.rating_count, 1) if recipe.rating_count else None


def _summary(recipe: Recipe) -> RecipeSummary:
    return RecipeSummary(
        id=recipe.id,
        title=recipe.title,
        cuisine=recipe.cuisine,
        meal_types=recipe.meal_types,
        diets=recipe.diets,
        total_minutes=recipe.prep_minutes + recipe.cook_minutes,
        servings=recipe.servings,
        calories_per_serving=recipe.calories_per_serving,
        rating=_rating(recipe),
        rating_count=recipe.rating_count,
        my_rating=recipe.my_rating,
    )


def _round(quantity: float, unit: str) -> float:
    return round(quantity, 2) if unit == "piece" else round(quantity, 1)


def _check_range(start_date: date, end_date: date) -> None:
    if end_date < start_date:
        raise ToolError(f"end_date {end_date.isoformat()} is before start_date {start_date.isoformat()}.")
    if (end_date - start_date).days + 1 > MAX_RANGE_DAYS:
        raise ToolError(f"At most {MAX_RANGE_DAYS} days at once; narrow the range.")


def _list_view(sl: ShoppingList) -> ShoppingListView:
    return ShoppingListView(**sl.model_dump(), remaining=sum(not i.checked for i in sl.items))


def _shopping_list(state: RecipesState, list_id: str) -> ShoppingList:
    return lookup(state.shopping_lists, list_id, "shopping list", "Create one with create_shopping_list.")


# ---- tools --------------------------------------------------------------------------------------------


@env.tool(read_only=True)
def search_recipes(
    state: RecipesState,
    query: Annotated[str, Field(max_length=200)] = "",
    cuisine: Annotated[str, Field(max_length=40)] | None = None,
    diet: Diet | None = None,
    meal: Meal | None = None,
    max_minutes: Annotated[int, Field(ge=1, le=1440)] | None = None,
    limit: Annotated[int, Field(ge=1, le=50)] = 10,
) -> list[RecipeSummary]:
    """Search recipes by words in the title or ingredients, cuisine, diet, meal and total time; best rated first.

    Args:
        query: Words to look for in the title or an ingredient, e.g. "curry" or "salmon"; "" for all.
        cuisine: Only this cuisine, e.g. "Italian", "Indian", "Mexican" (case is ignored).
        diet: Only recipes suitable for "vegetarian", "vegan", "gluten_free" or "dairy_free".
        meal: Only recipes for "breakfast", "lunch", "dinner" or "snack".
        max_minutes: Only recipes ready (prep plus cooking) within this many minutes.
        limit: The most results to return (1-50, default 10).
    """
    found = [
        r
        for r in state.recipes.values()
        if matches(query, r.title, *(i.ingredient for i in r.ingredients))
        and (cuisine is None or fold(r.cuisine) == fold(cuisine.strip()))
        and (diet is None or diet in r.diets)
        and (meal is None or meal in r.meal_types)
        and (max_minutes is None or r.prep_minutes + r.cook_minutes <= max_minutes)
    ]
    found.sort(key=lambda r: (-(_rating(r) or 0), fold(r.title), r.id))
    return [_summary(r) for r in found[:limit]]


@env.tool(read_only=True)
def get_recipe(state: RecipesState, recipe_id: Id) -> RecipeView:
    """Get a recipe: ingredients with quantities and units (for its servings), steps, times and rating.

    Args:
        recipe_id: The recipe's id, e.g. "rcp_0003" (from search_recipes).
    """
    recipe = _recipe(state, recipe_id)
    return RecipeView(
        **_summary(recipe).model_dump(),
        prep_minutes=recipe.prep_minutes,
        cook_minutes=recipe.cook_minutes,
        ingredients=[
            Amount(ingredient=i.ingredient, quantity=i.quantity, unit=state.ingredients[i.ingredient].unit)
            for i in recipe.ingredients
        ],
        steps=recipe.steps,
    )


@env.tool(read_only=True)
def scale_recipe(
    state: RecipesState, recipe_id: Id, servings: Annotated[int, Field(ge=1, le=50)]
) -> ScaledRecipe:
    """Scale a recipe's ingredient quantities to another number of servings.

    Args:
        recipe_id: The recipe, e.g. "rcp_0001".
        servings: How many servings to make (1-50).
    """
    recipe = _recipe(state, recipe_id)
    factor = servings / recipe.servings
    amounts = []
    for item in recipe.ingredients:
        unit = state.ingredients[item.ingredient].unit
        amounts.append(
            Amount(ingredient=item.ingredient, quantity=_round(item.quantity * factor, unit), unit=unit)
        )
    return ScaledRecipe(
        recipe_id=recipe.id,
        title=recipe.title,
        servings=servings,
        ingredients=amounts,
        calories_per_serving=recipe.calories_per_serving,
    )


@env.tool(idempotent=True)
def rate_recipe(
    state: RecipesState, recipe_id: Id, stars: Annotated[int, Field(ge=1, le=5)]
) -> RecipeSummary:
    """Rate a recipe from 1 to 5 stars; rating it again replaces your earlier rating.

    Args:
        recipe_id: The recipe, e.g. "rcp_0002".
        stars: 1 (poor) to 5 (excellent).
    """
    recipe = _recipe(state, recipe_id)
    if recipe.my_rating is None:
        recipe.rating_count += 1
    else:
        recipe.rating_sum -= recipe.my_rating
    recipe.rating_sum += stars
    recipe.my_rating = stars
    return _summary(recipe)


@env.tool(read_only=True)
def list_pantry(state: RecipesState) -> list[PantryItem]:
    """List what is in the pantry, by aisle and name, with quantities in each ingredient's unit."""
    items = [
        PantryItem(
            ingredient=name,
            quantity=qty,
            unit=state.ingredients[name].unit,
            aisle=state.ingredients[name].aisle,
        )
        for name, qty in state.pantry.items()
    ]
    return sorted(items, key=lambda i: (i.aisle, i.ingredient))


@env.tool(idempotent=True)
def set_pantry_item(
    state: RecipesState, ingredient: IngredientName, quantity: Annotated[float, Field(ge=0, le=100_000)]
) -> PantryItem:
    """Set how much of an ingredient is in the pantry; 0 removes it.

    Args:
        ingredient: The ingredient's name, e.g. "basmati rice" (case is ignored).
        quantity: The amount on hand in the ingredient's unit (grams, millilitres or pieces; see
            list_pantry), rounded to 2 decimals.
    """
    ing = _ingredient(state, ingredient)
    quantity = round(quantity, 2)
    if quantity == 0:
        state.pantry.pop(ing.name, None)
    else:
        state.pantry[ing.name] = quantity
    return PantryItem(ingredient=ing.name, quantity=quantity, unit=ing.unit, aisle=ing.aisle)


@env.tool
def add_to_meal_plan(
    state: RecipesState,
    date: date,
    meal: Meal,
    recipe_id: Id,
    servings: Annotated[int, Field(ge=1, le=50)] | None = None,
) -> PlanEntryView:
    """Plan a recipe for a meal on a day (today up to 60 days ahead). Each meal of a day holds one recipe.

    Args:
        date: The day, e.g. "2026-01-07".
        meal: "breakfast", "lunch", "dinner" or "snack".
        recipe_id: The recipe, e.g. "rcp_0008".
        servings: How many servings to cook; omit for the recipe's own number.
    """
    recipe = _recipe(state, recipe_id)
    today = state.now.date()
    if date < today:
        raise ToolError(f"{date.isoformat()} is in the past; today is {today.isoformat()}.")
    if date > today + timedelta(days=PLAN_HORIZON_DAYS):
        raise ToolError(f"Meals can be planned at most {PLAN_HORIZON_DAYS} days ahead.")
    for entry in state.meal_plan.values():
        if entry.date == date and entry.meal == meal:
            taken = state.recipes[entry.recipe_id].title
            raise ToolError(
                f"{meal.capitalize()} on {date.isoformat()} is already {taken!r} ({entry.id}); "
                "remove it with remove_from_meal_plan first."
            )
    if len(state.meal_plan) >= MAX_PLAN_ENTRIES:
        raise ToolError(f"The meal plan holds at most {MAX_PLAN_ENTRIES} entries.")
    entry = PlanEntry(
        id=state.new_id("mpl"),
        date=date,
        meal=meal,
        recipe_id=recipe.id,
        servings=servings or recipe.servings,
    )
    state.meal_plan[entry.id] = entry
    return PlanEntryView(**entry.model_dump(), title=recipe.title)


@env.tool(read_only=True)
def get_meal_plan(state: RecipesState, start_date: date, end_date: date) -> list[PlanEntryView]:
    """List the planned meals between two days (inclusive, at most 31 days), by day and meal.

    Args:
        start_date: The first day, e.g. "2026-01-05".
        end_date: The last day, e.g. "2026-01-11".
    """
    _check_range(start_date, end_date)
    entries = [e for e in state.meal_plan.values() if start_date <= e.date <= end_date]
    entries.sort(key=lambda e: (e.date, MEAL_ORDER[e.meal]))
    return [PlanEntryView(**e.model_dump(), title=state.recipes[e.recipe_id].title) for e in entries]


@env.tool(destructive=True)
def remove_from_meal_plan(state: RecipesState, entry_id: Id) -> PlanEntryView:
    """Remove a planned meal.

    Args:
        entry_id: The meal plan entry, e.g. "mpl_0002" (from get_meal_plan).
    """
    entry = lookup(state.meal_plan, entry_id, "meal plan entry", "List them with get_meal_plan.")
    del state.meal_plan[entry.id]
    return PlanEntryView(**entry.model_dump(), title=state.recipes[entry.recipe_id].title)


@env.tool
def create_shopping_list(
    state: RecipesState,
    start_date: date,
    end_date: date,
    use_pantry: bool = True,
    name: Annotated[str, Field(min_length=1, max_length=100)] | None = None,
) -> ShoppingListView:
    """Make a shopping list for the meals planned between two days, grouped by aisle.

    Quantities are the planned recipes scaled to their servings and added up; with use_pantry, what is
    in the pantry is taken off. Amounts are rounded up to whole grams, millilitres or pieces.

    Args:
        start_date: The first day of meals to shop for, e.g. "2026-01-05".
        end_date: The last day (inclusive; at most 31 days).
        use_pantry: Take off what the pantry already holds (default true).
        name: A name for the list; omit for "Meals <start> to <end>".
    """
    _check_range(start_date, end_date)
    entries = sorted(
        (e for e in state.meal_plan.values() if start_date <= e.date <= end_date),
        key=lambda e: (e.date, e.id),
    )
    if not entries:
        raise ToolError(
            f"No meals are planned from {start_date.isoformat()} to {end_date.isoformat()}; "
            "plan some with add_to_meal_plan first."
        )
    need: dict[str, float] = {}
    for entry in entries:
        recipe = state.recipes[entry.recipe_id]
        factor = entry.servings / recipe.servings
        for item in recipe.ingredients:
            need[item.ingredient] = need.get(item.ingredient, 0.0) + item.quantity * factor
    items = []
    for ingredient, quantity in need.items():
        if use_pantry:
            quantity -= state.pantry.get(ingredient, 0.0)
        amount = math.ceil(round(quantity, 6))
        if amount > 0:
            ing = state.ingredients[ingredient]
            items.append(ListItem(ingredient=ingredient, quantity=amount, unit=ing.unit, aisle=ing.aisle))
    if not items:
        raise ToolError("The pantry already holds everything these meals need; there is nothing to buy.")
    if len(state.shopping_lists) >= MAX_LISTS:
        raise ToolError(f"At most {MAX_LISTS} shopping lists are kept.")
    items.sort(key=lambda i: (i.aisle, i.ingredient))
    sl = ShoppingList(
        id=state.new_id("shl"),
        name=(name or "").strip() or f"Meals {start_date.isoformat()} to {end_date.isoformat()}",
        start_date=start_date,
        end_date=end_date,
        created_at=state.now,
        used_pantry=use_pantry,
        items=items,
    )
    state.shopping_lists[sl.id] = sl
    return _list_view(sl)


@env.tool(read_only=True)
def get_shopping_list(state: RecipesState, list_id: Id) -> ShoppingListView:
    """Get a shopping list with its items by aisle and what is still to buy.

    Args:
        list_id: The list's id, e.g. "shl_0002" (from create_shopping_list).
    """
    return _list_view(_shopping_list(state, list_id))


@env.tool(idempotent=True)
def check_shopping_item(
    state: RecipesState, list_id: Id, ingredient: IngredientName, checked: bool = True
) -> ShoppingListView:
    """Check an item off a shopping list (or uncheck it).

    Args:
        list_id: The list, e.g. "shl_0002".
        ingredient: The item's ingredient name, e.g. "red lentils" (case is ignored).
        checked: True to check it off (default), false to uncheck it.
    """
    sl = _shopping_list(state, list_id)
    for item in sl.items:
        if fold(item.ingredient) == fold(ingredient.strip()):
            item.checked = checked
            return _list_view(sl)
    raise ToolError(
        f"{ingredient!r} is not on shopping list {sl.id}; it has: {', '.join(i.ingredient for i in sl.items)}."
    )
