#!/usr/bin/env bash
# Regenerates runstream/v1/runstream_pb2.py from the repository's proto/ (the source of truth)
# with the system protoc (Debian's protobuf-compiler). The output is committed, so installing
# the package needs no protoc and no network.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
protoc --python_out=. -I ../../proto -I /usr/include runstream/v1/runstream.proto
