# `make run`  — the whole gateway on embedded defaults (SQLite in var/, no broker or cache to install).
# `make test` — the whole suite against the real PostgreSQL and Redis of this machine.
# `make dist` — the wheels and sdists (server, Python client) and the TypeScript client's tarball, into dist/.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
INTEGRATIONS_STAMP := $(VENV)/.installed-integrations
CHANNELS_STAMP := $(VENV)/.installed-channels
OTEL_STAMP := $(VENV)/.installed-otel

TEST_ENV := DATABASE_URL=$${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/gateway} \
	REDIS_URL=$${TEST_REDIS_URL:-redis://127.0.0.1:6379/0} \
	CELERY_BROKER_URL=$${TEST_CELERY_BROKER_URL:-redis://127.0.0.1:6379/5} \
	GATEWAY_VAR_DIR=$(CURDIR)/var/test

.PHONY: install install-integrations install-channels install-otel run test bench migrate dist
install: $(STAMP)

$(STAMP): requirements.txt clients/python/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q -e clients/python
	touch $(STAMP)

# The agent frameworks the integration tests drive (not the gateway's own requirements).
install-integrations: $(INTEGRATIONS_STAMP)

$(INTEGRATIONS_STAMP): $(STAMP) requirements-integrations.txt
	$(PY) -m pip install -q -r requirements-integrations.txt
	touch $(INTEGRATIONS_STAMP)

# The vendor SDKs of the optional channel kinds (a deployment installs the ones its channels use).
install-channels: $(CHANNELS_STAMP)

$(CHANNELS_STAMP): $(STAMP) requirements-channels.txt
	$(PY) -m pip install -q -r requirements-channels.txt
	touch $(CHANNELS_STAMP)

# OpenTelemetry's SDK and OTLP exporter, for traces (optional: docs/operating.md, "Traces").
install-otel: $(OTEL_STAMP)

$(OTEL_STAMP): $(STAMP) requirements-otel.txt
	$(PY) -m pip install -q -r requirements-otel.txt
	touch $(OTEL_STAMP)

migrate: install
	$(PY) manage.py migrate --noinput

run: install
	$(PY) scripts/run.py

test: install install-integrations install-channels install-otel
	bash scripts/ensure-services.sh
	bash scripts/ensure-browser.sh
	bash scripts/ensure-oidc-provider.sh
	bash scripts/ensure-promtool.sh
	bash scripts/ensure-node-client.sh
	$(TEST_ENV) $(PY) -m pytest -n $${PYTEST_WORKERS:-4} $(PYTEST_ARGS)

bench: install
	bash scripts/ensure-services.sh
	$(PY) bench/run.py

dist: install
	PY=$(PY) bash scripts/dist.sh
