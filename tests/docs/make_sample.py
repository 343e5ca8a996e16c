#!/usr/bin/python3
"""Small sample data for the documentation's examples (tests/docs/run_docs.py runs them):

  ct.nii.gz    a CT-like head in Hounsfield units, int16, 64 x 80 x 76 voxels of 2.2 mm: scalp,
               a skull of bone, brain, two ventricles, two eyes, an air sinus and a contrast-filled
               vessel, noise of 10 HU; NIfTI-1 with an sform (RAS, centred on the origin). Small
               enough that its shadow fits the FD20 field at the default SID in every view
  seg.nii.gz   its labels, uint8 on the same grid, numbered as the default material table
               (docs/models.md): 0 air, 2 soft tissue, 3 brain, 4 blood, 5 bone, 6 iodine contrast

About 0.5 MB together; written in a second. Usage: make_sample.py OUT_DIR"""
import gzip
import os
import struct
import sys

import numpy as np

NX, NY, NZ, SP = 64, 80, 76, 2.2


def nifti(path, vol, datatype, bitpix):
    """NIfTI-1 (.nii.gz): 348-byte header, 4 bytes of no extension, the data in x-fastest order."""
    hdr = bytearray(348)
    struct.pack_into("<i", hdr, 0, 348)
    struct.pack_into("<8h", hdr, 40, 3, NX, NY, NZ, 1, 1, 1, 1)
    struct.pack_into("<hh", hdr, 70, datatype, bitpix)
    struct.pack_into("<8f", hdr, 76, 1.0, SP, SP, SP, 1.0, 1.0, 1.0, 1.0)
    struct.pack_into("<f", hdr, 108, 352.0)                # vox_offset
    struct.pack_into("<ff", hdr, 112, 1.0, 0.0)            # scl_slope, scl_inter
    struct.pack_into("<B", hdr, 123, 2)                    # xyzt_units: mm
    struct.pack_into("<hh", hdr, 252, 0, 1)                # qform_code 0, sform_code 1 (scanner)
    c = [-(n - 1) * SP / 2 for n in (NX, NY, NZ)]          # centred on the origin
    struct.pack_into("<4f", hdr, 280, SP, 0, 0, c[0])
    struct.pack_into("<4f", hdr, 296, 0, SP, 0, c[1])
    struct.pack_into("<4f", hdr, 312, 0, 0, SP, c[2])
    hdr[344:348] = b"n+1\0"
    with gzip.open(path + ".tmp", "wb", compresslevel=6) as f:
        f.write(bytes(hdr) + b"\0\0\0\0" + np.ascontiguousarray(vol.transpose(2, 1, 0)).tobytes())
    os.replace(path + ".tmp", path)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    x = (np.arange(NX) - (NX - 1) / 2) * SP   # mm, patient left-right
    y = (np.arange(NY) - (NY - 1) / 2) * SP   # anterior-posterior
    z = (np.arange(NZ) - (NZ - 1) / 2) * SP   # feet-head
    X, Y, Z = np.meshgrid(x, y, z, indexing="ij")
    lab = np.zeros((NX, NY, NZ), np.uint8)
    e = lambda cx, cy, cz, a, b, c: ((X - cx) / a) ** 2 + ((Y - cy) / b) ** 2 + ((Z - cz) / c) ** 2 <= 1
    lab[e(0, 0, 0, 62, 82, 76)] = 2                  # scalp
    lab[e(0, 0, 0, 58, 78, 72)] = 5                  # skull
    lab[e(0, 0, 2, 53, 73, 67)] = 3                  # brain
    for sx in (-1, 1):
        lab[e(sx * 9, 5, 10, 6, 22, 12)] = 2         # ventricles (CSF as soft tissue)
        lab[e(sx * 30, -68, -25, 12, 11, 11)] = 2    # eyes
    lab[e(0, -55, -40, 14, 12, 10)] = 0              # a sinus: air
    lab[(((X - 15) / 3) ** 2 + ((Y + 10) / 3) ** 2 <= 1) & e(0, 0, 2, 53, 73, 67)] = 6   # a vessel with contrast
    hu = np.array([-1000, 0, 40, 35, 45, 1200, 400], np.float32)[lab]
    rng = np.random.default_rng(27)
    hu += rng.normal(0, 10, hu.shape).astype(np.float32) * (lab > 0)                   # CT noise
    nifti(os.path.join(out, "ct.nii.gz"), np.clip(np.round(hu), -1024, 3071).astype(np.int16), 4, 16)
    nifti(os.path.join(out, "seg.nii.gz"), lab, 2, 8)
    print("wrote %s/ct.nii.gz and seg.nii.gz (%d x %d x %d at %g mm)" % (out, NX, NY, NZ, SP))


if __name__ == "__main__":
    main()
