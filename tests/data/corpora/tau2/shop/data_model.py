"""A tiny tau2-style data model (fixture: parsed with ast by tasks.corpus.loaders, never imported)."""

from typing import Literal, Optional

from pydantic import BaseModel, Field

OrderStatus = Literal["pending", "delivered", "cancelled"]


class Item(BaseModel):
    item_id: str = Field(description="Unique item id")
    price: float = Field(description="Unit price")


class Order(BaseModel):
    order_id: str = Field(description="Unique order id")
    status: OrderStatus = Field(description="Order status")
    items: list[Item] = Field(description="Items in the order")
    note: Optional[str] = Field(None, description="Free-text note")
