#!/usr/bin/env bash
# Makes sure a PostgreSQL answers at the URL given as $1 (postgres://user@host:port/db):
# when none answers there, starts a throwaway cluster under $2 (default ./data/pg) from
# the system's PostgreSQL binaries, installing Debian's package when they are absent
# (scripts/debian.sh),
# listening on the URL's host and port with trust authentication, and creates the
# URL's database. Prints nothing but progress lines on stderr. Used by scripts/setup.sh
# (`go tool task setup`, which the test task runs) and `go tool task up:hosted`.
set -euo pipefail
url=${1:?usage: scripts/postgres.sh <postgres URL> [cluster dir]}
dir=${2:-./data/pg}
rest=${url#*://}; creds=${rest%%@*}; rest=${rest#*@}
user=${creds%%:*}; hostport=${rest%%/*}; db=${rest#*/}; db=${db%%\?*}
host=${hostport%%:*}; port=${hostport##*:}; [ "$port" = "$hostport" ] && port=5432
answers() { PGCONNECT_TIMEOUT=3 psql "postgres://$user@$host:$port/postgres" -Atqc 'select 1' >/dev/null 2>&1; }
if ! command -v psql >/dev/null || ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  bash "$(dirname "$0")/debian.sh" postgresql
fi
if ! answers; then
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
  owner=root
  if [ "$(id -u)" = 0 ]; then owner=postgres; chown -R postgres "$dir"; fi
  as() { if [ "$owner" = postgres ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi; }
  if [ ! -f "$dir/PG_VERSION" ]; then
    echo "postgres.sh: creating a throwaway cluster in $dir" >&2
    as "$bin/initdb -D '$dir' -U '$user' --auth=trust >/dev/null"
  fi
  echo "postgres.sh: starting PostgreSQL on $host:$port from $dir" >&2
  as "$bin/pg_ctl -D '$dir' -l '$dir/server.log' -o \"-h $host -p $port -k /tmp\" -w start >/dev/null"
fi
for _ in $(seq 1 30); do answers && break; sleep 1; done
answers || { echo "postgres.sh: PostgreSQL at $host:$port does not answer" >&2; exit 1; }
if [ -n "$db" ] && [ "$(psql "postgres://$user@$host:$port/postgres" -Atqc "select 1 from pg_database where datname = '$db'")" != 1 ]; then
  psql "postgres://$user@$host:$port/postgres" -qc "create database \"$db\"" >/dev/null
fi
echo "postgres.sh: PostgreSQL answers at $host:$port, database $db" >&2
