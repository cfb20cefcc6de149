"""The Celery app `gateway` (`celery -A gateway worker`, `celery -A gateway beat`)."""

import os

from celery import Celery

from gateway import tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway.settings")

app = Celery("gateway")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
tracing.configure()  # off unless OTEL_* variables ask for traces
