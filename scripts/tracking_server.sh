#!/usr/bin/env bash
# A shared MLflow tracking server with a login (docs/cluster.md), run by its own account:
#   MLFLOW_AUTH_ADMIN_PASSWORD='<strong password>' scripts/tracking_server.sh STORE [HOST] [PORT]
# STORE (e.g. /shared/jacbench-mlflow) holds the run database, the artifacts, the users'
# database (password hashes) and the auth config, readable only by the server's account
# (folder 0700, files made under umask 077). MLflow ships no admin password: the first start
# creates user `admin` with MLFLOW_AUTH_ADMIN_PASSWORD (read from the environment, never the
# command line, which every local user sees in `ps`); later starts ignore it. A new user sees
# nothing until granted (default_permission = NO_PERMISSIONS).
set -euo pipefail
store=${1:?usage: MLFLOW_AUTH_ADMIN_PASSWORD=... $0 STORE [HOST] [PORT]}
host=${2:-127.0.0.1}
port=${3:-5000}
umask 077
mkdir -p "$store"
chmod 700 "$store"
store=$(cd "$store" && pwd -P)
if [ ! -s "$store/basic_auth.db" ] && [ -z "${MLFLOW_AUTH_ADMIN_PASSWORD:-}" ]; then
  echo "$0: set MLFLOW_AUTH_ADMIN_PASSWORD for the first start (the admin user's password)" >&2
  exit 2
fi
# the CSRF secret, kept in the store so that restarts and workers share it
[ -s "$store/secret_key" ] || python3 -c "import secrets; print(secrets.token_hex(32))" > "$store/secret_key"
MLFLOW_FLASK_SERVER_SECRET_KEY=$(cat "$store/secret_key")
cat > "$store/basic_auth.ini" <<INI
[mlflow]
default_permission = NO_PERMISSIONS
database_uri = sqlite:///$store/basic_auth.db
admin_username = admin
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
INI
export MLFLOW_FLASK_SERVER_SECRET_KEY MLFLOW_AUTH_CONFIG_PATH="$store/basic_auth.ini"
exec python3 -m mlflow server --app-name basic-auth --host "$host" --port "$port" --workers 2 \
  --backend-store-uri "sqlite:///$store/mlflow.db" --artifacts-destination "$store/mlartifacts" \
  --allowed-hosts "$(hostname):$port,localhost:$port,127.0.0.1:$port"
