#!/usr/bin/python3
"""DICOM out (issue 28), end to end through the real binaries and other tools as oracles.

`xtwin render --dicom` writes a run as Enhanced XA, classic XA and an X-Ray Radiation Dose SR. Each
object must pass dicom3tools' dciodvfy with no errors, read back with pydicom and with GDCM (its
Python binding, python3-gdcm, and gdcminfo), carry the pixels of the PNGs the same render wrote
(read here by the PNG reader of test_cli.py), and its geometry tags must reproduce the sidecar's P
of the delivered pixels within 0.5 px when P is rebuilt here from the DICOM definitions (PS3.3
C.8.19.5/C.8.19.6, PS3.17 Z.2), not from xtwin's code. The classic XA's approximations (no detector
rotation, no table, the isocentre at the matrix centre) are checked to hold where they are exact and
to be visible where they are not. The dose SR's figures are the sidecars' dose and exposure. Then a
real PACS: Debian's Orthanc on loopback with its own configuration in a temporary folder; `xtwin
store` sends the run and its dose report by C-STORE and the test reads them back through Orthanc's
REST API, byte for byte.

Then the server's study folder: `xtwin-server --chain --run-mode lockstep --study-dir DIR` runs two
acquisitions of 3 and 4 triggers; each run appears in DIR as Enhanced and classic XA with exactly its
frames, with the study's dose report over both (dciodvfy, frame counts and times, angles, the
report's events and pulses); its C-STOREs to a port where nothing listens fail, counted in /metrics.
A biplane server (`--planes 2 --identity --study-store` to Orthanc) writes plane B's runs too: plane
B's tags against P of the pose its session log states, the report's per-plane events and totals
against the server's dose, the objects in Orthanc, the /metrics counters, bad operator input. With
a PACS that accepts and never answers, a second biplane run is exposed and written while the send
is held (the server's own counters, no timing assert). That the frame path never waits for the
writer itself is the design's (server/study.c).

Last, `xtwin dataset` with a "dicom" section (biplane, two shards): every object valid, the shard's
pixels, each frame JSON's P from the tags of both planes, the report's dose against `xtwin render`
of the frames, a 2-task split byte for byte the same, no UID twice, the spec's errors.

  /usr/bin/python3 tests/test_dicom_out.py XTWIN XTWIN_SERVER|- SCRATCH [test ...]

Exit 0: all passed; 1: a failure; 77: a tool that scripts/install-deps installs is missing
(ctest: skipped, naming it)."""
import glob
import io
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

MISSING = []
try:
    import numpy as np
    import pydicom
except ImportError as e:
    MISSING.append(f"python: {e.name} (python3-numpy, python3-pydicom)")
try:
    import gdcm
except ImportError:
    gdcm = None
    MISSING.append("python3-gdcm")
for tool, pkg in (("dciodvfy", "dicom3tools"), ("gdcminfo", "libgdcm-tools"), ("Orthanc", "orthanc")):
    if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
        MISSING.append(f"{tool} ({pkg})")
if MISSING:
    print(f"test_dicom_out: skipped: missing {', '.join(MISSING)}; scripts/install-deps installs them")
    sys.exit(77)

XTWIN, SERVER, SCRATCH = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
_argv, sys.argv = sys.argv, [sys.argv[0], XTWIN, "-", SCRATCH]  # test_cli's argv: XTWIN RENDER_SRC SCRATCH
import test_cli  # noqa: E402  (its PNG reader: libpng's files read by an independent decoder)
sys.argv = _argv

FAILS = []
ORTHANC = shutil.which("Orthanc") or "/usr/sbin/Orthanc"


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print(f"  FAIL: {what}")
    return cond


def run(args, expect=0):
    p = subprocess.run([XTWIN] + args, capture_output=True, text=True, timeout=300)
    if p.returncode != expect:
        raise AssertionError(f"xtwin {' '.join(args)}: exit {p.returncode} (want {expect}): {p.stderr.strip()}")
    return p


# The runs: one with everything the Enhanced XA can state (detector rotation, table, SID), one the
# classic XA states exactly. Rendered once, shared by the tests.
RUNS = {
    "full": ["--angles", "-30,0,35", "--secondary", "12", "--detector-rot", "10", "--table", "5,-20,15", "--sid", "1100"],
    "plain": ["--angles", "-20,25", "--secondary", "-8"],
}
_made = {}


def render(name, extra=()):
    key = (name, tuple(extra))
    if key in _made:
        return _made[key]
    d = os.path.join(SCRATCH, name + ("_" + "_".join(x.strip("-") for x in extra[::2]) if extra else ""))
    shutil.rmtree(d, ignore_errors=True)
    prefix = os.path.join(d, "run")
    run(["render", "--phantom", "head-labels", "--phantom-size", "48", "--phantom-spacing", "4", "--mode", "fd20-128",
         "--chain", "--protocol", "1", "--dicom", "--out", prefix] + RUNS[name] + list(extra))
    sidecars = sorted(glob.glob(prefix + "_p*.json"), key=lambda p: json.load(open(p))["chain"]["frame"])
    _made[key] = (prefix, [json.load(open(p)) for p in sidecars], [p[:-5] for p in sidecars])
    return _made[key]


def dciodvfy_errors(path):
    p = subprocess.run(["dciodvfy", path], capture_output=True, text=True, timeout=120)
    return [l for l in (p.stdout + p.stderr).splitlines() if l.startswith("Error")]


# ---- geometry from the DICOM definitions ----------------------------------------------------------

def rot_iso_to_positioner(a1, a2, a3):
    """PS3.17 Z.2: P_pos = R3 . R2 . R1 . P_iso (angles in degrees)."""
    a1, a2, a3 = (math.radians(a) for a in (a1, a2, a3))
    r1 = np.array([[math.cos(a1), math.sin(a1), 0], [-math.sin(a1), math.cos(a1), 0], [0, 0, 1]])
    r2 = np.array([[1, 0, 0], [0, math.cos(a2), -math.sin(a2)], [0, math.sin(a2), math.cos(a2)]])
    r3 = np.array([[math.cos(a3), 0, -math.sin(a3)], [0, 1, 0], [math.sin(a3), 0, math.cos(a3)]])
    return r3 @ r2 @ r1


def project_detector_mm(R, sod, sid, p_iso):
    """A point of the isocentre system onto the detector plane: (x along Xp, z along Zp) in mm from
    where the central beam meets it. The source is at Yp = SOD, the plane at Yp = -(SID - SOD)."""
    q = R @ p_iso
    t = sid / (sod - q[1])
    return t * q[0], t * q[2]


def enhanced_pixel(ds, frame, p_patient):
    """Frame's pixel (col, row) of a patient point (LPS mm, HFS on the table) from the Enhanced XA's
    tags alone."""
    iso = frame.IsocenterReferenceSystemSequence[0]
    geo = frame.XRayGeometrySequence[0]
    fov = frame.FieldOfViewSequence[0]
    R = rot_iso_to_positioner(iso.PositionerIsocenterPrimaryAngle, iso.PositionerIsocenterSecondaryAngle,
                              iso.PositionerIsocenterDetectorRotationAngle)
    table = np.array([iso.TableXPositionToIsocenter, iso.TableYPositionToIsocenter, iso.TableZPositionToIsocenter])
    x, z = project_detector_mm(R, float(geo.DistanceSourceToIsocenter), float(geo.DistanceSourceToDetector),
                               np.asarray(p_patient, float) + table)
    sp_row, sp_col = (float(v) for v in ds.DetectorElementSpacing)
    size_row, size_col = (float(v) for v in ds.PhysicalDetectorSize)  # a row's length, a column's
    ncol, nrow = round(size_row / sp_col), round(size_col / sp_row)
    # the isocentre projects to the panel's centre (element centres at integers from the TLHC's)
    col_el = (ncol - 1) / 2 + x / sp_col
    row_el = (nrow - 1) / 2 - z / sp_row
    row0, col0 = (float(v) for v in fov.FieldOfViewOrigin)  # the FOV's TLHC, in elements
    b_row, b_col = (float(v) for v in ds.DetectorBinning)
    return (col_el + 0.5 - col0) / b_col - 0.5, (row_el + 0.5 - row0) / b_row - 0.5


def classic_pixel(ds, i, p_patient):
    """Frame i's pixel from the classic XA: its angles (first frame + increments), SID, SOD, Imager
    Pixel Spacing, the isocentre at the matrix centre; no detector rotation, no table."""
    a1 = float(ds.PositionerPrimaryAngle) + (float(ds.PositionerPrimaryAngleIncrement[i])
                                             if "PositionerPrimaryAngleIncrement" in ds else 0)
    a2 = float(ds.PositionerSecondaryAngle) + (float(ds.PositionerSecondaryAngleIncrement[i])
                                               if "PositionerSecondaryAngleIncrement" in ds else 0)
    x, z = project_detector_mm(rot_iso_to_positioner(a1, a2, 0), float(ds.DistanceSourceToPatient),
                               float(ds.DistanceSourceToDetector), np.asarray(p_patient, float))
    sp_row, sp_col = (float(v) for v in ds.ImagerPixelSpacing)
    return (ds.Columns - 1) / 2 + x / sp_col, (ds.Rows - 1) / 2 - z / sp_row


def p_pixel(P, p_world):
    h = np.asarray(P) @ np.append(p_world, 1.0)
    return h[0] / h[2], h[1] / h[2]


POINTS = [np.array([x, y, z], float) for x in (-80, 0, 80) for y in (-60, 0, 70) for z in (-90, 0, 90)]


def max_error(sidecar, pixel_of):
    """Largest distance (px) between P's pixel (the sidecar's delivered P) and pixel_of's, over a
    grid of patient points around the isocentre."""
    P = sidecar["detector"]["readout"]["P"]
    table = np.array(sidecar["pose"]["table_mm"], float)
    worst = 0.0
    for p in POINTS:
        c0, r0 = p_pixel(P, p + table)
        c1, r1 = pixel_of(p)
        worst = max(worst, math.hypot(c1 - c0, r1 - r0))
    return worst


# ---- tests ----------------------------------------------------------------------------------------

def test_objects_valid():
    """dciodvfy: no errors in any object, raw or processed pixels; gdcminfo reads each."""
    for extra in ((), ("--dicom-pixels", "raw")):
        prefix, _, _ = render("plain", extra)
        for suffix in ("_xa.dcm", "_xa_classic.dcm", "_sr.dcm"):
            path = prefix + suffix
            errs = dciodvfy_errors(path)
            check(not errs, f"dciodvfy {os.path.basename(path)} {' '.join(extra)}: {errs[:5]}")
            g = subprocess.run(["gdcminfo", path], capture_output=True, text=True, timeout=60)
            check(g.returncode == 0, f"gdcminfo {path}: exit {g.returncode} {g.stderr.strip()[:200]}")


def test_pixels_read_back():
    """pydicom and GDCM read the same frames, which are the run's processed (or raw) PNGs."""
    for extra, png in (((), "_proc.png"), (("--dicom-pixels", "raw"), "_raw.png")):
        prefix, sidecars, stems = render("plain", extra)
        for suffix in ("_xa.dcm", "_xa_classic.dcm"):
            path = prefix + suffix
            ds = pydicom.dcmread(path)
            arr = ds.pixel_array
            check(arr.shape == (len(stems), ds.Rows, ds.Columns), f"{path}: pydicom shape {arr.shape}")
            r = gdcm.ImageReader()
            r.SetFileName(path)
            check(r.Read(), f"{path}: GDCM ImageReader failed")
            img = r.GetImage()
            buf = img.GetBuffer()
            g = np.frombuffer(buf.encode("utf-8", "surrogateescape") if isinstance(buf, str) else buf, dtype="<u2")
            check(np.array_equal(g, arr.reshape(-1)), f"{path}: GDCM's pixels differ from pydicom's")
            for i, stem in enumerate(stems):
                ref = test_cli.read_png16_gray(stem + png)
                check(np.array_equal(arr[i], ref), f"{path} frame {i}: pixels differ from {os.path.basename(stem + png)}")
            pir = (ds.PixelIntensityRelationship if suffix == "_xa_classic.dcm" else
                   ds.PerFrameFunctionalGroupsSequence[0].FramePixelDataPropertiesSequence[0].PixelIntensityRelationship)
            check(pir == ("LIN" if extra else "LOG"), f"{path}: Pixel Intensity Relationship {pir}")


def test_enhanced_geometry_reproduces_P():
    """Every frame's tags give the sidecar's P within 0.5 px (rotation, table, SID included); and the
    per-frame technique is the frame's."""
    for name in ("full", "plain"):
        prefix, sidecars, _ = render(name)
        ds = pydicom.dcmread(prefix + "_xa.dcm")
        frames = ds.PerFrameFunctionalGroupsSequence
        check(len(frames) == len(sidecars) == int(ds.NumberOfFrames), f"{name}: {len(frames)} frames")
        for i, (f, sc) in enumerate(zip(frames, sidecars)):
            err = max_error(sc, lambda p: enhanced_pixel(ds, f, p))
            check(err < 0.5, f"{name} frame {i}: Enhanced XA geometry is {err:.3f} px off P")
            prm = sc["chain"]["parameters"]
            fa = f.FrameAcquisitionSequence[0]
            check(abs(float(fa.KVP) - prm["kv"]) < 1e-6 * prm["kv"] + 1e-9, f"{name} frame {i}: kVp {fa.KVP} vs {prm['kv']}")
            ma = prm["mas"] / prm["pulse_ms"] * 1000
            check(abs(fa.XRayTubeCurrentInmA - ma) < 1e-6 * ma, f"{name} frame {i}: mA {fa.XRayTubeCurrentInmA} vs {ma}")
            check(abs(f.FrameContentSequence[0].FrameAcquisitionDuration - prm["pulse_ms"]) < 1e-9,
                  f"{name} frame {i}: pulse width")
            pos = f.PositionerPositionSequence[0]
            check(abs(float(pos.PositionerPrimaryAngle) - sc["pose"]["primary_deg"]) < 1e-9 and
                  abs(float(pos.PositionerSecondaryAngle) - sc["pose"]["secondary_deg"]) < 1e-9, f"{name} frame {i}: angles")


def test_classic_geometry_and_its_approximations():
    """Classic XA: exact (< 0.5 px) without detector rotation and table; its stated approximations
    show (> 0.5 px) on the run that has them."""
    prefix, sidecars, _ = render("plain")
    ds = pydicom.dcmread(prefix + "_xa_classic.dcm")
    for i, sc in enumerate(sidecars):
        err = max_error(sc, lambda p: classic_pixel(ds, i, p))
        check(err < 0.5, f"plain frame {i}: classic XA geometry is {err:.3f} px off P")
    prefix, sidecars, _ = render("full")
    ds = pydicom.dcmread(prefix + "_xa_classic.dcm")
    err = max_error(sidecars[0], lambda p: classic_pixel(ds, 0, p))
    check(err > 0.5, f"full frame 0: classic XA cannot state rotation/table, yet is only {err:.3f} px off")


def sr_items(ds):
    """(concept meaning, item) of every content item, depth first."""
    out = []

    def walk(seq):
        for it in seq:
            out.append((it.ConceptNameCodeSequence[0].CodeMeaning, it))
            if "ContentSequence" in it:
                walk(it.ContentSequence)
    walk(ds.ContentSequence)
    return out


def num(it):
    return float(it.MeasuredValueSequence[0].NumericValue)


def test_dose_report():
    """TID 10001 root, one TID 10003 event per run, its figures the sidecars' dose and exposure, its
    event UID the images'."""
    prefix, sidecars, _ = render("full")
    sr = pydicom.dcmread(prefix + "_sr.dcm")
    xa = pydicom.dcmread(prefix + "_xa.dcm")
    check(sr.SOPClassUID == "1.2.840.10008.5.1.4.1.1.88.67", "SR SOP class")
    check(sr.ConceptNameCodeSequence[0].CodeValue == "113701" and sr.ContentTemplateSequence[0].TemplateIdentifier == "10001",
          "SR root: X-Ray Radiation Dose Report, TID 10001")
    check(sr.StudyInstanceUID == xa.StudyInstanceUID, "SR and images share the study")
    items = sr_items(sr)
    events = [it for m, it in items if m == "Irradiation Event X-Ray Data"]
    check(len(events) == 1, f"{len(events)} irradiation events")
    ev = {it.ConceptNameCodeSequence[0].CodeMeaning: it for it in events[0].ContentSequence}
    uid = xa.PerFrameFunctionalGroupsSequence[0].IrradiationEventIdentificationSequence[0].IrradiationEventUID
    check(ev["Irradiation Event UID"].UID == uid, "the event's UID is the images'")
    kap = sum(s["chain"]["dose"]["kap_gycm2"] for s in sidecars)
    k = sum(s["chain"]["dose"]["k_irp_mgy"] for s in sidecars)
    check(abs(num(ev["Dose Area Product"]) - kap * 1e-4) <= 1e-9 * kap + 1e-15, f"DAP {num(ev['Dose Area Product'])} vs {kap} Gy cm2")
    check(abs(num(ev["Dose (RP)"]) - k * 1e-3) <= 1e-9 * k + 1e-15, f"Dose (RP) {num(ev['Dose (RP)'])} vs {k} mGy")
    mean = lambda k: sum(s["chain"]["parameters"][k] for s in sidecars) / len(sidecars)  # noqa: E731
    check(abs(num(ev["KVP"]) - mean("kv")) < 1e-6 * mean("kv"), f"event kVp {num(ev['KVP'])} vs {mean('kv')}")
    check(abs(num(ev["Pulse Width"]) - mean("pulse_ms")) < 1e-6 * mean("pulse_ms"), "event pulse width")
    check(int(num(ev["Number of Pulses"])) == len(sidecars), "event number of pulses")
    check(abs(num(ev["Irradiation Duration"]) - len(sidecars) / 15.0) < 1e-6, "irradiation duration = pulses / rate")
    check(abs(num(ev["Positioner Primary Angle"]) - sidecars[0]["pose"]["primary_deg"]) < 1e-9, "event primary angle")
    check(abs(num(ev["Distance Source to Detector"]) - 1100) < 1e-9, "event SID")
    acc = [it for m, it in items if m == "Accumulated X-Ray Dose Data"]
    check(len(acc) == 1, "one accumulated-dose container (single plane)")
    tot = {it.ConceptNameCodeSequence[0].CodeMeaning: it for it in acc[0].ContentSequence}
    check(abs(num(tot["Dose Area Product Total"]) - kap * 1e-4) <= 1e-9 * kap + 1e-15, "DAP total")
    check(abs(num(tot["Dose (RP) Total"]) - sidecars[-1]["chain"]["dose"]["k_irp_total_mgy"] * 1e-3) < 1e-12,
          "Dose (RP) total = the run's total")
    check(tot["Acquisition Plane"].ConceptCodeSequence[0].CodeValue == "113622", "single plane")
    check(num(tot["Fluoro Dose Area Product Total"]) == 0 and abs(num(tot["Total Acquisition Time"]) - 3 / 15) < 1e-9,
          "an exposure run counts as acquisition")
    # stored fluoroscopy: SC, event type Fluoroscopy, counted in the fluoro totals
    prefix, sidecars, _ = render("plain", ("--dicom-fluoro",))
    sr = pydicom.dcmread(prefix + "_sr.dcm")
    check(pydicom.dcmread(prefix + "_xa.dcm").RadiationSetting == "SC", "stored fluoro: Radiation Setting SC")
    items = sr_items(sr)
    ev = {it.ConceptNameCodeSequence[0].CodeMeaning: it for it in [i for m, i in items if m == "Irradiation Event X-Ray Data"][0].ContentSequence}
    check(ev["Irradiation Event Type"].ConceptCodeSequence[0].CodeMeaning == "Fluoroscopy", "stored fluoro: event type")
    tot = {it.ConceptNameCodeSequence[0].CodeMeaning: it for it in [i for m, i in items if m == "Accumulated X-Ray Dose Data"][0].ContentSequence}
    kap = sum(s["chain"]["dose"]["kap_gycm2"] for s in sidecars)
    check(abs(num(tot["Fluoro Dose Area Product Total"]) - kap * 1e-4) <= 1e-9 * kap + 1e-15 and
          num(tot["Acquisition Dose Area Product Total"]) == 0 and abs(num(tot["Total Fluoro Time"]) - 2 / 15) < 1e-9,
          "stored fluoro: the fluoro totals")
    check(not dciodvfy_errors(prefix + "_sr.dcm") and not dciodvfy_errors(prefix + "_xa.dcm"), "stored fluoro: dciodvfy")


def test_identity():
    """A user's identity JSON goes into every object; the defaults say synthetic; a bad file is one
    line, exit 2, and no file of the command is left."""
    prefix, _, _ = render("plain")
    ds = pydicom.dcmread(prefix + "_xa.dcm")
    check(str(ds.PatientName) == "SYNTHETIC^XTWIN" and ds.ContentQualification == "RESEARCH", "defaults say synthetic")
    d = os.path.join(SCRATCH, "identity")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    ident = {"patient_name": "DOE^JANE", "patient_id": "P-0042", "patient_birth_date": "19700101", "patient_sex": "F",
             "study_instance_uid": "1.2.3.4.5.6.7.8.9", "accession_number": "ACC42", "study_description": "Coronary"}
    with open(os.path.join(d, "id.json"), "w") as f:
        json.dump(ident, f)
    out = os.path.join(d, "run")
    run(["render", "--phantom-size", "32", "--phantom-spacing", "6", "--mode", "fd20-128", "--chain", "--dicom",
         "--dicom-identity", os.path.join(d, "id.json"), "--out", out])
    for suffix in ("_xa.dcm", "_xa_classic.dcm", "_sr.dcm"):
        ds = pydicom.dcmread(out + suffix)
        check(str(ds.PatientName) == "DOE^JANE" and ds.PatientID == "P-0042" and ds.StudyInstanceUID == "1.2.3.4.5.6.7.8.9"
              and ds.AccessionNumber == "ACC42", f"{suffix}: identity")
        check(ds.get("ContentQualification", "PRODUCT") != "RESEARCH", f"{suffix}: a real identity is not marked research")
    with open(os.path.join(d, "bad.json"), "w") as f:
        json.dump({"patient_nmae": "X"}, f)
    bad = os.path.join(d, "bad", "run")
    p = run(["render", "--phantom-size", "32", "--phantom-spacing", "6", "--mode", "fd20-128", "--chain", "--dicom",
             "--dicom-identity", os.path.join(d, "bad.json"), "--out", bad], expect=2)
    check("patient_nmae" in p.stderr and p.stderr.count("\n") == 1, f"bad identity: one line naming the key: {p.stderr!r}")
    check(not glob.glob(bad + "*"), "bad identity: no output file left")
    with open(os.path.join(d, "bad_date.json"), "w") as f:
        json.dump({"patient_birth_date": "1970Jan1"}, f)
    p = run(["render", "--phantom-size", "32", "--phantom-spacing", "6", "--mode", "fd20-128", "--chain", "--dicom",
             "--dicom-identity", os.path.join(d, "bad_date.json"), "--out", bad], expect=2)
    check("patient_birth_date" in p.stderr and "YYYYMMDD" in p.stderr, f"bad date: {p.stderr!r}")
    check(not glob.glob(bad + "*"), "bad date: no output file left")
    p = run(["render", "--phantom-size", "32", "--mode", "fd20-128", "--dicom", "--out", bad], expect=2)
    check("--chain" in p.stderr, f"--dicom without --chain: {p.stderr!r}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_orthanc():
    """Debian's Orthanc on loopback, its own configuration and storage in a temporary folder, AE title
    XTPACS (checked). Returns (proc, log, tmp, base URL, DICOM port)."""
    tmp = tempfile.mkdtemp(prefix="xt-orthanc-", dir=SCRATCH)
    http, dicom = free_port(), free_port()
    cfg = {"Name": "xtwin-test", "StorageDirectory": os.path.join(tmp, "db"), "IndexDirectory": os.path.join(tmp, "db"),
           "HttpPort": http, "DicomPort": dicom, "DicomAet": "XTPACS", "RemoteAccessAllowed": False,
           "AuthenticationEnabled": False, "HttpServerEnabled": True, "DicomServerEnabled": True,
           "DicomCheckCalledAet": True, "Plugins": [], "StorageCompression": False, "HttpDescribeErrors": True}
    with open(os.path.join(tmp, "orthanc.json"), "w") as f:
        json.dump(cfg, f)
    log = open(os.path.join(tmp, "orthanc.log"), "w")
    proc = subprocess.Popen([ORTHANC, os.path.join(tmp, "orthanc.json")], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{http}"
    deadline = time.time() + 60
    while True:
        try:
            urllib.request.urlopen(base + "/system", timeout=2).read()
            return proc, log, tmp, base, dicom
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                stop_orthanc(proc, log)
                raise AssertionError(f"Orthanc did not start (see {tmp}/orthanc.log)")
            time.sleep(0.2)


def stop_orthanc(proc, log):
    """Orthanc takes seconds to stop on SIGTERM; its folder is a throwaway, so it is killed after 0.5 s."""
    proc.terminate()
    try:
        proc.wait(timeout=0.5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=20)
    log.close()


def orthanc_datasets(base):
    """Every instance Orthanc holds, as pydicom data sets."""
    ids = json.load(urllib.request.urlopen(base + "/instances", timeout=10))
    return [pydicom.dcmread(io.BytesIO(urllib.request.urlopen(f"{base}/instances/{i}/file", timeout=30).read())) for i in ids]


def test_orthanc_store():
    """A real PACS: Orthanc on loopback; the run and its dose report by C-STORE; read back by REST."""
    prefix, _, _ = render("full")
    files = [prefix + s for s in ("_xa.dcm", "_xa_classic.dcm", "_sr.dcm")]
    proc, log, tmp, base, dicom = start_orthanc()
    try:
        # a wrong AE title is refused (Orthanc checks the called AET), one line, exit 1
        p = run(["store", "--to", f"127.0.0.1:{dicom}", "--called", "NOTPACS"] + files, expect=1)
        check(p.stderr.count("\n") == 1, f"refused store: one line: {p.stderr!r}")
        run(["store", "--to", f"127.0.0.1:{dicom}", "--called", "XTPACS"] + files)
        ids = json.load(urllib.request.urlopen(base + "/instances", timeout=10))
        check(len(ids) == 3, f"Orthanc holds {len(ids)} instances")
        sent = {pydicom.dcmread(f).SOPInstanceUID: pydicom.dcmread(f) for f in files}
        classes = set()
        for i in ids:
            tags = json.load(urllib.request.urlopen(f"{base}/instances/{i}/simplified-tags", timeout=10))
            classes.add(tags["SOPClassUID"])
            body = urllib.request.urlopen(f"{base}/instances/{i}/file", timeout=30).read()
            got = pydicom.dcmread(io.BytesIO(body))
            # the data set as sent, element for element (Orthanc writes its own File Meta Information)
            check(got.SOPInstanceUID in sent and got == sent[got.SOPInstanceUID],
                  f"instance {i} ({tags['SOPClassUID']}): its data set differs from the file sent")
            if tags["SOPClassUID"] == "1.2.840.10008.5.1.4.1.1.12.1.1":
                check(int(tags["NumberOfFrames"]) == 3, "Enhanced XA: 3 frames in Orthanc")
        check(classes == {"1.2.840.10008.5.1.4.1.1.12.1.1", "1.2.840.10008.5.1.4.1.1.12.1", "1.2.840.10008.5.1.4.1.1.88.67"},
              f"SOP classes in Orthanc: {classes}")
        studies = json.load(urllib.request.urlopen(base + "/studies", timeout=10))
        check(len(studies) == 1, f"one study in Orthanc, not {len(studies)}")
    finally:
        stop_orthanc(proc, log)
    # nothing there: one line, exit 1
    p = run(["store", "--to", f"127.0.0.1:{free_port()}", prefix + "_sr.dcm"], expect=1)
    check("no association" in p.stderr and p.stderr.count("\n") == 1, f"no PACS: {p.stderr!r}")
    run(["store", "--to", "nowhere", prefix + "_sr.dcm"], expect=2)
    shutil.rmtree(tmp, ignore_errors=True)


def http_json(port, method, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"null")


def test_server_study_folder():
    """xtwin-server --study-dir (lockstep, so that each run has exactly its triggers' frames): each chain run written as Enhanced + classic XA, the study's dose SR
    over every run, all valid; written by the server's writer thread, not the frame path."""
    if SERVER == "-":
        print("  (no xtwin-server in this build: skipped)")
        return
    d = os.path.join(SCRATCH, "study")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    ports = os.path.join(d, "ports.json")
    log = open(os.path.join(SCRATCH, "server-study.log"), "w")
    proc = subprocess.Popen([SERVER, "--rest-port", "0", "--ws-port", "0", "--ports-file", ports, "--backend", "cpu",
                             "--phantom-dim", "48", "--phantom-spacing", "4", "--mode", "fd20-128", "--fps", "15",
                             "--chain", "--run-mode", "lockstep", "--study-dir", d, "--study-store", f"127.0.0.1:{free_port()}"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while not os.path.exists(ports):
            if proc.poll() is not None or time.time() > deadline:
                raise AssertionError("xtwin-server did not start (see server-study.log)")
            time.sleep(0.05)
        time.sleep(0.1)
        rest = json.load(open(ports))["rest"]
        http_json(rest, "POST", "/v1/acquisition/stop")  # the start's run (lockstep: no frame without a trigger)
        # two runs in lockstep: exactly 3 and 4 frames, one per trigger, however slow the build
        for pose, n in (({"primary_deg": 20, "secondary_deg": 5}, 3), ({"primary_deg": -35, "secondary_deg": -10}, 4)):
            http_json(rest, "PUT", "/v1/pose", pose)
            http_json(rest, "POST", "/v1/acquisition/start")
            for _ in range(n):
                http_json(rest, "POST", "/v1/acquisition/trigger")
            t_run = time.time() + 120
            while http_json(rest, "GET", "/v1/acquisition")["dose"]["run_frames"] != n and time.time() < t_run:
                time.sleep(0.1)
            http_json(rest, "POST", "/v1/acquisition/stop")
            time.sleep(1.2)  # stopped and quiet: the writer writes the run
        deadline = time.time() + 30
        while len(glob.glob(os.path.join(d, "*", "run-a-*_xa.dcm"))) < 2 and time.time() < deadline:
            time.sleep(0.2)
        while metrics(rest).get("xtwin_study_store_failures_total", 0) < 1 and time.time() < deadline:
            time.sleep(0.2)
        m = metrics(rest)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    check(proc.returncode == 0, f"xtwin-server exit {proc.returncode}")
    # a PACS that is not there: every send counted as failed, the files written all the same
    check(m.get("xtwin_study_store_failures_total", 0) >= 1 and m.get("xtwin_study_stored_total") == 0,
          f"C-STORE to nothing: {m.get('xtwin_study_stored_total')} stored, {m.get('xtwin_study_store_failures_total')} failed")
    with open(os.path.join(SCRATCH, "server-study.log")) as f:
        slog_text = f.read()
    check("C-STORE" in slog_text and "failed C-STOREs" in slog_text, "C-STORE failures: one line each, and the count at the stop")
    runs = sorted(glob.glob(os.path.join(d, "*", "run-a-*_xa.dcm")), key=lambda f: int(f.split("-")[-1].split("_")[0]))
    check(len(runs) == 2, f"{len(runs)} runs written, 2 expected: {os.listdir(d)}")
    srs = glob.glob(os.path.join(d, "*", "dose_sr.dcm"))
    check(len(srs) == 1, f"one dose report, not {len(srs)}")
    check(not glob.glob(os.path.join(d, "*", "*.tmp")), "no temporary left")
    files = runs + [r.replace("_xa.dcm", "_xa_classic.dcm") for r in runs] + srs
    total = 0
    for f in files:
        errs = dciodvfy_errors(f)
        check(not errs, f"dciodvfy {os.path.basename(f)}: {errs[:5]}")
    for k, r in enumerate(runs):
        ds = pydicom.dcmread(r)
        n = int(ds.NumberOfFrames)
        total += n
        check(n == 3 + k, f"{os.path.basename(r)}: {n} frames; the run had {3 + k}")
        a = [float(f.PositionerPositionSequence[0].PositionerPrimaryAngle) for f in ds.PerFrameFunctionalGroupsSequence]
        check(set(a) == {(20.0, -35.0)[k]}, f"{os.path.basename(r)}: angles {set(a)}")
        times = [f.FrameContentSequence[0].FrameAcquisitionDateTime for f in ds.PerFrameFunctionalGroupsSequence]
        check(times == sorted(times) and len(set(times)) == n, f"{os.path.basename(r)}: frame times in order")
    if srs:
        sr = pydicom.dcmread(srs[0])
        events = [it for m, it in sr_items(sr) if m == "Irradiation Event X-Ray Data"]
        check(len(events) == len(runs), f"dose report: {len(events)} events for {len(runs)} runs")
        pulses = sum(num({it.ConceptNameCodeSequence[0].CodeMeaning: it for it in e.ContentSequence}["Number of Pulses"])
                     for e in events)
        check(int(pulses) == total, f"dose report: {pulses} pulses, the runs have {total} frames")


# ---- xtwin dataset's DICOM output -----------------------------------------------------------------

DS_SPEC = {
    "seed": 7, "frames": 5, "backend": "cpu", "detector": {"modes": ["fd20-128"]},
    "models": [{"name": "head", "phantom": "head-labels", "size": 32, "spacing_mm": 6}],
    "poses": {"primary_deg": [-40, 40], "secondary_deg": [-20, 20], "detector_rot_deg": [-10, 10],
              "sid_mm": [1000, 1200], "table_mm": [[-10, 10], [-20, 20], [-30, 30]]},
    "plane_b": {"mode": "fd20-128", "pose": {"primary_offset_deg": 90, "secondary_deg": [-5, 5], "detector_rot_deg": 4}},
    "chain": {"kv": [60, 90], "dose_ngy": [200, 800], "noise": False},
    "write": {"lineint": False, "raw": False, "processed": True},
    "output": {"format": "folder", "shard_frames": 3},
    "dicom": {"classic": True, "identity": "id.json"},
}


def dataset_run(d, spec, *args, expect=0):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "spec.json"), "w") as f:
        json.dump(spec, f)
    return run(["dataset", os.path.join(d, "spec.json")] + list(args), expect=expect)


def render_dataset_frame(d, meta, name):
    """`xtwin render --chain` of one dataset frame (one plane's metadata): its sidecar (dose)."""
    ch = meta["imaging"]["chain"]
    args = ["render", "--phantom", "head-labels", "--phantom-size", "32", "--phantom-spacing", "6", "--mode",
            meta["detector"]["mode"], "--threads", "1", "--chain", "--frame", str(ch["frame"]), "--out", os.path.join(d, name),
            "--table", ",".join(repr(v) for v in meta["pose"]["table_mm"])]
    for k, opt in (("primary_deg", "--primary"), ("secondary_deg", "--secondary"), ("detector_rot_deg", "--detector-rot"),
                   ("sod_mm", "--sod"), ("sid_mm", "--sid")):
        args += [opt, repr(meta["pose"][k])]
    for k, v in ch["parameters"].items():
        args += ["--" + k.replace("_", "-"), repr(v)]
    run(args)
    with open(os.path.join(d, name + ".json")) as f:
        return json.load(f)


def test_dataset_dicom():
    """`xtwin dataset` with "dicom": per shard an Enhanced XA (and classic XA) per plane and the shard's
    dose SR; dciodvfy clean; pixels the shard's processed.npy; each frame's tags give its JSON's P
    (both planes) within 0.5 px; the SR's events per plane with their dose as `xtwin render` of the
    frames gives it; the same objects from a 2-task split; no UID shared; a bad identity refused."""
    d = os.path.join(SCRATCH, "dataset")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "id.json"), "w") as f:
        json.dump({"patient_name": "DOE^JOHN", "patient_id": "DS-1", "institution": "Lab"}, f)
    out = os.path.join(d, "one")
    dataset_run(d, DS_SPEC, "--out", out)
    shards = os.path.join(out, "shards")
    uids = {}
    for shard, nframes in ((0, 3), (1, 2)):
        line = json.load(open(os.path.join(shards, f"shard-{shard:06d}.json")))
        names = [os.path.basename(p) for p in line.get("dicom", [])]
        want = [f"shard-{shard:06d}_{pl}-fd20-128_xa{c}.dcm" for pl in "ab" for c in ("", "_classic")] + [f"shard-{shard:06d}_sr.dcm"]
        check(sorted(names) == sorted(want), f"shard {shard}: manifest lists {names}")
        for n in names:
            path = os.path.join(shards, n)
            errs = dciodvfy_errors(path)
            check(not errs, f"dciodvfy {n}: {errs[:5]}")
            ds = pydicom.dcmread(path)
            check(ds.SOPInstanceUID not in uids, f"{n}: SOP Instance UID also in {uids.get(ds.SOPInstanceUID)}")
            uids[ds.SOPInstanceUID] = n
            check(str(ds.PatientName) == "DOE^JOHN" and ds.PatientID == "DS-1", f"{n}: the identity file's patient")
        metas = [json.load(open(os.path.join(shards, f"shard-{shard:06d}", f"{shard * 3 + i:012d}.json"))) for i in range(nframes)]
        xa = {}
        for pl in "ab":
            ds = pydicom.dcmread(os.path.join(shards, f"shard-{shard:06d}_{pl}-fd20-128_xa.dcm"))
            xa[pl] = ds
            check(int(ds.NumberOfFrames) == nframes, f"shard {shard} plane {pl}: {ds.NumberOfFrames} frames, {nframes} in the shard")
            check(ds.PlaneIdentification == f"PLANE {pl.upper()}" and ds.PlanesInAcquisition == "BIPLANE",
                  f"shard {shard} plane {pl}: plane {ds.PlaneIdentification}, {ds.PlanesInAcquisition}")
            arr = ds.pixel_array.reshape(nframes, ds.Rows, ds.Columns)
            for i, (f, meta) in enumerate(zip(ds.PerFrameFunctionalGroupsSequence, metas)):
                m = meta if pl == "a" else meta["plane_b"]
                npy = np.load(os.path.join(shards, f"shard-{shard:06d}", f"{meta['key']}.processed{'_b' if pl == 'b' else ''}.npy"))
                check(np.array_equal(arr[i], npy), f"shard {shard} plane {pl} frame {i}: pixels differ from the shard's")
                err = max_error(m, lambda p: enhanced_pixel(ds, f, p))
                check(err < 0.5, f"shard {shard} plane {pl} frame {i}: Enhanced XA geometry {err:.3f} px off the JSON's P")
                check(abs(float(f.FrameAcquisitionSequence[0].KVP) - m["imaging"]["chain"]["parameters"]["kv"]) < 1e-6,
                      f"shard {shard} plane {pl} frame {i}: kVp")
        for pl, other in (("a", "b"), ("b", "a")):
            ref = xa[pl].ReferencedOtherPlaneSequence[0].ReferencedSOPInstanceUID
            check(ref == xa[other].SOPInstanceUID, f"shard {shard} plane {pl}: the other plane's object referenced")
        sr = pydicom.dcmread(os.path.join(shards, f"shard-{shard:06d}_sr.dcm"))
        check(sr.StudyInstanceUID == xa["a"].StudyInstanceUID == xa["b"].StudyInstanceUID, f"shard {shard}: one study")
        items = sr_items(sr)
        events = [{it.ConceptNameCodeSequence[0].CodeMeaning: it for it in e.ContentSequence}
                  for m_, e in items if m_ == "Irradiation Event X-Ray Data"]
        check(len(events) == 2, f"shard {shard}: {len(events)} irradiation events, one per plane")
        for e in events:
            pl = "a" if e["Acquisition Plane"].ConceptCodeSequence[0].CodeMeaning == "Plane A" else "b"
            uid = xa[pl].PerFrameFunctionalGroupsSequence[0].IrradiationEventIdentificationSequence[0].IrradiationEventUID
            check(e["Irradiation Event UID"].UID == uid, f"shard {shard}: plane {pl}'s event is its images'")
            check(int(num(e["Number of Pulses"])) == nframes, f"shard {shard} plane {pl}: pulses")
            if shard == 1:  # the dose, from `xtwin render` of each frame (the 2-frame shard: CI time)
                kap = sum(render_dataset_frame(d, m if pl == "a" else m["plane_b"], f"r{pl}{i}")["chain"]["dose"]["kap_gycm2"]
                          for i, m in enumerate(metas))
                check(abs(num(e["Dose Area Product"]) - kap * 1e-4) <= 1e-6 * kap * 1e-4, f"plane {pl} DAP {num(e['Dose Area Product'])} vs renders' {kap * 1e-4}")
        acc = [{it.ConceptNameCodeSequence[0].CodeMeaning: it for it in a.ContentSequence}
               for m_, a in items if m_ == "Accumulated X-Ray Dose Data"]
        check(sorted(a["Acquisition Plane"].ConceptCodeSequence[0].CodeMeaning for a in acc) == ["Plane A", "Plane B"],
              f"shard {shard}: accumulated dose per plane")
        for a in acc:
            pm = a["Acquisition Plane"].ConceptCodeSequence[0].CodeMeaning
            dap = sum(num(e["Dose Area Product"]) for e in events if e["Acquisition Plane"].ConceptCodeSequence[0].CodeMeaning == pm)
            check(abs(num(a["Dose Area Product Total"]) - dap) <= 1e-9 * dap, f"shard {shard} {pm}: DAP total = its events'")
    # two tasks (as Slurm's array would run them) into one folder: the same files, byte for byte
    split = os.path.join(d, "split")
    for t in ("0/2", "1/2"):
        dataset_run(d, DS_SPEC, "--out", split, "--shard", t)
    for n in sorted(glob.glob(os.path.join(shards, "*.dcm"))):
        other = os.path.join(split, "shards", os.path.basename(n))
        check(os.path.exists(other) and open(n, "rb").read() == open(other, "rb").read(),
              f"{os.path.basename(n)}: differs between one task and a 2-task split")
    # bad input: one line naming the field and the key; nothing written
    with open(os.path.join(d, "bad.json"), "w") as f:
        json.dump({"patient_sex": "X"}, f)
    bad = os.path.join(d, "bad_out")
    p = dataset_run(d, dict(DS_SPEC, dicom={"identity": "bad.json"}), "--out", bad, expect=2)
    check("dicom.identity" in p.stderr and "patient_sex" in p.stderr and p.stderr.count("\n") == 1,
          f"bad identity: {p.stderr!r}")
    check(not os.path.exists(bad), "bad identity: nothing written")
    with open(os.path.join(d, "uid.json"), "w") as f:
        json.dump({"study_instance_uid": "1.2.3"}, f)
    p = dataset_run(d, dict(DS_SPEC, dicom={"identity": "uid.json"}), "--out", bad, expect=2)
    check("study_instance_uid" in p.stderr, f"identity with a study UID: {p.stderr!r}")
    p = dataset_run(d, {k: v for k, v in DS_SPEC.items() if k not in ("chain", "write")}, "--out", bad, expect=2)
    check("dicom" in p.stderr and "chain" in p.stderr, f"dicom without a chain: {p.stderr!r}")
    p = dataset_run(d, dict(DS_SPEC, dicom={"pixels": "log"}), "--out", bad, expect=2)
    check("dicom.pixels" in p.stderr, f"dicom.pixels: {p.stderr!r}")


def start_server(d, args, log_name):
    ports = os.path.join(d, "ports.json")
    log = open(os.path.join(SCRATCH, log_name), "w")
    proc = subprocess.Popen([SERVER, "--rest-port", "0", "--ws-port", "0", "--ports-file", ports, "--backend", "cpu"] + args,
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while not os.path.exists(ports):
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            log.close()
            raise AssertionError(f"xtwin-server did not start (see {log_name})")
        time.sleep(0.05)
    time.sleep(0.1)
    return proc, log, json.load(open(ports))["rest"]


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#") and " " in line:
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out


def test_server_biplane_study():
    """xtwin-server --planes 2 --study-dir --identity: plane B's runs are in the study folder beside
    plane A's (PLANE A / PLANE B, each naming the other), plane B's tags give the P of its frames'
    pose (from the session log, through `xtwin render`) within 0.5 px, the dose report carries both
    planes' events and per-plane totals equal to the server's own dose accounting; the folder's
    counters are in /metrics; a bad identity file stops the server with one line."""
    if SERVER == "-":
        print("  (no xtwin-server in this build: skipped)")
        return
    d = os.path.join(SCRATCH, "study_bp")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "id.json"), "w") as f:
        json.dump({"patient_name": "ROE^RICHARD", "patient_id": "BP-7", "accession_number": "A7"}, f)
    slog = os.path.join(d, "session.jsonl")
    oproc, olog, _, obase, odicom = start_orthanc()
    try:
        proc, log, rest = start_server(d, ["--phantom-dim", "48", "--phantom-spacing", "4", "--mode", "fd20-128", "--mode-b",
                                           "fd20-128", "--fps", "15", "--chain", "--run-mode", "lockstep", "--planes", "2",
                                           "--study-dir", d, "--identity", os.path.join(d, "id.json"), "--session-log", slog,
                                           "--study-store", f"127.0.0.1:{odicom}", "--study-called", "XTPACS"],
                                       "server-study-bp.log")
    except BaseException:
        stop_orthanc(oproc, olog)
        raise
    n = 3
    try:
        http_json(rest, "POST", "/v1/acquisition/stop")
        http_json(rest, "PUT", "/v1/pose", {"primary_deg": -25, "secondary_deg": 12, "table_mm": [6, -15, 20]})
        http_json(rest, "PUT", "/v1/planes/b/pose", {"primary_deg": 84, "secondary_deg": 7, "detector_rot_deg": 4, "sid_mm": 1150})
        http_json(rest, "POST", "/v1/acquisition/start")
        for _ in range(n):
            http_json(rest, "POST", "/v1/acquisition/trigger")
        t_run = time.time() + 120
        while time.time() < t_run:
            planes = http_json(rest, "GET", "/v1/acquisition")["dose"]["planes"]
            if planes["A"]["run_frames"] == n and planes["B"]["run_frames"] == n:
                break
            time.sleep(0.1)
        dose = http_json(rest, "GET", "/v1/acquisition")["dose"]["planes"]
        http_json(rest, "POST", "/v1/acquisition/stop")
        deadline = time.time() + 30
        while time.time() < deadline and (len(glob.glob(os.path.join(d, "*", "run-*_xa.dcm"))) < 2 or
                                          metrics(rest).get("xtwin_study_runs_written_total", 0) < 2 or
                                          metrics(rest).get("xtwin_study_stored_total", 0) < 4):
            time.sleep(0.2)
        m = metrics(rest)
        in_pacs_before_stop = len(orthanc_datasets(obase))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
        try:
            in_pacs = orthanc_datasets(obase)
        finally:
            stop_orthanc(oproc, olog)
    check(proc.returncode == 0, f"xtwin-server exit {proc.returncode}")
    files = sorted(glob.glob(os.path.join(d, "*", "*.dcm")))
    names = sorted(os.path.basename(f) for f in files)
    check(names == ["dose_sr.dcm", "run-a-1_xa.dcm", "run-a-1_xa_classic.dcm", "run-b-1_xa.dcm", "run-b-1_xa_classic.dcm"],
          f"study folder: {names}")
    if len(files) != 5:
        return
    for f in files:
        errs = dciodvfy_errors(f)
        check(not errs, f"dciodvfy {os.path.basename(f)}: {errs[:5]}")
        ds = pydicom.dcmread(f)
        check(str(ds.PatientName) == "ROE^RICHARD" and ds.PatientID == "BP-7" and ds.AccessionNumber == "A7",
              f"{os.path.basename(f)}: the --identity file's patient")
    # /metrics: the folder's counters, read before the shutdown wrote anything more
    check(m.get("xtwin_study_runs_written_total", 0) >= 2 and m.get("xtwin_study_objects_written_total", 0) >= 5 and
          m.get("xtwin_study_frames_dropped_total") == 0 and m.get("xtwin_study_write_errors_total") == 0 and
          m.get("xtwin_study_queue_frames") == 0 and "xtwin_study_queue_bytes" in m,
          f"/metrics study counters: { {k: v for k, v in m.items() if 'study' in k} }")
    # the PACS: each run's two objects as the writer wrote them, the dose report when the server stopped
    check(m.get("xtwin_study_stored_total", 0) >= 4 and m.get("xtwin_study_store_failures_total") == 0 and
          in_pacs_before_stop == 4, f"C-STORE before the stop: {in_pacs_before_stop} in Orthanc, metrics "
                                    f"{m.get('xtwin_study_stored_total')} stored, {m.get('xtwin_study_store_failures_total')} failed")
    sent = {}
    for f in files:
        ds = pydicom.dcmread(f)
        sent[ds.SOPInstanceUID] = ds
    check(len(in_pacs) == 5 and all(g.SOPInstanceUID in sent and g == sent[g.SOPInstanceUID] for g in in_pacs),
          f"Orthanc holds {len(in_pacs)} objects, 5 expected, each the file written element for element")
    sizes = sum(os.path.getsize(f) for f in files)
    check(m.get("xtwin_study_bytes_written_total", 0) >= sizes, f"/metrics bytes {m.get('xtwin_study_bytes_written_total')} < files' {sizes}")
    xa = {pl: pydicom.dcmread(os.path.join(os.path.dirname(files[0]), f"run-{pl}-1_xa.dcm")) for pl in "ab"}
    for pl, other in (("a", "b"), ("b", "a")):
        ds = xa[pl]
        check(int(ds.NumberOfFrames) == n, f"plane {pl}: {ds.NumberOfFrames} frames")
        check(ds.PlaneIdentification == f"PLANE {pl.upper()}" and ds.PlanesInAcquisition == "BIPLANE",
              f"plane {pl}: {ds.PlaneIdentification} {ds.PlanesInAcquisition}")
        check(ds.ReferencedOtherPlaneSequence[0].ReferencedSOPInstanceUID == xa[other].SOPInstanceUID,
              f"plane {pl}: references plane {other}'s object")
    # plane B's geometry: each frame's tags against P of the pose the server logged for it
    logged = [json.loads(l) for l in open(slog)]
    frames_b = [j for j in logged if j.get("type") == "frame" and j.get("plane") == 1 and j.get("run") == 1]
    check(len(frames_b) == n, f"session log: {len(frames_b)} plane B frames")
    sidecars = {}
    for i, (f, fl) in enumerate(zip(xa["b"].PerFrameFunctionalGroupsSequence, frames_b)):
        pose = tuple(fl["pose"])
        if pose not in sidecars:
            out = os.path.join(d, f"render_b{len(sidecars)}")
            run(["render", "--phantom-size", "16", "--phantom-spacing", "8", "--mode", fl["mode"], "--primary", repr(pose[0]),
                 "--secondary", repr(pose[1]), "--detector-rot", repr(pose[2]), "--sod", repr(pose[3]), "--sid", repr(pose[4]),
                 "--table", ",".join(repr(v) for v in pose[5:8]), "--out", out])
            sidecars[pose] = json.load(open(out + ".json"))
        sc = sidecars[pose]
        check(sc["detector"]["readout"]["matrix"] == [xa["b"].Columns, xa["b"].Rows], "plane B: the render's matrix is the run's")
        err = max_error(sc, lambda p: enhanced_pixel(xa["b"], f, p))
        check(err < 0.5, f"plane B frame {i}: Enhanced XA geometry {err:.3f} px off P")
        check(abs(float(f.PositionerPositionSequence[0].PositionerPrimaryAngle) - 84) < 1e-9, f"plane B frame {i}: its own angle")
    # the dose report: both planes' events, per-plane totals as the server counted them
    sr = pydicom.dcmread(os.path.join(os.path.dirname(files[0]), "dose_sr.dcm"))
    items = sr_items(sr)
    plane_of = lambda c: {"Plane A": "A", "Plane B": "B"}.get(c["Acquisition Plane"].ConceptCodeSequence[0].CodeMeaning)  # noqa: E731
    events = [{it.ConceptNameCodeSequence[0].CodeMeaning: it for it in e.ContentSequence} for m_, e in items
              if m_ == "Irradiation Event X-Ray Data"]
    check(sorted(plane_of(e) or "?" for e in events) == ["A", "B"], "dose report: one event of plane A, one of plane B")
    for e in events:
        pl = plane_of(e)
        uid = xa[pl.lower()].PerFrameFunctionalGroupsSequence[0].IrradiationEventIdentificationSequence[0].IrradiationEventUID
        check(e["Irradiation Event UID"].UID == uid, f"plane {pl}'s event is its run's")
        check(abs(num(e["Positioner Primary Angle"]) - (-25 if pl == "A" else 84)) < 1e-9, f"plane {pl}'s event: its angle")
    acc = [{it.ConceptNameCodeSequence[0].CodeMeaning: it for it in a.ContentSequence} for m_, a in items
           if m_ == "Accumulated X-Ray Dose Data"]
    check(sorted(plane_of(a) or "?" for a in acc) == ["A", "B"], "dose report: accumulated dose per plane")
    for a in acc:
        pl = plane_of(a)
        kap, k = dose[pl]["kap_total_gycm2"], dose[pl]["k_irp_total_mgy"]
        check(abs(num(a["Dose Area Product Total"]) - kap * 1e-4) <= 1e-9 * kap, f"plane {pl}: DAP total vs the server's {kap}")
        check(abs(num(a["Dose (RP) Total"]) - k * 1e-3) <= 1e-9 * k, f"plane {pl}: Dose (RP) total vs the server's {k}")
        check(int(num(a["Total Number of Radiographic Frames"])) == n, f"plane {pl}: frames")
    # bad operator input (identity file, PACS address): one line naming the file and key or option, exit 1
    bad = os.path.join(d, "bad_id.json")
    with open(bad, "w") as f:
        json.dump({"patient_birth_date": "7/4/1970"}, f)
    for args, words in ((["--study-dir", d, "--identity", bad], ("bad_id.json", "patient_birth_date")),
                        (["--identity", os.path.join(d, "id.json")], ("identity", "study_dir")),
                        (["--study-dir", d, "--study-store", "nowhere"], ("study_store", "HOST:PORT")),
                        (["--study-store", "127.0.0.1:104"], ("study_store", "study_dir"))):
        p = subprocess.run([SERVER, "--rest-port", "0", "--ws-port", "0", "--backend", "cpu", "--phantom-dim", "16",
                            "--chain"] + args, capture_output=True, text=True, timeout=60)
        check(p.returncode != 0 and all(w in p.stderr for w in words) and p.stderr.strip().count("\n") == 0,
              f"xtwin-server {' '.join(args[-2:])}: exit {p.returncode}: {p.stderr!r}")


def test_server_plane_b_alone_is_single_plane():
    """One plane alone on a biplane system (plane B's runs, plane A never exposed): its objects have no
    other plane to point to, so they say SINGLE PLANE (Image Type, Planes in Acquisition) and keep
    PLANE B as the Plane Identification - BIPLANE B would need the reference (dciodvfy: an error)."""
    if SERVER == "-":
        print("  (no xtwin-server in this build: skipped)")
        return
    d = os.path.join(SCRATCH, "study_b_alone")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    proc, log, rest = start_server(d, ["--phantom-dim", "32", "--phantom-spacing", "6", "--mode", "fd20-128", "--mode-b",
                                       "fd20-128", "--fps", "15", "--chain", "--run-mode", "lockstep", "--planes", "2",
                                       "--study-dir", d], "server-study-b-alone.log")
    try:
        http_json(rest, "POST", "/v1/acquisition/stop")
        http_json(rest, "PUT", "/v1/acquisition", {"biplane": {"planes": ["B"]}})
        http_json(rest, "POST", "/v1/acquisition/start")
        for _ in range(2):
            http_json(rest, "POST", "/v1/acquisition/trigger")
        deadline = time.time() + 60
        while time.time() < deadline and http_json(rest, "GET", "/v1/acquisition")["dose"]["planes"]["B"]["run_frames"] < 2:
            time.sleep(0.1)
        http_json(rest, "POST", "/v1/acquisition/stop")
        deadline = time.time() + 30
        while time.time() < deadline and metrics(rest).get("xtwin_study_runs_written_total", 0) < 1:
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    names = sorted(os.path.basename(f) for f in glob.glob(os.path.join(d, "*", "run-*.dcm")))
    check(names == ["run-b-1_xa.dcm", "run-b-1_xa_classic.dcm"], f"study folder: {names}")
    for f in glob.glob(os.path.join(d, "*", "run-*.dcm")):
        errs = dciodvfy_errors(f)
        check(not errs, f"{os.path.basename(f)}: dciodvfy: {errs[:3]}")
        ds = pydicom.dcmread(f)
        check(ds.ImageType[2] == "SINGLE PLANE", f"{os.path.basename(f)}: Image Type {list(ds.ImageType)}")
        if "PlanesInAcquisition" in ds:
            check(ds.PlanesInAcquisition == "SINGLE PLANE" and ds.PlaneIdentification == "PLANE B",
                  f"{os.path.basename(f)}: {ds.PlanesInAcquisition} / {ds.PlaneIdentification}")


def test_server_study_never_waits():
    """Storing never holds up the stream or the folder, on both planes: with the sender held in a
    C-STORE to a peer that accepts and never answers, a second biplane run's frames are all exposed
    and both planes' runs written while the send is still held (the server's own counters: no send
    finished). Then the peer goes away: the sends fail, counted, and every run is in the folder."""
    if SERVER == "-":
        print("  (no xtwin-server in this build: skipped)")
        return
    import threading
    d = os.path.join(SCRATCH, "study_wait")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(8)
    held = []

    def accept_and_hold():
        while True:
            try:
                c, _ = lsock.accept()
            except OSError:
                return
            held.append(c)
    threading.Thread(target=accept_and_hold, daemon=True).start()
    proc, log, rest = start_server(d, ["--phantom-dim", "32", "--phantom-spacing", "6", "--mode", "fd20-128", "--mode-b",
                                       "fd20-128", "--fps", "15", "--chain", "--run-mode", "lockstep", "--planes", "2",
                                       "--study-dir", d, "--study-store", f"127.0.0.1:{lsock.getsockname()[1]}",
                                       "--study-store-timeout", "300"], "server-study-wait.log")
    n = 2

    def one_run():  # n triggers, each a frame of both planes, published (the server's own count)
        before = metrics(rest).get("xtwin_frames_rendered_total", 0)
        http_json(rest, "POST", "/v1/acquisition/start")
        for _ in range(n):
            http_json(rest, "POST", "/v1/acquisition/trigger")
        t_run = time.time() + 120
        while time.time() < t_run and metrics(rest).get("xtwin_frames_rendered_total", 0) < before + 2 * n:
            time.sleep(0.05)
        http_json(rest, "POST", "/v1/acquisition/stop")
    try:
        http_json(rest, "POST", "/v1/acquisition/stop")
        one_run()
        # the first run written, the sender now in its C-STORE, which the peer never answers
        deadline = time.time() + 60
        while time.time() < deadline and not (metrics(rest).get("xtwin_study_objects_written_total", 0) >= 2 and held):
            time.sleep(0.1)
        check(held and metrics(rest).get("xtwin_study_stored_total", 0) + metrics(rest).get("xtwin_study_store_failures_total", 0) == 0,
              "the sender is held in its C-STORE")
        one_run()
        deadline = time.time() + 60
        while time.time() < deadline and metrics(rest).get("xtwin_study_runs_written_total", 0) < 4:
            time.sleep(0.1)
        m = metrics(rest)
        check(m.get("xtwin_study_store_failures_total", 0) + m.get("xtwin_study_stored_total", 0) == 0 and
              m.get("xtwin_study_runs_written_total", 0) >= 4 and m.get("xtwin_frames_rendered_total", 0) >= 4 * n,
              f"while the send was held, the second run's frames were exposed and both planes' runs written: "
              f"{ {k: v for k, v in m.items() if 'study' in k or 'rendered' in k} }")
        # the peer goes away: the send fails, and the writer catches up (shutdown wakes the thread in
        # accept(); a close alone would leave the socket listening until accept returns)
        try:
            lsock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        lsock.close()
        time.sleep(0.1)
        for c in list(held):
            c.close()
        deadline = time.time() + 60
        while time.time() < deadline and len(glob.glob(os.path.join(d, "*", "run-*_xa.dcm"))) < 4:
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
        lsock.close()
    check(proc.returncode == 0, f"xtwin-server exit {proc.returncode}")
    runs = sorted(os.path.basename(f) for f in glob.glob(os.path.join(d, "*", "run-*_xa.dcm")))
    check(len(runs) == 4 and {r[4] for r in runs} == {"a", "b"}, f"every run of both planes written: {runs}")
    for r in glob.glob(os.path.join(d, "*", "run-*_xa.dcm")):
        check(int(pydicom.dcmread(r).NumberOfFrames) == n, f"{os.path.basename(r)}: {n} frames")


TESTS = [test_objects_valid, test_pixels_read_back, test_enhanced_geometry_reproduces_P,
         test_classic_geometry_and_its_approximations, test_dose_report, test_identity, test_orthanc_store,
         test_server_study_folder, test_server_biplane_study, test_server_plane_b_alone_is_single_plane,
         test_server_study_never_waits, test_dataset_dicom]


def main():
    os.makedirs(SCRATCH, exist_ok=True)
    only = set(sys.argv[4:])
    failed = ran = 0
    for t in TESTS:
        if only and t.__name__ not in only:
            continue
        before = len(FAILS)
        t0 = time.time()
        try:
            t()
        except Exception as e:  # a crash in one test is that test's failure
            import traceback
            traceback.print_exc()
            FAILS.append(f"{t.__name__}: {e}")
        ok = len(FAILS) == before
        failed += not ok
        ran += 1
        print(f"{'ok  ' if ok else 'FAIL'} {t.__name__} ({time.time() - t0:.1f} s)")
    print(f"{ran - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
