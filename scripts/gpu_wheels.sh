#!/usr/bin/env bash
# Wheels the GPU check needs on a lent GPU machine that has PyTorch, transformers and PEFT but no
# network: pydantic and its helpers (the config models) and tomli-w, for that machine's Python 3.12 on x86-64. They go
# to .whl/ (ignored by git); the device run carries .whl and installs them with --no-index. vLLM and Ray
# are too large to carry, so there the check records their parts as skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 tomli-w==1.2.0
ls .whl
echo "device command: python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && \\"
echo "  PYTHONPATH=/tmp/site:. python3 benchmarks/gpu_check.py --out \$OUT/gpu-check.json"
