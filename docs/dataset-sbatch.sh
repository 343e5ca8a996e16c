#!/bin/bash
# An sbatch array job for `xtwin dataset` (docs/dataset.md): each array task makes the shards
# s with s % N == I, where I and N come from Slurm's own SLURM_ARRAY_TASK_ID/_MIN/_STEP/_COUNT;
# xtwin reads them, so the command line is the same for every task. A task that dies can simply be
# run again (or the array resubmitted): complete shards are skipped, nothing partial is left.
# When all tasks have finished, the dataset's manifest is the concatenation of theirs:
#   cat "$OUT"/manifest-*-of-*.jsonl > "$OUT"/manifest.jsonl      (optional: readers take them all)
#
#   sbatch --array=0-15 docs/dataset-sbatch.sh                  # 16 tasks, one GPU each
#   SPEC=my.json OUT=/scratch/ds sbatch --array=0-63%16 docs/dataset-sbatch.sh
#
# Environment (sbatch passes the submitting shell's environment to the tasks):
#   SPEC        the spec (default spec.json)            OUT     the dataset directory (default dataset)
#   XTWIN       the xtwin binary (default: xtwin on PATH)
#   XTWIN_ARGS  more options, e.g. "--devices all" on nodes with several GPUs, "--verify"
#SBATCH --job-name=xtwin-dataset
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=8
#SBATCH --gres=gpu:1
#SBATCH --time=04:00:00
#SBATCH --requeue
set -euo pipefail
: "${SPEC:=spec.json}" "${OUT:=dataset}" "${XTWIN:=xtwin}" "${XTWIN_ARGS:=}"
echo "xtwin dataset: array task ${SLURM_ARRAY_TASK_ID:-?} of job ${SLURM_ARRAY_JOB_ID:-?} on $(hostname)"
# --progress lines: a line every 10 s in the job's log (no terminal there).
exec "$XTWIN" dataset "$SPEC" --out "$OUT" --progress lines $XTWIN_ARGS
