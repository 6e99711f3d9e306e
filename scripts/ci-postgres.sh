#!/usr/bin/env bash
# Install (if needed) and start a local PostgreSQL server for the iobridge test suite.
#
# Usage:   eval "$(scripts/ci-postgres.sh)"     # exports IOBRIDGE_TEST_POSTGRES_URL
#          scripts/ci-postgres.sh               # prints the export line
# Needs root (apt-get, pg_ctlcluster). Listens on 127.0.0.1 only. Idempotent: re-running it
# reuses the installed server, user and database. Progress goes to stderr, the export to stdout.
set -euo pipefail

PGUSER_NAME="${IOBRIDGE_PG_USER:-iobridge}"
PGPASS="${IOBRIDGE_PG_PASSWORD:-iobridge}"
PGDB="${IOBRIDGE_PG_DB:-iobridge_test}"
PGPORT="${IOBRIDGE_PG_PORT:-5432}"

log() { echo "ci-postgres: $*" >&2; }

if ! command -v pg_lsclusters >/dev/null 2>&1; then
  log "installing PostgreSQL from Debian packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update >&2
  apt-get install -y postgresql >&2
fi

read -r VERSION CLUSTER < <(pg_lsclusters --no-header | awk 'NR==1 {print $1, $2}')
if [[ -z "${VERSION:-}" ]]; then
  VERSION="$(ls /usr/lib/postgresql | sort -V | tail -n1)"
  CLUSTER=main
  log "creating cluster $VERSION/$CLUSTER"
  pg_createcluster --port "$PGPORT" "$VERSION" "$CLUSTER" >&2
fi

if ! pg_lsclusters --no-header | awk -v v="$VERSION" -v c="$CLUSTER" \
    '$1==v && $2==c && $4=="online" {found=1} END {exit !found}'; then
  log "starting cluster $VERSION/$CLUSTER"
  pg_ctlcluster "$VERSION" "$CLUSTER" start -- -o "-c listen_addresses=127.0.0.1 -p $PGPORT" >&2 \
    || pg_ctlcluster "$VERSION" "$CLUSTER" start >&2
fi

for _ in $(seq 1 30); do
  pg_isready -h 127.0.0.1 -p "$PGPORT" -q && break
  sleep 1
done
pg_isready -h 127.0.0.1 -p "$PGPORT" >&2

psql_admin() { su postgres -c "psql -v ON_ERROR_STOP=1 -p $PGPORT -qtAc \"$1\""; }

if [[ "$(psql_admin "SELECT 1 FROM pg_roles WHERE rolname='$PGUSER_NAME'")" != "1" ]]; then
  log "creating role $PGUSER_NAME"
  psql_admin "CREATE ROLE $PGUSER_NAME LOGIN CREATEDB PASSWORD '$PGPASS'"
fi
if [[ "$(psql_admin "SELECT 1 FROM pg_database WHERE datname='$PGDB'")" != "1" ]]; then
  log "creating database $PGDB"
  psql_admin "CREATE DATABASE $PGDB OWNER $PGUSER_NAME"
fi

URL="postgresql+asyncpg://$PGUSER_NAME:$PGPASS@127.0.0.1:$PGPORT/$PGDB"
export IOBRIDGE_TEST_POSTGRES_URL="$URL"
log "ready: $URL"
echo "export IOBRIDGE_TEST_POSTGRES_URL=$URL"
