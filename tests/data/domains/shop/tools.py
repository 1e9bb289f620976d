"""Tool code of the hand-written `shop` fixture domain (follows docs/ARCHITECTURE.md's contract)."""

from envs.toolkit import ToolError


def get_user(db, user_id: str) -> dict:
    user = db.get("users", user_id=user_id)
    if user is None:
        raise ToolError(f"user {user_id} not found")
    return user


def find_products(db, query: str, max_price: float | None = None) -> list:
    rows = [p for p in db.select("products", order_by="product_id") if query.lower() in p["name"].lower()]
    if max_price is not None:
        rows = [p for p in rows if p["price"] <= max_price]
    return rows


def get_order(db, order_id: str) -> dict:
    order = db.get("orders", order_id=order_id)
    if order is None:
        raise ToolError(f"order {order_id} not found")
    return order


def list_user_orders(db, user_id: str) -> list:
    if db.get("users", user_id=user_id) is None:
        raise ToolError(f"user {user_id} not found")
    return db.select("orders", {"user_id": user_id}, order_by="order_id")


def place_order(db, user_id: str, product_id: str, quantity: int = 1) -> dict:
    user = db.get("users", user_id=user_id)
    if user is None:
        raise ToolError(f"user {user_id} not found")
    product = db.get("products", product_id=product_id)
    if product is None:
        raise ToolError(f"product {product_id} not found")
    if product["stock"] < quantity:
        raise ToolError(f"only {product['stock']} of {product_id} in stock")
    total = round(product["price"] * quantity, 2)
    if user["balance"] < total:
        raise ToolError("insufficient balance")
    order = {"order_id": db.new_id("orders", "o"), "user_id": user_id, "product_id": product_id,
             "quantity": quantity, "status": "placed", "total": total, "created_at": db.now()}
    db.insert("orders", order)
    db.update("products", {"product_id": product_id}, {"stock": product["stock"] - quantity})
    db.update("users", {"user_id": user_id}, {"balance": round(user["balance"] - total, 2)})
    return order


def cancel_order(db, order_id: str) -> dict:
    order = db.get("orders", order_id=order_id)
    if order is None:
        raise ToolError(f"order {order_id} not found")
    if order["status"] != "placed":
        raise ToolError(f"order {order_id} is {order['status']} and cannot be cancelled")
    user = db.get("users", user_id=order["user_id"])
    product = db.get("products", product_id=order["product_id"])
    db.update("orders", {"order_id": order_id}, {"status": "cancelled"})
    db.update("products", {"product_id": order["product_id"]}, {"stock": product["stock"] + order["quantity"]})
    db.update("users", {"user_id": order["user_id"]}, {"balance": round(user["balance"] + order["total"], 2)})
    return db.get("orders", order_id=order_id)


def update_email(db, user_id: str, email: str) -> dict:
    if "@" not in email:
        raise ToolError(f"invalid email {email!r}")
    if db.update("users", {"user_id": user_id}, {"email": email}) == 0:
        raise ToolError(f"user {user_id} not found")
    return db.get("users", user_id=user_id)
