"""The gateway's version: the one place it is written (the build reads it, docs/reference/api.md,
"Versions"). Every HTTP answer carries it in `X-Gateway-Version`, and `GET /api/v1/` names it."""

__version__ = "0.4.0"
