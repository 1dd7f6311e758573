#!/usr/bin/env bash
# Makes sure a PostgreSQL answers for the database tests, and prints the URL to use
# (SVC_TEST_DATABASE_URL). The machine's own server on 127.0.0.1:5432 (trust auth,
# database test) is used when it answers; otherwise Debian's postgresql package is
# installed if absent and a throwaway cluster with trust auth is started on port 55432
# under a temporary directory. Diagnostics go to stderr.
set -euo pipefail
url=${SVC_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
if command -v pg_isready >/dev/null && pg_isready -q -h 127.0.0.1 -p 5432 && psql "$url" -Atc 'select 1' >/dev/null 2>&1; then
  echo "$url"; exit 0
fi
echo "no PostgreSQL answers at $url: starting a throwaway cluster" >&2
if ! ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1; then
  apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
dir=$(mktemp -d /tmp/svc-ci-pg.XXXXXX)
id -u postgres >/dev/null 2>&1 || useradd --system --home "$dir" postgres
chown postgres "$dir"
as_pg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi; }
as_pg "'$bin/initdb' -D '$dir/data' -A trust -U postgres >/dev/null"
as_pg "'$bin/pg_ctl' -D '$dir/data' -o '-p 55432 -k $dir -c listen_addresses=127.0.0.1' -l '$dir/log' -w start >/dev/null"
as_pg "'$bin/createdb' -h 127.0.0.1 -p 55432 -U postgres test"
echo "postgres://postgres@127.0.0.1:55432/test"
