# The app image for docker-compose.yml: one image, run as migrate, web, worker or beat.
# Base images are pinned to a release (tests/test_deployment_files.py refuses a floating tag);
# raise them on purpose, in a commit of their own.

# The dashboards' browser assets (Chart.js, Luxon and its Chart.js adapter) from npm, pinned by package-lock.json; only their
# files reach the app image, not Node.
FROM node:20.19.4-bookworm-slim AS assets
WORKDIR /assets
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund

FROM python:3.11.13-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    AGENT_MEMORY_DATA_DIR=/data \
    # Collected at build (below), inside the image: an upgrade serves its own files.
    STATIC_ROOT=/app/static-collected \
    # The local embedding model re-quantized at build (below), not by each container at start.
    EMBEDDING_MODEL_DIR=/app/models

WORKDIR /app

# Dependencies first, in their own layer, so a code change does not reinstall them: the
# production lock, every file hash-checked. It leaves out the embedded PostgreSQL and Redis
# (the `embedded` extra) and the dev tools; the project declares no importable packages (the
# apps run from /app), so nothing else is installed for it.
COPY requirements/production.txt requirements/production.txt
RUN pip install --require-hashes --no-deps -r requirements/production.txt

COPY . .
# The Python client (ledgered-memory), which `manage.py mcp` and `ledgered-memory-mcp` run the
# MCP server with (its httpx and mcp are dependencies of the project, installed above).
RUN pip install --no-deps ./clients/python
# settings.STATICFILES_DIRS serves them from here.
COPY --from=assets /assets/node_modules/chart.js/dist ./node_modules/chart.js/dist
COPY --from=assets /assets/node_modules/luxon/build/global ./node_modules/luxon/build/global
COPY --from=assets /assets/node_modules/chartjs-adapter-luxon/dist ./node_modules/chartjs-adapter-luxon/dist
# Static files, hashed and compressed (WhiteNoise's manifest storage). The settings need a
# secret key and a database only to load: neither is used nor kept in the image.
RUN SECRET_KEY=collectstatic-only DATABASE_URL=postgresql://build@localhost/build \
    AGENT_MEMORY_DATA_DIR=/tmp/build-data \
    python manage.py collectstatic --noinput --verbosity 0 \
    && python manage.py embedder_prepare \
    && rm -rf /tmp/build-data

# /data is the app-data volume: the generated secret key, the ledger's signed checkpoints and
# their key. A fresh named volume takes this folder's owner, so the app user can write to it.
RUN useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin app \
    && mkdir -p /data \
    && chown app:app /data
USER app

EXPOSE 8000
# Liveness: the web process answers HTTP at all (config/probe.py). Worker and beat run from the
# same image and override it in docker-compose.yml.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-m", "config.probe"]
CMD ["gunicorn", "config.wsgi:application", "--bind=0.0.0.0:8000", "--worker-class=gthread", \
     "--workers=2", "--threads=8", "--access-logfile=-"]
