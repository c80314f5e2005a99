#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (tests/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
make -s -j"$(nproc)" unit
exec tests/run.sh
