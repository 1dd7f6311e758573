#!/usr/bin/env bash
# Installs the Debian packages named as arguments, saying which and why it runs
# apt-get: one `apt-get update` first, then one `apt-get install`. Nothing when the
# list is empty. As root it runs apt-get itself; otherwise through sudo when there is
# one, else it names the command to run and fails. The one place svc's scripts install
# Debian packages (scripts/setup.sh, scripts/postgres.sh).
set -euo pipefail
[ $# -gt 0 ] || exit 0
echo "setup: installing Debian packages: $* (apt-get update, then apt-get install)" >&2
as_root=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then as_root=(sudo)
  else echo "setup: not root and no sudo: run  apt-get update && apt-get install -y $*  as root, then again" >&2; exit 1; fi
fi
"${as_root[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq "$@" >/dev/null
echo "setup: installed $*" >&2
