"""An MCP server over stdio whose tool asks its client for input (elicitation), for the proxy's tests:
`python eliciting_mcp_server.py`. `book_room` asks which room and for how many people — as an
`InputRequiredResult` on the 2026-07-28 protocol, as an `elicitation/create` request on older ones (the
SDK's resolvers follow the negotiated version) — and answers with what it was given, or the action taken
when the form was declined or cancelled."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver import Elicit, MCPServer, Resolve

server = MCPServer(name="rooms")


class Booking(BaseModel):
    room: str = Field(json_schema_extra={"enum": ["Lovelace", "Hopper"]}, title="Room")
    people: int = Field(ge=1, le=20, title="People")
    projector: bool = Field(default=False, title="Projector")


def ask_booking(day: str) -> Elicit[Booking]:
    return Elicit(f"Which room on {day}, for how many people?", Booking)


@server.tool()
async def book_room(day: str, booking: Annotated[ElicitationResult[Booking], Resolve(ask_booking)]) -> str:
    """Book a meeting room for `day`; asks which room and for how many people."""
    if booking.action != "accept":
        return f"not booked: {booking.action}"
    data = booking.data
    return f"booked {data.room} on {day} for {data.people} (projector: {'yes' if data.projector else 'no'})"


if __name__ == "__main__":
    server.run("stdio")
