#!/usr/bin/env bash
# Start a throw-away PostgreSQL server on loopback for the shared-storage test; print its URL.
# Installs Debian's postgresql if it is missing. The server's data lives in $1 (a fresh folder);
# stop it with: "$(cat $1/bin_path)/pg_ctl" -D "$1/data" stop (as the postgres user when root;
# .ci/run's trap does).
set -euo pipefail
dir=$1
port=${PGPORT_CI:-55432}
if ! command -v pg_ctl >/dev/null && [ ! -x /usr/lib/postgresql/15/bin/pg_ctl ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      postgresql >&2
  else
    echo "postgres.sh: pg_ctl not found and not root to install postgresql" >&2; exit 1
  fi
fi
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | tail -1)
[ -n "$bin" ] || bin=$(dirname "$(command -v pg_ctl)")
mkdir -p "$dir"
echo "$bin" > "$dir/bin_path"
as=()
if [ "$(id -u)" = 0 ]; then  # postgres refuses to run as root
  chown -R postgres "$dir"
  as=(runuser -u postgres --)
fi
"${as[@]}" "$bin/initdb" -D "$dir/data" -A trust -U designzoo >/dev/null
"${as[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=100" start >&2
"${as[@]}" "$bin/createdb" -h 127.0.0.1 -p "$port" -U designzoo designzoo
echo "postgresql://designzoo@127.0.0.1:$port/designzoo"
