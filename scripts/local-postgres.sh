#!/usr/bin/env bash
# Start the machine's PostgreSQL (Debian's cluster 15/main, or the newest installed)
# and make a role and database for scalestudy's tests:
#   scripts/local-postgres.sh start   -> prints the SQLAlchemy URL on stdout
# Needs root. Installs postgresql with apt when no server is installed.
set -euo pipefail
ROLE=${SCALESTUDY_PG_ROLE:-scalestudy}
DB=${SCALESTUDY_PG_DB:-scalestudy_test}
PASSWORD=${SCALESTUDY_PG_PASSWORD:-scalestudy-test-pw}
log() { echo "local-postgres: $*" >&2; }

case "${1:-start}" in
  start)
    if ! command -v pg_lsclusters >/dev/null || [ -z "$(pg_lsclusters -h 2>/dev/null)" ]; then
      log "installing postgresql (apt)"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    fi
    read -r version cluster port status _ < <(pg_lsclusters -h | sort -k1,1nr | head -1)
    if [ "$status" != "online" ]; then
      # pg_ctlcluster talks on stdout ("Removed stale pid file."); only the URL may go there
      pg_ctlcluster "$version" "$cluster" start >&2
    fi
    for _ in $(seq 1 30); do su postgres -c "pg_isready -q -p $port" && break; sleep 0.5; done
    su postgres -c "psql -q -p $port -tAc \"SELECT 1 FROM pg_roles WHERE rolname='$ROLE'\"" | grep -q 1 \
      || su postgres -c "psql -q -p $port -c \"CREATE ROLE $ROLE LOGIN PASSWORD '$PASSWORD'\"" >&2
    # CREATEDB: each pytest-xdist worker of scripts/test.sh gets a database of its own (tests/conftest.py)
    su postgres -c "psql -q -p $port -c \"ALTER ROLE $ROLE CREATEDB\"" >&2
    su postgres -c "psql -q -p $port -tAc \"SELECT 1 FROM pg_database WHERE datname='$DB'\"" | grep -q 1 \
      || su postgres -c "createdb -p $port -O $ROLE $DB" >&2
    log "up: cluster $version/$cluster on port $port"
    echo "postgresql+psycopg://$ROLE:$PASSWORD@127.0.0.1:$port/$DB"
    ;;
  stop)
    pg_lsclusters -h | while read -r version cluster _; do pg_ctlcluster "$version" "$cluster" stop || true; done
    ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
