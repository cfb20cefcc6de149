"""Settings of the bare reference view (`bench.bare`): the gateway's database and apps, no middleware."""

from gateway.settings import *  # noqa: F401,F403

MIDDLEWARE: list[str] = []
ROOT_URLCONF = "bench.bare"
