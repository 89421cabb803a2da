"""Speed of force-matching training with FP32 and with TF32 optimiser steps, same process.

    python -m benchmarks.training_speed [--protein 2jof] [--frames 8192] [--batch-size 512]
        [--repeats 2] [--device cuda] [--out result.json]

Frames are the native structure with Gaussian noise (0.5 Å), targets zero: the time of an
optimiser step does not depend on them. Each repeat trains one epoch of a fresh, default-size
CGSchNet (the shipped models' sizes) with each setting in turn (FP32, TF32, FP32, TF32, ...),
after one warm-up round of both that is not kept;
the result lists the epochs' seconds, frames per second, the ratio of the medians and the
relative RMS force difference of TF32 from FP32 (`FitResult.tf32_force_error`).
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from workbench.files import atomic_write_json
from workbench.model.schnet import CGSchNet, SchNetConfig
from workbench.system import build_system
from workbench.training.force_matching import FitSettings, train_force_matching


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protein", default="2jof")
    parser.add_argument("--frames", type=int, default=8192)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default=None, help="JSON file for the result")
    args = parser.parse_args()
    system = build_system(args.protein)
    generator = torch.Generator().manual_seed(0)
    native = system.native_positions.float()
    noise = torch.randn((args.frames, *native.shape), generator=generator)
    positions = native + 0.5 * noise
    targets = torch.zeros_like(positions)
    held_out = slice(0, args.batch_size)  # validation: one batch
    config = SchNetConfig()  # the shipped models' sizes
    seconds: dict[str, list[float]] = {"fp32": [], "tf32": []}
    tf32_error = None
    for repeat in range(args.repeats + 1):  # the first round warms up and is not kept
        for label in seconds:
            torch.manual_seed(0)
            settings = FitSettings(epochs=1, batch_size=args.batch_size, device=args.device,
                                   tf32=label == "tf32")
            result = train_force_matching(
                CGSchNet(config), system.bead_types, (positions, targets),
                (positions[held_out], targets[held_out]), settings, progress=False,
            )
            if repeat > 0:
                seconds[label].append(result.history[0]["seconds"])
            if settings.tf32:
                tf32_error = result.tf32_force_error
    medians = {label: statistics.median(values) for label, values in seconds.items()}
    result = {
        "protein": args.protein, "frames": args.frames, "batch_size": args.batch_size,
        "device": args.device,
        "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
        "epoch_seconds": seconds,
        "frames_per_second": {k: args.frames / v for k, v in medians.items()},
        "tf32_speedup": medians["fp32"] / medians["tf32"],
        "tf32_force_error": tf32_error,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        atomic_write_json(args.out, result)


if __name__ == "__main__":
    main()
