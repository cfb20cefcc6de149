"""The fakes Teams tests talk to (tests/fakes/teams_api.py)."""

from tests.fakes.teams_api import fake_teams  # noqa: F401 - a fixture
