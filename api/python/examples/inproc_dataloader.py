#!/usr/bin/python3
"""A PyTorch DataLoader fed with frames rendered on the fly by xtwin in process (docs/python-inprocess.md).

    PYTHONPATH=<build>/python /usr/bin/python3 api/python/examples/inproc_dataloader.py [--workers 2] [--batches 5]

Each DataLoader worker builds its own scene once (a Scene is not shared between processes or
threads) and then renders batches of random poses: line integrals (or, with --chain, the imaging
chain's processed frames) with the pose as the label. The render runs with the GIL released, so
workers may as well be threads of one process; here they are the DataLoader's processes. With a CUDA
build, --backend cuda renders on the GPU (and Scene.render_dlpack hands batches to a CUDA PyTorch
without a copy).
"""
import argparse
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from xtwin import inproc


class RandomViews(IterableDataset):
    """Endless batches of (frames, poses): primary +-90 deg, secondary +-30, table +-10 mm."""

    def __init__(self, batch=16, mode="fd20-128", backend="cpu", chain=False, seed=0, phantom_dims=64):
        self.batch, self.mode, self.backend, self.chain, self.seed = batch, mode, backend, chain, seed
        self.phantom_dims = phantom_dims

    def __iter__(self):
        info = get_worker_info()
        wid = info.id if info else 0
        scene = inproc.Scene(backend=self.backend, threads=1)
        d = self.phantom_dims
        scene.add_phantom(dims=(d, d, d), spacing_mm=256.0 / d, labels=self.chain)
        rng = np.random.default_rng([self.seed, wid])

        while True:
            b = self.batch
            poses = inproc.poses(primary=rng.uniform(-90, 90, b), secondary=rng.uniform(-30, 30, b),
                                 table=rng.uniform(-10, 10, (b, 3)))
            if self.chain:
                frames = scene.render_chain(poses=poses, mode=self.mode, seed=self.seed * 1000 + wid)["proc"]
                frames = frames.astype(np.float32)
            else:
                frames = scene.render(poses=poses, mode=self.mode)
            yield torch.from_numpy(frames).unsqueeze(1), torch.from_numpy(poses)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--mode", default="fd20-128")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--chain", action="store_true")
    args = ap.parse_args()
    ds = RandomViews(batch=args.batch, mode=args.mode, backend=args.backend, chain=args.chain)
    # batch_size=None: the dataset yields whole batches, rendered in one call each
    loader = DataLoader(ds, batch_size=None, num_workers=args.workers)
    t0 = time.monotonic()
    frames = 0
    for i, (x, pose) in enumerate(loader):
        frames += x.shape[0]
        print("batch %d: frames %s %s, mean %.3f; poses %s" % (i, tuple(x.shape), x.dtype, float(x.mean()),
                                                               tuple(pose.shape)))
        if i + 1 == args.batches:
            break
    dt = time.monotonic() - t0
    print("%d frames in %.2f s: %.1f frames/s (%d workers)" % (frames, dt, frames / dt, args.workers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
