"""A tiny tau2-style toolkit (fixture: parsed with ast by tasks.corpus.loaders, never imported)."""

from typing import List, Optional

from tau2.domains.shop.data_model import Order, OrderStatus
from tau2.environment.toolkit import ToolKitBase, ToolType, is_tool

raise RuntimeError("this module must never be imported")


class ShopTools(ToolKitBase):
    """All the tools for the shop domain."""

    def _get_order(self, order_id: str) -> Order:
        """Helper, not a tool."""
        return self.db.orders[order_id]

    @is_tool(ToolType.READ)
    def get_order_details(self, order_id: str) -> Order:
        """
        Get the details of an order.

        Args:
            order_id: The order id, such as '#W0000000'.

        Returns:
            The order details.
        """
        return self._get_order(order_id)

    @is_tool(ToolType.WRITE)
    def cancel_order(self, order_id: str, reason: OrderStatus, item_ids: List[str], notify: bool = True,
                     note: Optional[str] = None) -> Order:
        """Cancel a pending order.

        Args:
            order_id: The order id.
            reason: Why the order is cancelled; a long
                explanation continues on this line.
            item_ids: Items to cancel.
            notify: Whether to notify the user.
            note: An optional note.
        """
        return self._get_order(order_id)

    @is_tool(ToolType.GENERIC)
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the user to a human agent, with a summary of the issue.

        Args:
            summary: A summary of the user's issue.
        """
        return "Transfer successful"
