# The llmload image: the `llmload` command with Locust, for the master and workers of
# docker-compose.yml (or any host: `docker run --rm llmload:local run /config/x.yaml --worker ...`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# geventhttpclient, zmq and pyarrow ship manylinux wheels: no compiler needed
COPY pyproject.toml README.md ./
COPY llmload ./llmload
COPY locustfiles ./locustfiles
COPY shapes ./shapes
COPY analysis ./analysis
RUN pip install . && mkdir -p /runs
# runs as root: compose bind-mounts ./runs, which Docker creates root-owned when it is missing
# 8089: Locust web UI (master); 5557: master <-> worker messages
EXPOSE 8089 5557
ENTRYPOINT ["llmload"]
CMD ["--help"]
