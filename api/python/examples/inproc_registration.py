#!/usr/bin/python3
"""2D/3D registration with xtwin in process: recover a C-arm pose from a rendered frame by
gradient descent on the six pose parameters (docs/python-inprocess.md).

    PYTHONPATH=<build>/python /usr/bin/python3 api/python/examples/inproc_registration.py [--steps 200]

The "X-ray" is a frame of the built-in head at a known pose; the search starts several degrees and
millimetres away and follows the gradient of the squared difference, which flows through
xtwin.inproc.project_torch: the exact line integrals of the reference projector and their analytic
derivative in the pose. Exit status 0 when the pose is found within 0.5 deg and 0.5 mm.
"""
import argparse
import sys

import numpy as np
import torch

from xtwin import inproc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()

    # The volume: the head phantom on a coarse grid, as float64 mu [i, j, k] and its affine.
    scene = inproc.Scene(threads=args.threads)
    scene.add_phantom(dims=(48, 48, 48), spacing_mm=4.0)
    mu_np, affine = scene.grid(0)
    mu = torch.from_numpy(np.ascontiguousarray(mu_np))
    mode = {"cols": 64, "rows": 64, "pitch_mm": 4.0}

    truth = torch.tensor([[30.0, 15.0, 0.0, 4.0, -6.0, 3.0]], dtype=torch.float64)
    target = inproc.project_torch(mu, truth, affine, mode=mode, threads=args.threads)

    start = truth + torch.tensor([[6.0, -5.0, 3.0, 8.0, 6.0, -7.0]], dtype=torch.float64)
    angles = start[:, :3].clone().requires_grad_(True)
    table = start[:, 3:].clone().requires_grad_(True)
    # A table move along the beam only magnifies the image: the table gets the larger steps.
    opt = torch.optim.Adam([{"params": [angles], "lr": 0.5}, {"params": [table], "lr": 2.0}])
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=60, gamma=0.5)
    for step in range(args.steps):
        opt.zero_grad()
        pose = torch.cat([angles, table], dim=1)
        loss = ((inproc.project_torch(mu, pose, affine, mode=mode, threads=args.threads) - target) ** 2).mean()
        loss.backward()
        opt.step()
        sched.step()
        if step % 25 == 0 or step == args.steps - 1:
            err = (pose.detach() - truth)[0]
            print("step %3d  loss %.3e  angle error %s deg  table error %s mm" % (
                step, float(loss), np.round(err[:3].numpy(), 3), np.round(err[3:].numpy(), 3)))
    pose = torch.cat([angles, table], dim=1)
    err = (pose.detach() - truth)[0].abs()
    ok = bool((err[:3] < 0.5).all() and (err[3:] < 0.5).all())
    print("recovered" if ok else "NOT recovered", "pose", np.round(pose.detach()[0].numpy(), 3), "truth",
          truth[0].numpy())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
