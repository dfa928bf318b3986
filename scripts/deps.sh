#!/usr/bin/env bash
# Installs what building and testing runstream needs.
#
#   scripts/deps.sh [all|npm|system]     (default: all)
#
# npm:    `npm ci` when node_modules is missing or older than package-lock.json.
# system: the Debian/Ubuntu packages the tests use (nats-server, postgresql; for the
#         Python client python3-grpcio, python3-protobuf, python3-websockets,
#         python3-pytest, protobuf-compiler, libprotobuf-dev; chromium for the TypeScript
#         client's browser test, driven by playwright-core, which never downloads a
#         browser; openssl for the clients' TLS test's throwaway certificate). As root they are installed with apt-get (`apt-get update` only when
#         something is missing); otherwise the missing ones are listed with the
#         command to install them, and the script carries on (tests can also use
#         NATS_URL / DATABASE_URL servers).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf '[deps] %s\n' "$*"; }

npm_deps() {
  command -v node >/dev/null || { say 'Node.js 20+ is required and was not found on PATH'; exit 1; }
  local major
  major=$(node -p 'process.versions.node.split(".")[0]')
  if ((major < 20)); then
    say "Node.js 20+ is required; this is $(node --version)"
    exit 1
  fi
  if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
    say 'node_modules is missing or older than package-lock.json: npm ci'
    npm ci --no-audit --no-fund
  fi
}

have_nats_server() { command -v nats-server >/dev/null || [[ -x /usr/sbin/nats-server ]]; }
have_postgres() { compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; }
have_python_module() { [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c "import $1" 2>/dev/null; }
have_protoc() { command -v protoc >/dev/null; }
have_protobuf_includes() { [[ -f /usr/include/google/protobuf/timestamp.proto ]]; }

system_deps() {
  local missing=()
  have_nats_server || missing+=(nats-server)
  have_postgres || missing+=(postgresql)
  have_python_module grpc || missing+=(python3-grpcio)
  have_python_module google.protobuf || missing+=(python3-protobuf)
  have_python_module websockets || missing+=(python3-websockets)
  have_python_module pytest || missing+=(python3-pytest)
  [[ -x /usr/bin/chromium ]] || missing+=(chromium)
  have_protoc || missing+=(protobuf-compiler)
  have_protobuf_includes || missing+=(libprotobuf-dev)
  command -v openssl >/dev/null || missing+=(openssl)
  ((${#missing[@]} == 0)) && return 0

  if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  else
    say "missing system packages: ${missing[*]}"
    say "install them with: sudo apt-get install -y ${missing[*]}"
    say '(or point the tests at running servers with NATS_URL=... DATABASE_URL=...)'
  fi
}

case "${1:-all}" in
  all) npm_deps; system_deps ;;
  npm) npm_deps ;;
  system) system_deps ;;
  *) echo "usage: $0 [all|npm|system]" >&2; exit 2 ;;
esac
