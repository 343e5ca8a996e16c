#!/usr/bin/python3
"""A real single-node Slurm cluster runs `xtwin dataset` as a 4-task array.

The test starts munged (its own key and socket), slurmctld and slurmd (their own slurm.conf,
ports, state and spool directories) in a temporary directory, submits docs/dataset-sbatch.sh as
`sbatch --array=0-3`, waits for the array, and checks that the tasks' manifests concatenate to a
single-process run's manifest and that every shard is byte-identical to that run's, frame for frame
through the reader. Everything it started is stopped (by pid) and removed at the end.

It skips (exit 77) with the reason when Slurm cannot start here: the binaries are missing
(scripts/install-deps installs slurm-wlm and munge), munged or the daemons do not come up. Once
the cluster is up, anything that goes wrong is a failure.

usage: test_dataset_slurm.py XTWIN SOURCE_DIR SCRATCH_DIR"""
import atexit
import glob
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

XTWIN, SRC, SCRATCH = os.path.abspath(sys.argv[1]), sys.argv[2], os.path.abspath(sys.argv[3])
failures = []
procs = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("  FAIL:", what)
    return cond


def skip(why, log=None):
    print(f"skip: {why}")
    if log and os.path.exists(log):
        print("".join(open(log, errors="replace").readlines()[-15:]))
    stop()
    sys.exit(77)


def stop():
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    procs.clear()


# The daemons stop whatever way the test ends (a ctest timeout sends SIGTERM).
atexit.register(stop)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def sha(p):
    with open(p, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo"):
    if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
        skip(f"{tool} not found (scripts/install-deps installs slurm-wlm and munge)")


def which(tool):
    return shutil.which(tool) or f"/usr/sbin/{tool}"


T = os.path.join(SCRATCH, "cluster")
shutil.rmtree(SCRATCH, ignore_errors=True)
for d in ("state", "spool", "munge"):
    os.makedirs(os.path.join(T, d))
os.chmod(os.path.join(T, "munge"), 0o700)

# --- munge ------------------------------------------------------------------------------------
key = os.path.join(T, "munge", "munge.key")
with open(key, "wb") as f:
    f.write(os.urandom(1024))
os.chmod(key, 0o400)
sock = os.path.join(T, "munge", "munge.socket")
mlog = os.path.join(T, "munged.log")
p = subprocess.Popen([which("munged"), "--foreground", "--force", f"--key-file={key}", f"--socket={sock}",
                      f"--pid-file={T}/munge/munged.pid", f"--log-file={mlog}", f"--seed-file={T}/munge/seed"],
                     stdout=subprocess.DEVNULL, stderr=open(os.path.join(T, "munged.err"), "w"))
procs.append(p)
for _ in range(100):
    if os.path.exists(sock) or p.poll() is not None:
        break
    time.sleep(0.1)
if not os.path.exists(sock):
    skip("munged did not start", os.path.join(T, "munged.err"))

# --- slurm --------------------------------------------------------------------------------------
host = socket.gethostname().split(".")[0]
ncpu = os.cpu_count() or 1
conf = os.path.join(T, "slurm.conf")
with open(conf, "w") as f:
    f.write(f"""ClusterName=xtwintest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={T}/state
SlurmdSpoolDir={T}/spool
SlurmctldPidFile={T}/slurmctld.pid
SlurmdPidFile={T}/slurmd.pid
SlurmctldLogFile={T}/slurmctld.log
SlurmdLogFile={T}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=30
InactiveLimit=0
MinJobAge=600
KillWait=5
Waittime=0
NodeName=xtnode NodeHostname={host} NodeAddr=127.0.0.1 CPUs={ncpu} State=UNKNOWN
PartitionName=xt Nodes=xtnode Default=YES MaxTime=INFINITE State=UP
""")
env = dict(os.environ, SLURM_CONF=conf)
for k in list(env):
    if k.startswith("SLURM_") and k != "SLURM_CONF" or k in ("JOB_COMPLETION_INDEX", "XTWIN_SHARD_COUNT"):
        env.pop(k)
procs.append(subprocess.Popen([which("slurmctld"), "-D", "-i", "-f", conf], env=env, stdout=subprocess.DEVNULL,
                              stderr=open(os.path.join(T, "slurmctld.err"), "w")))
procs.append(subprocess.Popen([which("slurmd"), "-D", "-f", conf, "-N", "xtnode"], env=env, stdout=subprocess.DEVNULL,
                              stderr=open(os.path.join(T, "slurmd.err"), "w")))


def sh(*args, timeout=30):
    return subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=timeout)


state = ""
deadline = time.time() + 60
while time.time() < deadline:
    if any(p.poll() is not None for p in procs):
        break
    r = sh("sinfo", "-h", "-n", "xtnode", "-o", "%t")
    state = r.stdout.strip()
    if r.returncode == 0 and state.startswith(("idle", "mix", "alloc")):
        break
    time.sleep(0.5)
if not state.startswith(("idle", "mix", "alloc")):
    why = "slurmctld" if procs[1].poll() is not None else "slurmd" if procs[2].poll() is not None else "the node"
    skip(f"{why} did not come up (node state {state!r})",
         os.path.join(T, "slurmctld.log" if why == "slurmctld" else "slurmd.log"))
print(f"== cluster up: node xtnode {state}, {ncpu} CPUs")

# --- the dataset: a single-process run, then the array --------------------------------------
spec = {
    "seed": 31337, "frames": 16, "backend": "cpu", "detector": {"mode": "fd20-128"},
    "models": [{"name": "head", "phantom": "head-labels", "size": 32, "spacing_mm": 6,
                "perturb": {"translate_mm": 5, "rotate_deg": 10}}],
    "poses": {"primary_deg": [-90, 90], "secondary_deg": [-20, 20]},
    "labels": {"channels": [{"name": "bone", "model": "head", "labels": ["bone"]}]},
    "output": {"shard_frames": 2},
}
work = os.path.join(SCRATCH, "work")
os.makedirs(work)
spec_path = os.path.join(work, "spec.json")
json.dump(spec, open(spec_path, "w"))
single = os.path.join(work, "single")
r = subprocess.run([XTWIN, "dataset", spec_path, "--out", single, "--threads", "1", "--progress", "none"],
                   capture_output=True, text=True, timeout=300)
check(r.returncode == 0, f"single-process run: {r.stderr}")

array = os.path.join(work, "array")
job_env = dict(env, SPEC=spec_path, OUT=array, XTWIN=XTWIN, XTWIN_ARGS="--threads 1 --writers 1")
r = subprocess.run(["sbatch", "--parsable", "--array=0-3", "--gres=none", "--cpus-per-task=1",
                    f"--output={work}/task-%A_%a.log", f"--chdir={work}", os.path.join(SRC, "docs", "dataset-sbatch.sh")],
                   env=job_env, capture_output=True, text=True, timeout=60)
if not check(r.returncode == 0, f"sbatch: {r.stdout}{r.stderr}"):
    stop()
    sys.exit(1)
job = r.stdout.strip().split(";")[0]
print(f"== submitted array job {job}")
deadline = time.time() + 300
while time.time() < deadline:
    q = sh("squeue", "-h", "-j", job, "-o", "%i %t")
    if q.returncode == 0 and not q.stdout.strip():
        break
    time.sleep(1)
check(time.time() < deadline, "the array finished within 300 s")
tasks = sh("scontrol", "show", "job", job, "-o")
for line in tasks.stdout.splitlines():
    fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
    check(fields.get("JobState") == "COMPLETED" and fields.get("ExitCode") == "0:0",
          f"task {fields.get('ArrayTaskId')}: {fields.get('JobState')} exit {fields.get('ExitCode')}")
check(len(tasks.stdout.splitlines()) == 4, f"four array tasks ran: {tasks.stdout.strip()[:300]}")
logs = sorted(glob.glob(os.path.join(work, "task-*.log")))
check(len(logs) == 4, f"four task logs: {logs}")
for lg in logs:
    text = open(lg).read()
    check("wrote 2 frames in" in text or "wrote 4 frames in" in text, f"{os.path.basename(lg)}: {text.strip()[-300:]}")

# --- the union of the tasks' shards is the single run, frame for frame ------------------------
mans = sorted(glob.glob(os.path.join(array, "manifest-*-of-00004.jsonl")))
check(len(mans) == 4, f"four task manifests: {mans}")
union = sorted(ln for m in mans for ln in open(m).read().splitlines())
ref = sorted(open(os.path.join(single, "manifest-00000-of-00001.jsonl")).read().splitlines())
check(union == ref, "cat manifest-*-of-00004.jsonl == the single run's manifest")
for i in range(8):
    rel = f"shards/shard-{i:06d}.tar"
    check(sha(os.path.join(array, rel)) == sha(os.path.join(single, rel)), f"{rel}: array == single")
sys.path.insert(0, os.path.join(SRC, "api", "python"))
try:
    import numpy as np
    import xtwin_dataset as xd
    a, b = list(xd.open_dataset(array)), list(xd.open_dataset(single))
    check(len(a) == len(b) == 16, f"16 frames each ({len(a)}, {len(b)})")
    for fa, fb in zip(a, b):
        check(fa["key"] == fb["key"] and np.array_equal(fa["lineint"], fb["lineint"]) and
              np.array_equal(fa["labels"], fb["labels"]) and fa["meta"] == fb["meta"], f"frame {fa['key']}")
except ImportError:
    print("  (numpy missing: frames compared through the shards' bytes only)")

stop()
shutil.rmtree(T, ignore_errors=True)
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
