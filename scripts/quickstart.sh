#!/usr/bin/env bash
# The main job: set everything up, then train the digits classifier on 2 local processes.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec horovodrun -np 2 python3 examples/pytorch/pytorch_mnist.py "$@"
