# The app image for docker-compose.yml: one image, run as migrate, web, worker or beat.

# The dashboards' browser assets (Chart.js) from npm, pinned by package-lock.json; only their
# files reach the app image, not Node.
FROM node:20-slim AS assets
WORKDIR /assets
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    AGENT_MEMORY_DATA_DIR=/data

WORKDIR /app

# Dependencies first, in their own layer, so a code change does not reinstall them. The project
# declares no importable packages (the apps run from /app), so this installs the dependencies only.
COPY pyproject.toml README.md ./
RUN pip install .

COPY . .
# The Python client (ledgered-memory), which `manage.py mcp` and `ledgered-memory-mcp` run the
# MCP server with (its httpx and mcp are dependencies of the project, installed above).
RUN pip install --no-deps ./clients/python
# settings.STATICFILES_DIRS serves them from here (collectstatic copies them at migrate).
COPY --from=assets /assets/node_modules/chart.js/dist ./node_modules/chart.js/dist

# /data is the app-data volume: static files and the generated secret key.
# A fresh named volume takes this folder's owner, so the app user can write to it.
RUN useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin app \
    && mkdir -p /data \
    && chown app:app /data
USER app

EXPOSE 8000
CMD ["gunicorn", "config.wsgi:application", "--bind=0.0.0.0:8000", "--worker-class=gthread", \
     "--workers=2", "--threads=4", "--access-logfile=-"]
