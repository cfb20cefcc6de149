"""The gateway's own settings, plus the benchmark's URLs (a minimal view to compare with)."""

from gateway.settings import *  # noqa: F401,F403

ROOT_URLCONF = "bench.urls"
