"""What `manage.py channel_connections` processes report about the connections they hold.

`/readyz` is served by another process: it reads these rows to show each
connection's state (gateway/health.py). A row whose heartbeat is older than
three heartbeat intervals belongs to a process that is gone.
"""

from __future__ import annotations

from django.db import models


class ConnectionState(models.TextChoices):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    FAILED = "failed"
    STOPPED = "stopped"


class ChannelConnection(models.Model):
    """One process's connection for one channel (Slack Socket Mode, Feishu long connection), as last reported."""

    channel = models.CharField(max_length=64, db_index=True)
    process = models.CharField(max_length=200, help_text="host:pid of the channel_connections process")
    mode = models.CharField(max_length=20)
    state = models.CharField(max_length=20, choices=ConnectionState.choices)
    detail = models.TextField(blank=True, help_text="One sentence about the state (never a secret).")
    since = models.DateTimeField(help_text="When the connection entered this state.")
    heartbeat_at = models.DateTimeField()
    heartbeat_seconds = models.FloatField(help_text="How often the process reports.")

    class Meta:
        ordering = ["channel", "process"]
        constraints = [models.UniqueConstraint(fields=["channel", "process"], name="uniq_channel_connection")]

    def __str__(self) -> str:
        return f"{self.channel} via {self.process}: {self.state}"
