#!/usr/bin/python3
"""Real clinical data (issue 14), end to end through the real binaries.

DICOM series are written here with pydicom from a known HU volume (shuffled file order, negative
slice direction, oblique orientation, two series in one folder, a missing slice, a sheared stack,
per-slice rescale, RLE compression, an enhanced multi-frame object); each is rendered by
`xtwin render` and compared with the render of the same volume written here as MetaImage, and
loaded by xt_load_dump (xt_model_load, the CLI's and the server's path) and compared voxel by
voxel. pydicom's own CT test files (Debian's python3-pydicom) are checked against pydicom's own
reading of them. Then the traps: NaN fill, HU sanity, NIfTI scl_*/qform/sform, coverage, and the
server's model report over a real socket.

  /usr/bin/python3 tests/test_dicom.py XTWIN XT_LOAD_DUMP XTWIN_SERVER|- SCRATCH [test ...]

Exit 0: all passed; 1: a failure; 77: python3-pydicom or numpy missing (ctest: skipped)."""
import glob
import json
import math
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
import urllib.request

try:
    import numpy as np
    import pydicom
    from pydicom.dataset import FileDataset, FileMetaDataset, Dataset
    from pydicom.sequence import Sequence
    from pydicom.uid import ExplicitVRLittleEndian, RLELossless
except ImportError as e:
    print(f"test_dicom: skipped: {e} (scripts/install-deps installs python3-pydicom and python3-numpy)")
    sys.exit(77)

XTWIN, DUMP, SERVER, SCRATCH = sys.argv[1:5]
PYDICOM_FILES = os.path.join(os.path.dirname(pydicom.__file__), "data", "test_files")
FAILS = []
CT_STORAGE = "1.2.840.10008.5.1.4.1.1.2"
ENHANCED_CT_STORAGE = "1.2.840.10008.5.1.4.1.1.2.1"


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print(f"  FAIL: {what}")
    return cond


def fresh(name):
    d = os.path.join(SCRATCH, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def run(*args):
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def dump(path, *opts, npy=None):
    args = [DUMP, path, *opts] + (["--npy", npy] if npy else [])
    rc, out, err = run(*args)
    try:
        j = json.loads(out)
    except ValueError:
        j = {"error": "no JSON", "message": out + err}
    return rc, j, err


def render(vol, out, *opts):
    """xtwin render at a fixed oblique pose; returns (rc, line integrals or None, stderr)."""
    rc, _, err = run(XTWIN, "render", "--volume", vol, "--mode", "fd20-128", "--primary", "25", "--secondary",
                     "-15", "--place", "native", "--out", out, *opts)
    return rc, (np.load(out + ".npy") if rc == 0 else None), err


def sidecar(out):
    with open(out + ".json") as f:
        return json.load(f)


# ---- a known volume and its two spellings --------------------------------------------------------

def known_volume(seed=1, shape=(12, 20, 24)):
    """HU (nz, ny, nx), even integers: air, a soft-tissue ellipsoid, a bone bar and a marker that
    breaks every symmetry, plus noise so that no two slices agree."""
    nz, ny, nx = shape
    z, y, x = np.mgrid[0:nz, 0:ny, 0:nx]
    v = np.full(shape, -1000.0)
    v[((x - 11) / 8.0) ** 2 + ((y - 9) / 6.0) ** 2 + ((z - 5) / 4.0) ** 2 < 1] = 40
    v[(x >= 14) & (x < 17) & (y >= 3) & (y < 6) & (z >= 2)] = 1200
    v[1, 2, 3] = 2000
    rng = np.random.default_rng(seed)
    v += rng.integers(-10, 11, shape) * 2
    return (2 * np.round(v / 2)).astype(np.int16)


def write_mha(path, vol, spacing, origin, axes):
    """MetaImage: voxel (i,j,k) = vol[k,j,i] at origin + sum spacing[a] index[a] axes[a] (LPS)."""
    tm = " ".join(f"{c:.17g}" for a in axes for c in a)
    hdr = (f"ObjectType = Image\nNDims = 3\nDimSize = {vol.shape[2]} {vol.shape[1]} {vol.shape[0]}\n"
           f"ElementSpacing = {spacing[0]:.17g} {spacing[1]:.17g} {spacing[2]:.17g}\n"
           f"Offset = {origin[0]:.17g} {origin[1]:.17g} {origin[2]:.17g}\nTransformMatrix = {tm}\n"
           f"ElementType = {'MET_FLOAT' if vol.dtype == np.float32 else 'MET_SHORT'}\n"
           "ElementByteOrderMSB = False\nElementDataFile = LOCAL\n")
    with open(path, "wb") as f:
        f.write(hdr.encode() + vol.astype(vol.dtype.newbyteorder("<")).tobytes())


def ds_str(v):
    return f"{v:.10g}"


def base_ds(path, sop_class, series_uid, study_uid, number, desc):
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = sop_class
    meta.MediaStorageSOPInstanceUID = pydicom.uid.generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = FileDataset(path, {}, file_meta=meta, preamble=b"\0" * 128)
    ds.is_little_endian, ds.is_implicit_VR = True, False
    ds.SOPClassUID, ds.SOPInstanceUID = sop_class, meta.MediaStorageSOPInstanceUID
    ds.Modality, ds.StudyInstanceUID, ds.SeriesInstanceUID = "CT", study_uid, series_uid
    ds.SeriesNumber, ds.SeriesDescription = number, desc
    ds.PatientName, ds.PatientID = "Test^Phantom", "XT14"
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 0
    return ds


def write_series(d, vol, spacing, origin, axes, series_uid=None, number=3, desc="known volume", shuffle=True,
                 k_sign=1, rescale=None, shear=(0.0, 0.0, 0.0), skip=(), rle=False, prefix="im"):
    """One classic CT file per slice k at IPP = origin + k_sign k spacing[2] axes[2] + k shear.
    Stored as uint16 (HU - intercept) / slope; rescale(k) -> (slope, intercept), default (1, -1024)."""
    series_uid = series_uid or pydicom.uid.generate_uid()
    study = "1.2.826.0.1.3680043.8.498.14"
    nz, ny, nx = vol.shape
    order = list(range(nz))
    if shuffle:
        random.Random(7).shuffle(order)
    iop = [ds_str(c) for c in list(axes[0]) + list(axes[1])]
    for n, k in enumerate(order):
        if k in skip:
            continue
        p = os.path.join(d, f"{prefix}{n:03d}_{random.Random(k).randrange(10**6):06d}.dcm")
        ds = base_ds(p, CT_STORAGE, series_uid, study, number, desc)
        ds.InstanceNumber = k + 1
        pos = [origin[a] + k_sign * k * spacing[2] * axes[2][a] + k * shear[a] for a in range(3)]
        ds.ImagePositionPatient = [ds_str(c) for c in pos]
        ds.ImageOrientationPatient = iop
        ds.PixelSpacing = [ds_str(spacing[1]), ds_str(spacing[0])]  # rows, columns
        ds.SliceThickness = ds_str(spacing[2])
        ds.Rows, ds.Columns = ny, nx
        slope, inter = rescale(k) if rescale else (1, -1024)
        ds.RescaleSlope, ds.RescaleIntercept, ds.RescaleType = ds_str(slope), ds_str(inter), "HU"
        stored = (vol[k].astype(np.int64) - inter) / slope
        assert np.all(stored == np.round(stored)) and stored.min() >= 0 and stored.max() < 65536
        arr = stored.astype(np.uint16)
        ds.PixelData = arr.tobytes()
        if rle:
            ds.compress(RLELossless, arr)
        ds.save_as(p, write_like_original=False)
    return series_uid


def write_enhanced(path, vol, spacing, origin, axes):
    """One Enhanced CT object: shared pixel measures and orientation, per-frame positions and
    rescale, frames stored in a shuffled order."""
    nz, ny, nx = vol.shape
    ds = base_ds(path, ENHANCED_CT_STORAGE, pydicom.uid.generate_uid(), "1.2.826.0.1.3680043.8.498.15", 9, "enhanced")
    ds.Rows, ds.Columns, ds.NumberOfFrames = ny, nx, nz
    pm, po = Dataset(), Dataset()
    pm.PixelSpacing = [ds_str(spacing[1]), ds_str(spacing[0])]
    pm.SliceThickness = ds_str(spacing[2])
    po.ImageOrientationPatient = [ds_str(c) for c in list(axes[0]) + list(axes[1])]
    shared = Dataset()
    shared.PixelMeasuresSequence = Sequence([pm])
    shared.PlaneOrientationSequence = Sequence([po])
    ds.SharedFunctionalGroupsSequence = Sequence([shared])
    order = list(range(nz))
    random.Random(11).shuffle(order)
    frames, pixels = [], []
    for k in order:
        fg, pp, pv = Dataset(), Dataset(), Dataset()
        pp.ImagePositionPatient = [ds_str(origin[a] + k * spacing[2] * axes[2][a]) for a in range(3)]
        slope, inter = (2, -2048) if k % 2 else (1, -1024)  # rescale may change per frame
        pv.RescaleSlope, pv.RescaleIntercept, pv.RescaleType = ds_str(slope), ds_str(inter), "HU"
        fg.PlanePositionSequence = Sequence([pp])
        fg.PixelValueTransformationSequence = Sequence([pv])
        frames.append(fg)
        pixels.append(((vol[k].astype(np.int64) - inter) // slope).astype(np.uint16))
    ds.PerFrameFunctionalGroupsSequence = Sequence(frames)
    ds.PixelData = np.stack(pixels).tobytes()
    ds.save_as(path, write_like_original=False)


AXIAL = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
# an oblique frame with short exact decimals: r, c orthonormal, n = r x c
OBLIQUE = ((0.6, 0.8, 0.0), (-0.48, 0.36, 0.8), (0.64, -0.48, 0.6))
SPACING = (0.75, 0.5, 2.5)  # between columns, between rows, between slices
ORIGIN = (-10.5, 20.25, -14.0)


def same_render(a, b, what):
    if not check(a is not None and b is not None, f"{what}: both render"):
        return
    scale = max(1.0, float(np.abs(b).max()))
    diff = float(np.abs(a - b).max())
    check(diff <= 1e-5 * scale and float(b.max()) > 0.05, f"{what}: render differs from the reference by {diff} "
          f"(max {float(b.max())})")


def expect_affine(j, axes, spacing, origin, what):
    m = np.array(j["index_to_model"])
    want = np.column_stack([np.array(axes[a]) * spacing[a] for a in range(3)] + [np.array(origin)])
    check(np.allclose(m, want, atol=1e-9), f"{what}: index_to_model\n{m}\nwant\n{want}")


# ---- DICOM series written here --------------------------------------------------------------------

def test_series_shuffled_axial():
    d = fresh("axial")
    v = known_volume()
    write_series(os.path.join(d), v, SPACING, ORIGIN, AXIAL)
    write_mha(os.path.join(SCRATCH, "axial.mha"), v, SPACING, ORIGIN, AXIAL)
    rc, j, err = dump(d, "--convert", "mu", npy=os.path.join(SCRATCH, "axial.npy"))
    if check(rc == 0, f"shuffled axial series loads: {err}"):
        check(j["dims"] == [24, 20, 12] and j["format"] == "dicom" and j["nslices"] == 12, f"dims {j}")
        expect_affine(j, AXIAL, SPACING, ORIGIN, "axial")
        check(np.array_equal(np.load(os.path.join(SCRATCH, "axial.npy")), v.astype(np.float32)),
              "axial: voxels equal the known HU (rescale applied, slices in order)")
    rc1, a, e1 = render(d, os.path.join(d, "r"), "--convert", "hu")
    rc2, b, e2 = render(os.path.join(SCRATCH, "axial.mha"), os.path.join(SCRATCH, "axial_ref"), "--convert", "hu")
    same_render(a, b, "shuffled axial series vs MetaImage")
    if rc1 == 0:
        s = sidecar(os.path.join(d, "r"))
        check(s["load"]["dicom"]["slices"] == 12 and s["load"]["hu_model"] == "bilinear", f"sidecar load {s['load']}")
        check(not s["load"]["warnings"], f"a real-looking CT gives no warning: {s['load']['warnings']}")


def test_series_negative_and_oblique():
    v = known_volume(2)
    for name, axes, sign in (("negative", AXIAL, -1), ("oblique", OBLIQUE, 1), ("oblique_negative", OBLIQUE, -1)):
        d = fresh(name)
        write_series(d, v, SPACING, ORIGIN, axes, k_sign=sign)
        ref_axes = (axes[0], axes[1], tuple(sign * c for c in axes[2]))
        ref = os.path.join(SCRATCH, name + ".mha")
        write_mha(ref, v, SPACING, ORIGIN, ref_axes)
        rc, j, err = dump(d, "--convert", "mu", npy=os.path.join(SCRATCH, name + ".npy"))
        if check(rc == 0, f"{name}: loads: {err}"):
            vox = np.load(os.path.join(SCRATCH, name + ".npy"))
            want = v if sign > 0 else v[::-1]
            check(np.array_equal(vox, want.astype(np.float32)), f"{name}: voxels (sorted along the normal)")
            top = tuple(ORIGIN[a] + (sign < 0) * -(v.shape[0] - 1) * SPACING[2] * axes[2][a] for a in range(3))
            expect_affine(j, axes, SPACING, top, name)
        rc1, a, _ = render(d, os.path.join(d, "r"), "--convert", "hu")
        rc2, b, _ = render(ref, os.path.join(SCRATCH, name + "_ref"), "--convert", "hu")
        same_render(a, b, f"{name} series vs MetaImage")


def test_two_series_one_folder():
    d = fresh("two")
    va, vb = known_volume(3), known_volume(4)
    ua = write_series(d, va, SPACING, ORIGIN, AXIAL, number=3, desc="first", prefix="a")
    ub = write_series(d, vb, SPACING, ORIGIN, OBLIQUE, number=7, desc="second", prefix="b")
    rc, j, err = dump(d, "--convert", "hu")
    check(rc == 1 and j.get("error") == "INVAL" and ua in err and ub in err and "--series" in err,
          f"two series: refused with both listed: {err}")
    rc, _, err = run(XTWIN, "render", "--volume", d, "--mode", "fd20-128", "--out", os.path.join(d, "x"))
    check(rc == 1 and ua in err and ub in err and not os.path.exists(os.path.join(d, "x.npy")),
          f"xtwin render lists the series, writes nothing: {err}")
    ref = os.path.join(SCRATCH, "two_b.mha")
    write_mha(ref, vb, SPACING, ORIGIN, OBLIQUE)
    rc1, a, e1 = render(d, os.path.join(d, "rb"), "--convert", "hu", "--series", ub)
    rc2, b, _ = render(ref, os.path.join(SCRATCH, "two_b_ref"), "--convert", "hu")
    same_render(a, b, "--series UID picks the second series")
    rc, j, err = dump(d + "#7", "--convert", "mu", npy=os.path.join(SCRATCH, "two7.npy"))
    check(rc == 0 and j["series_uid"] == ub and j["nskipped"] >= 12 and
          np.array_equal(np.load(os.path.join(SCRATCH, "two7.npy")), vb.astype(np.float32)),
          f"PATH#7 (Series Number) picks the second series: {err}")
    rc, j, err = dump(d, "--series", "1.2.3.4")
    check(rc == 1 and j.get("error") == "NOTFOUND" and ua in err, f"unknown series named, list given: {err}")


def test_missing_slice_and_tilt():
    v = known_volume(5)
    d = fresh("missing")
    write_series(d, v, SPACING, ORIGIN, AXIAL, skip=(6,))
    rc, j, err = dump(d, "--convert", "hu")
    check(rc == 1 and j.get("error") == "FORMAT" and "uneven slice spacing" in err and "missing" in err,
          f"a missing slice is refused: {err}")
    d = fresh("tilt")
    write_series(d, v, SPACING, ORIGIN, AXIAL, shear=(0.0, 0.7, 0.0))  # 0.7 mm per 2.5 mm slice: 15.6 deg
    rc, j, err = dump(d, "--convert", "hu")
    check(rc == 1 and j.get("error") == "UNSUPPORTED" and "sheared by 15.6" in err and "tilt" in err,
          f"a gantry-tilted stack is refused: {err}")
    # a list of files (@LIST) that leaves out the odd ones out: two series' worth, pick by listing
    lst = os.path.join(d, "..", "tilt_list.txt")
    files = sorted(glob.glob(os.path.join(d, "*.dcm")))
    with open(lst, "w") as f:
        f.write("# one file only\n" + os.path.relpath(files[0], os.path.dirname(lst)) + "\n")
    rc, j, err = dump("@" + lst, "--convert", "mu")
    check(rc == 0 and j["nslices"] == 1 and j["dims"][2] == 1, f"@LIST of one file loads one slice: {err}")


def test_rescale_rle_enhanced():
    v = known_volume(6)
    ref = os.path.join(SCRATCH, "re.mha")
    write_mha(ref, v, SPACING, ORIGIN, OBLIQUE)
    rc2, b, _ = render(ref, os.path.join(SCRATCH, "re_ref"), "--convert", "hu")
    cases = (("per_slice_rescale", dict(rescale=lambda k: (2, -2048) if k % 3 == 0 else (1, -1100 - 2 * k))),
             ("rle", dict(rle=True)))
    for name, kw in cases:
        d = fresh(name)
        write_series(d, v, SPACING, ORIGIN, OBLIQUE, **kw)
        rc, j, err = dump(d, "--convert", "mu", npy=os.path.join(SCRATCH, name + ".npy"))
        check(rc == 0 and np.array_equal(np.load(os.path.join(SCRATCH, name + ".npy")), v.astype(np.float32)),
              f"{name}: voxels equal the known HU: {err}")
        if name == "rle":
            check(j.get("transfer_syntax") == RLELossless, f"rle: decoded {j.get('transfer_syntax')}")
        rc1, a, _ = render(d, os.path.join(d, "r"), "--convert", "hu")
        same_render(a, b, f"{name} series vs MetaImage")
    d = fresh("enhanced")
    p = os.path.join(d, "enhanced.dcm")
    write_enhanced(p, v, SPACING, ORIGIN, OBLIQUE)
    rc, j, err = dump(p, "--convert", "mu", npy=os.path.join(SCRATCH, "enh.npy"))
    if check(rc == 0, f"enhanced multi-frame CT loads: {err}"):
        check(np.array_equal(np.load(os.path.join(SCRATCH, "enh.npy")), v.astype(np.float32)),
              "enhanced: frames sorted by position, per-frame rescale applied")
        expect_affine(j, OBLIQUE, SPACING, ORIGIN, "enhanced")
    rc1, a, _ = render(p, os.path.join(d, "r"), "--convert", "hu")
    same_render(a, b, "enhanced CT vs MetaImage")


# ---- pydicom's own test files -----------------------------------------------------------------------

def pyd(name):
    return os.path.join(PYDICOM_FILES, name)


def test_pydicom_ct_files():
    ds = pydicom.dcmread(pyd("CT_small.dcm"))
    rc, j, err = dump(pyd("CT_small.dcm"), "--convert", "mu", npy=os.path.join(SCRATCH, "ct_small.npy"))
    if check(rc == 0, f"CT_small.dcm loads: {err}"):
        want = ds.pixel_array.astype(np.float64) * float(ds.RescaleSlope) + float(ds.RescaleIntercept)
        got = np.load(os.path.join(SCRATCH, "ct_small.npy"))
        check(got.shape == (1, 128, 128) and np.array_equal(got[0], want.astype(np.float32)),
              "CT_small.dcm: HU equal pydicom's pixel_array * slope + intercept")
        iop = [float(x) for x in ds.ImageOrientationPatient]
        r, c = np.array(iop[:3]), np.array(iop[3:])
        ps = [float(x) for x in ds.PixelSpacing]
        expect_affine(j, (r, c, np.cross(r, c)), (ps[1], ps[0], float(ds.SliceThickness)),
                      [float(x) for x in ds.ImagePositionPatient], "CT_small.dcm")
    # a real CT series: 5 slices in one folder, positions descending in file order
    folder = pyd("dicomdirtests/98892001/CT5N")
    rc, j, err = dump(folder, "--convert", "mu", npy=os.path.join(SCRATCH, "ct5n.npy"))
    if check(rc == 0, f"CT5N loads: {err}"):
        slices = sorted((pydicom.dcmread(f) for f in glob.glob(folder + "/*")),
                        key=lambda s: float(s.ImagePositionPatient[2]))
        want = np.stack([s.pixel_array * float(s.RescaleSlope) + float(s.RescaleIntercept) for s in slices])
        check(np.array_equal(np.load(os.path.join(SCRATCH, "ct5n.npy")), want.astype(np.float32)),
              "CT5N: slices sorted by position, values equal pydicom's")
        check(abs(j["slice_step_mm"] - 2.5) < 1e-9 and j["index_to_model"][2][3] == float(slices[0].ImagePositionPatient[2]),
              f"CT5N: 2.5 mm from the lowest slice: {j['index_to_model']}")
    rc, j, err = dump(pyd("dicomdirtests/77654033/CT2"))
    check(rc == 1 and "uneven slice spacing" in err, f"CT2 (3 slices 1.25 mm apart and one 202.5 mm away) refused: {err}")
    rc, j, err = dump(pyd("dicomdirtests/98892001"))
    check(rc == 1 and "2 image series" in err and "Scout" in err, f"two series listed: {err}")
    rc, j, err = dump(pyd("dicomdirtests/98892001/CT2N"))
    check(rc == 1 and "Orientation" in err, f"scout with two orientations refused: {err}")
    rc, j, err = dump(pyd("dicomdirtests/DICOMDIR"))
    check(rc == 1 and "DICOMDIR" in err, f"a DICOMDIR is named as such: {err}")
    # JPEG 2000 (lossy) CT: decoded by GDCM; geometry from the header, a CT's value range
    ds = pydicom.dcmread(pyd("693_J2KI.dcm"))
    rc, j, err = dump(pyd("693_J2KI.dcm"), "--convert", "mu")
    check(rc == 0 and j["dims"] == [512, 512, 1] and j["transfer_syntax"] == ds.file_meta.TransferSyntaxUID and
          j["index_to_model"][0][3] == float(ds.ImagePositionPatient[0]) and -4096 <= j["value_min"] < -900 and
          500 < j["value_max"] < 4096, f"693_J2KI.dcm: {err or j}")


def test_compressed_lossless_equal():
    """Lossless transfer syntaxes decode to exactly the uncompressed file's values (pydicom reads
    the uncompressed MR_small.dcm; GDCM decodes the rest)."""
    want = pydicom.dcmread(pyd("MR_small.dcm")).pixel_array.astype(np.float32)
    for name in ("MR_small_RLE.dcm", "MR_small_jpeg_ls_lossless.dcm", "MR_small_jp2klossless.dcm",
                 "MR_small_bigendian.dcm", "MR_small_implicit.dcm", "MR_small.dcm"):
        out = os.path.join(SCRATCH, name + ".npy")
        rc, j, err = dump(pyd(name), "--convert", "mu", npy=out)
        check(rc == 0 and np.array_equal(np.load(out)[0], want), f"{name}: equal to MR_small.dcm's pixels: {err}")


# ---- traps -------------------------------------------------------------------------------------------

def test_nan_fill():
    d = fresh("nan")
    v = known_volume(7).astype(np.float32)
    v[:, :, :3] = np.nan  # padding outside the field of view, as resampled volumes carry
    p = os.path.join(d, "nan.mha")
    write_mha(p, v, SPACING, ORIGIN, AXIAL)
    rc, _, err = render(p, os.path.join(d, "a"), "--convert", "hu")
    check(rc == 1 and "not finite" in err and "--nan-value" in err and not os.path.exists(os.path.join(d, "a.npy")),
          f"NaN refused by default, the option named: {err}")
    rc, a, err = render(p, os.path.join(d, "b"), "--convert", "hu", "--nan-value", "-1000")
    filled = v.copy()
    filled[np.isnan(filled)] = -1000
    q = os.path.join(d, "filled.mha")
    write_mha(q, filled, SPACING, ORIGIN, AXIAL)
    _, b, _ = render(q, os.path.join(d, "c"), "--convert", "hu")
    same_render(a, b, "--nan-value -1000 renders like the volume with -1000 written in")
    if rc == 0:
        load = sidecar(os.path.join(d, "b"))["load"]
        check(load["nan_filled"] == 12 * 20 * 3 and any(w["code"] == "nan_filled" for w in load["warnings"]) and
              "[nan_filled]" in err, f"the fill is reported: {load}")


def test_hu_sanity():
    d = fresh("husanity")
    v = known_volume(8)
    cases = (("ct", v, None), ("offset1024", v + 1024, "hu_offset_1024"),
             ("mri", np.clip((v + 1000) // 4, 0, None).astype(np.int16) + 5, "hu_nonnegative"),
             ("cropped", np.maximum(v, -700), "hu_no_air"))
    for name, vol, code in cases:
        p = os.path.join(d, name + ".mha")
        write_mha(p, vol.astype(np.int16), SPACING, ORIGIN, AXIAL)
        rc, _, err = render(p, os.path.join(d, name), "--convert", "hu")
        if not check(rc == 0, f"{name}: renders (warnings, not refusals): {err}"):
            continue
        codes = [w["code"] for w in sidecar(os.path.join(d, name))["load"]["warnings"]]
        if code:
            check(codes == [code] and f"[{code}]" in err and "warning" in err, f"{name}: warning {code}: {codes} {err}")
        else:
            check(codes == [] and "warning" not in err, f"{name}: no warning: {codes} {err}")
    # mu and labels input is not HU: no HU check
    rc, j, err = dump(os.path.join(d, "mri.mha"), "--convert", "mu")
    check(rc == 0 and j["warnings"] == [], f"no HU warning for --convert mu: {j}")


def nifti1(path, data, dtype_code, pixdim, scl=(0.0, 0.0), qform=None, sform=None):
    """A NIfTI-1 file by hand: qform = (code, quaternion b c d, offset xyz); sform = (code, 3x4 rows)."""
    h = bytearray(352)
    struct.pack_into("<i", h, 0, 348)
    nz, ny, nx = data.shape
    struct.pack_into("<8h", h, 40, 3, nx, ny, nz, 1, 1, 1, 1)
    bitpix = data.dtype.itemsize * 8
    struct.pack_into("<hh", h, 70, dtype_code, bitpix)
    struct.pack_into("<8f", h, 76, 1.0, *pixdim, 1, 1, 1, 1)
    struct.pack_into("<fff", h, 108, 352.0, scl[0], scl[1])
    if qform:
        struct.pack_into("<h", h, 252, qform[0])
        struct.pack_into("<6f", h, 256, *qform[1], *qform[2])
    if sform:
        struct.pack_into("<h", h, 254, sform[0])
        for r in range(3):
            struct.pack_into("<4f", h, 280 + 16 * r, *sform[1][r])
    h[344:348] = b"n+1\0"
    with open(path, "wb") as f:
        f.write(bytes(h) + data.astype(data.dtype.newbyteorder("<")).tobytes())


def test_nifti_scaling_and_transforms():
    d = fresh("nifti")
    v = known_volume(9)
    stored = ((v.astype(np.int32) + 1024) // 2).astype(np.int16)  # HU = 2 * stored - 1024
    p = os.path.join(d, "scaled.nii")
    nifti1(p, stored, 4, (0.75, 0.5, 2.5), scl=(2.0, -1024.0), qform=(1, (0, 0, 0), (5.0, -6.0, 7.0)))
    rc, j, err = dump(p, "--convert", "mu", npy=os.path.join(d, "s.npy"))
    check(rc == 0 and np.array_equal(np.load(os.path.join(d, "s.npy")), v.astype(np.float32)),
          f"NIfTI scl_slope 2 / scl_inter -1024 honoured: {err}")
    # qform: RAS, identity rotation, offset (5,-6,7) -> LPS (-5, 6, 7), axes -x, -y, +z
    check(rc == 0 and j["xform"] == "qform" and j["xform_disagree_mm"] == -1 and not j["warnings"], f"qform only: {j}")
    expect_affine(j, ((-1, 0, 0), (0, -1, 0), (0, 0, 1)), (0.75, 0.5, 2.5), (-5.0, 6.0, 7.0), "qform")
    # sform 120 mm away from the qform (as in real atlases): the sform by default, the disagreement
    # reported; --nifti-transform qform takes the qform
    srows = ((0.75, 0, 0, 125.0), (0, 0.5, 0, -6.0), (0, 0, 2.5, 7.0))
    q = os.path.join(d, "disagree.nii")
    nifti1(q, stored, 4, (0.75, 0.5, 2.5), scl=(2.0, -1024.0), qform=(1, (0, 0, 0), (5.0, -6.0, 7.0)), sform=(2, srows))
    rc, j, err = dump(q)
    if check(rc == 0, f"disagreeing q/sform loads: {err}"):
        check(j["xform"] == "sform" and abs(j["xform_disagree_mm"] - 120) < 1e-4 and
              [w["code"] for w in j["warnings"]] == ["nifti_qform_sform"], f"sform used, 120 mm reported: {j}")
        expect_affine(j, ((-1, 0, 0), (0, -1, 0), (0, 0, 1)), (0.75, 0.5, 2.5), (-125.0, 6.0, 7.0), "sform")
    rc, j, err = dump(q, "--nifti-transform", "qform")
    check(rc == 0 and j["xform"] == "qform" and j["index_to_model"][0][3] == -5.0, f"--nifti-transform qform: {j}")
    rc, out, err = run(XTWIN, "render", "--volume", q, "--nifti-transform", "qform", "--mode", "fd20-128", "--out",
                       os.path.join(d, "r"))
    check(rc == 0 and "[nifti_qform_sform]" in err and sidecar(os.path.join(d, "r"))["load"]["nifti"]["transform_used"] ==
          "qform", f"CLI: the choice and the warning: {err}")
    # agreeing within a voxel: no warning
    srows = ((0.75, 0, 0, 5.2), (0, 0.5, 0, -6.0), (0, 0, 2.5, 7.0))
    nifti1(q, stored, 4, (0.75, 0.5, 2.5), qform=(1, (0, 0, 0), (5.0, -6.0, 7.0)), sform=(2, srows))
    rc, j, err = dump(q)
    check(rc == 0 and j["warnings"] == [] and abs(j["xform_disagree_mm"] - 0.2) < 1e-4, f"0.2 mm: no warning: {j}")


def test_coverage():
    d = fresh("coverage")
    v = known_volume(10)
    p = os.path.join(d, "v.mha")
    write_mha(p, v, SPACING, (400.0, 0.0, 0.0), AXIAL)  # 400 mm to the patient's left
    rc, out, err = run(XTWIN, "render", "--volume", p, "--convert", "hu", "--place", "native", "--mode", "fd20-128",
                       "--out", os.path.join(d, "miss"))
    cov = sidecar(os.path.join(d, "miss"))["coverage"] if rc == 0 else {}
    check(rc == 0 and cov.get("status") == "missed" and cov.get("bbox_status") == "missed" and
          "[coverage_missed]" in err, f"a model beside the beam: missed, warned: {err} {cov}")
    rc, out, err = run(XTWIN, "render", "--volume", p, "--convert", "hu", "--mode", "fd20-128", "--out",
                       os.path.join(d, "in"))
    cov = sidecar(os.path.join(d, "in"))["coverage"] if rc == 0 else {}
    check(rc == 0 and cov.get("status") == "inside" and "coverage" not in err, f"centred: inside: {err} {cov}")
    write_mha(p, v, (20.0, 20.0, 20.0), (0.0, 0.0, 0.0), AXIAL)  # 480 x 400 x 240 mm: wider than the detector
    rc, out, err = run(XTWIN, "render", "--volume", p, "--convert", "hu", "--mode", "fd20-128", "--out",
                       os.path.join(d, "clip"))
    cov = sidecar(os.path.join(d, "clip"))["coverage"] if rc == 0 else {}
    check(rc == 0 and cov.get("status") == "clipped" and cov.get("edge_pixels_attenuated", 0) > 0 and
          "[coverage_clipped]" in err, f"larger than the field: clipped: {err} {cov}")


def test_pixel_edge_sidecar():
    """The sidecar's pixel-edge matrix is T P and projects xtwin's pixel centres to index + 0.5."""
    d = fresh("edge")
    rc, out, err = run(XTWIN, "render", "--phantom-size", "16", "--phantom-spacing", "8", "--primary", "30",
                       "--secondary", "-20", "--detector-rot", "10", "--mode", "fd20-256", "--out", os.path.join(d, "e"))
    if not check(rc == 0, f"render: {err}"):
        return
    s = sidecar(os.path.join(d, "e"))
    P, Pe = np.array(s["geometry"]["P"]), np.array(s["geometry_pixel_edge"]["P"])
    T = np.array([[1, 0, 0.5], [0, 1, 0.5], [0, 0, 1]])
    check(np.allclose(Pe, T @ P, rtol=0, atol=1e-9 * np.abs(P).max()), "P_edge = T P")
    check(np.allclose(np.linalg.inv(T) @ Pe, P, rtol=0, atol=1e-9 * np.abs(P).max()), "and back")
    g = s["geometry"]
    for c, r in ((0, 0), (255, 0), (100, 200)):
        X = np.array(g["det_origin"]) + c * s["detector"]["pitch_u_mm"] * np.array(g["u"]) + \
            r * s["detector"]["pitch_v_mm"] * np.array(g["v"])
        h = Pe @ np.append(X, 1)
        check(abs(h[0] / h[2] - (c + 0.5)) < 1e-6 and abs(h[1] / h[2] - (r + 0.5)) < 1e-6, f"pixel ({c},{r}) centre")
    check(s["geometry_pixel_edge"]["principal_point"] == [128.0, 128.0], "principal point cols/2, rows/2")


def test_server_model_report():
    if SERVER == "-":
        print("  (xtwin-server not built: skipped)")
        return
    d = fresh("server")
    v = known_volume(11)
    write_mha(os.path.join(d, "mri.mha"), np.clip(v + 1000, 0, None).astype(np.int16), SPACING, (500.0, 0, 0), AXIAL)
    series = fresh("server_dicom")
    uid = write_series(series, v, SPACING, (-9.0, -5.0, -15.0), AXIAL, number=4)
    write_series(series, known_volume(12), SPACING, ORIGIN, AXIAL, number=5, prefix="z")
    cfg = os.path.join(d, "cfg.json")
    with open(cfg, "w") as f:
        json.dump({"models": [{"path": os.path.join(d, "mri.mha"), "convert": "hu", "name": "mri"},
                              {"path": series, "series": uid, "convert": "hu", "name": "ct"}],
                   "backend": "cpu", "threads": 1, "mode": "fd20-128", "autostart": False, "phantom": "none"}, f)
    ports = os.path.join(d, "ports.json")
    proc = subprocess.Popen([SERVER, "--config", cfg, "--rest-port", "0", "--ws-port", "0", "--ports-file", ports],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        t0 = time.time()
        while not os.path.exists(ports) and proc.poll() is None and time.time() - t0 < 60:
            time.sleep(0.05)
        if not check(os.path.exists(ports), f"server started: {proc.stdout.read().decode() if proc.poll() is not None else ''}"):
            return
        time.sleep(0.05)
        rest = json.load(open(ports))["rest"]
        models = json.load(urllib.request.urlopen(f"http://127.0.0.1:{rest}/v1/models", timeout=30))["models"]
        by = {m["name"]: m for m in models}
        mri, ct = by.get("mri", {}), by.get("ct", {})
        check([w["code"] for w in mri.get("load", {}).get("warnings", [])] == ["hu_offset_1024"] and
              mri.get("coverage", {}).get("status") == "missed",
              f"server: HU warning and coverage in the model report: {mri}")
        check(ct.get("load", {}).get("dicom", {}).get("series_instance_uid") == uid and ct["load"]["warnings"] == [] and
              ct.get("coverage", {}).get("status") == "inside" and ct["dim"] == [24, 20, 12],
              f"server: DICOM series picked by the config's series key: {ct}")
        req = urllib.request.Request(f"http://127.0.0.1:{rest}/v1/models", method="POST",
                                     data=json.dumps({"path": series, "convert": "hu"}).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=30)
            check(False, "POST of an ambiguous folder must fail")
        except urllib.error.HTTPError as e:
            body = json.loads(e.read())
            check(e.code == 400 and uid in body["error"]["message"], f"POST: 400 listing the series: {body}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


TESTS = [test_series_shuffled_axial, test_series_negative_and_oblique, test_two_series_one_folder,
         test_missing_slice_and_tilt, test_rescale_rle_enhanced, test_pydicom_ct_files, test_compressed_lossless_equal,
         test_nan_fill, test_hu_sanity, test_nifti_scaling_and_transforms, test_coverage, test_pixel_edge_sidecar,
         test_server_model_report]


def main():
    os.makedirs(SCRATCH, exist_ok=True)
    only = set(sys.argv[5:])
    failed = 0
    ran = 0
    for t in TESTS:
        if only and t.__name__ not in only:
            continue
        before = len(FAILS)
        try:
            t()
        except Exception as e:  # a crash in one test is that test's failure
            import traceback
            traceback.print_exc()
            FAILS.append(f"{t.__name__}: {e}")
        ok = len(FAILS) == before
        failed += not ok
        ran += 1
        print(f"{'ok  ' if ok else 'FAIL'} {t.__name__}")
    print(f"{ran - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
