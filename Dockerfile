# The llmload image: the `llmload` command with Locust, for the master and workers of
# docker-compose.yml (or any host: `docker run --rm llmload:local run /config/x.yaml --worker ...`).
#
# BASE_IMAGE: any Debian-like image with python3 (3.11+, for tomllib) and its venv module. The default is the
# official slim image; where no registry can be reached, build one locally (scripts/compose_check.sh
# makes `llmload-base:bookworm` with debootstrap) and pass `--build-arg BASE_IMAGE=...`. pip uses
# whatever package source the base image's environment configures (PIP_INDEX_URL, PIP_CERT, ...).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/llmload/bin:$PATH

WORKDIR /app
# the dependencies first, in their own layer: a code change does not reinstall pandas and Locust
# (geventhttpclient, zmq and pyarrow ship manylinux wheels: no compiler needed)
COPY pyproject.toml README.md ./
RUN python3 -m venv /opt/llmload \
 && python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
      > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt
COPY llmload ./llmload
COPY locustfiles ./locustfiles
COPY shapes ./shapes
COPY analysis ./analysis
RUN pip install --no-deps . && mkdir -p /runs
# runs as root: compose bind-mounts ./runs, which Docker creates root-owned when it is missing
# 8089: Locust web UI (master); 5557: master <-> worker messages
EXPOSE 8089 5557
ENTRYPOINT ["llmload"]
CMD ["--help"]
