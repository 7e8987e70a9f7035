#!/bin/sh
# The image's entry point (Containerfile). Secrets may come as files, the way Docker, Compose and
# Kubernetes mount them: for each variable below, VAR_FILE=/run/secrets/… sets VAR to the file's
# content (without its trailing newline). PUBLIC_URL defaults to what `-p 8787:8787` exposes on the
# host (and so endpoint URLs to `-p 8788:8788`). Then it execs the command (the server by default), which so becomes PID 1 and gets the
# runtime's SIGTERM: the server finishes in-flight work and exits 0.
set -eu

for var in FOUNT_ENCRYPTION_KEY DATABASE_URL PGPASSWORD FOUNT_BOOTSTRAP_API_KEY FOUNT_METRICS_TOKEN; do
  eval "file=\${${var}_FILE:-}"
  [ -n "$file" ] || continue
  eval "given=\${${var}:+yes}"
  if [ -n "$given" ]; then
    echo "fount: both $var and ${var}_FILE are set; set one of them" >&2
    exit 2
  fi
  if [ ! -r "$file" ] || [ ! -f "$file" ]; then
    echo "fount: ${var}_FILE=$file is not a readable file" >&2
    exit 2
  fi
  value=$(cat "$file")
  if [ -z "$value" ]; then
    echo "fount: ${var}_FILE=$file is empty" >&2
    exit 2
  fi
  export "$var=$value"
  unset "${var}_FILE"
done

# The address clients use, which links are built from (and, unless FOUNT_ENDPOINT_URL says otherwise,
# endpoint URLs: its host on FOUNT_ENDPOINT_PORT); behind a proxy or on a server, set it.
: "${PUBLIC_URL:=http://localhost:${PORT:-8787}}"
export PUBLIC_URL

exec "$@"
