"""Start-up work of a server process: refuse the development audit key outside development, and apply
`GATEWAY_CONFIG` if set (docs/reference/environment.md)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError

from approvals import services
from approvals.config_schema import load_config_file
from gateway_utils.configfile import ConfigError

logger = logging.getLogger("gateway")


def check_audit_key() -> None:
    """Refuse to serve on the published development audit key (`approvals.E001`, docs/audit.md)."""
    from approvals.checks import audit_key_check

    errors = audit_key_check()
    if errors:
        raise ImproperlyConfigured(f"{errors[0].msg} {errors[0].hint}")


def apply_startup_config() -> None:
    """Apply the config file named by GATEWAY_CONFIG; a bad file stops the process.

    Several processes may start at once: applying is idempotent and
    transactional, so the loser of a first-time insert race simply applies again.
    """
    path = settings.GATEWAY_CONFIG
    if not path:
        return
    try:
        config = load_config_file(path)
    except ConfigError as exc:
        raise ImproperlyConfigured(f"GATEWAY_CONFIG {path} is not valid:\n{exc}") from None
    for attempt in range(3):
        try:
            summary = services.config_apply(config=config, source=f"GATEWAY_CONFIG {path}")
            break
        except IntegrityError:
            if attempt == 2:
                raise
    logger.info("applied %s: %s", path, "; ".join(summary.lines()))
