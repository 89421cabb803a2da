"""Aggregate throughput of a sharded run on N GPUs against 1 GPU; writes JSON.

    python scripts/multi_gpu_bench.py --protein 1enh --replicas-per-gpu 64 --steps 200 \
        --out artifacts/multi_gpu/results.json

Each configuration is limited by --timeout (default 80 s); the defaults finish in
well under 3 minutes on two H200s. Exit code 1 if a configuration failed (its error
is in the JSON). See workbench/distributed/scaling.py.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.distributed.scaling import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
