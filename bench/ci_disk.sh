#!/usr/bin/env bash
# What a whole CI run (.ci/run) writes to this machine's disk, stage by stage: the free space on /var/lib (where the
# engines and the registry keep their data) sampled every 10 s while `CI=true bash .ci/run` runs in a fresh clone of
# HEAD, the figure at each stage's start, the lowest seen, and the engines' and registry's folders at the end.
# CI runs on a machine a session used, so what a run needs beyond what the machine has left is the failure stops 38
# and 39 saw ("no space left on device"); .ci/run's IMAGEBUILD_CI_MIN_FREE_GB is set from this figure.
#
#   bash bench/ci_disk.sh            # about 35-45 minutes on 2 cores
#
# Writes bench/results/ci-disk.json; the run's whole output stays in build/ci-disk/run.log.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$root/build/ci-disk"
out="$root/bench/results/ci-disk.json"
rm -rf "$work" && mkdir -p "$work"
git clone -q "$root" "$work/clone"
free_mb() { df -P -BM /var/lib | awk 'NR == 2 { sub("M", "", $4); print $4 }'; }
(
    while :; do
        echo "$(date +%s) $(free_mb)" >>"$work/free.log"
        sleep 10
    done
) &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true' EXIT
start=$(date +%s)
rc=0
(cd "$work/clone" && CI=true bash .ci/run) 2>&1 | while IFS= read -r line; do
    printf '%s %s\n' "$(date +%s)" "$line"
done >"$work/run.log" || rc=$?
end=$(date +%s)
kill "$sampler" 2>/dev/null || true
du -sxm /var/lib/imagebuild-* 2>/dev/null >"$work/du.txt" || true
python3 - "$out" "$work" "$start" "$end" "$rc" "$(git -C "$root" rev-parse HEAD)" <<'PY'
import datetime, json, pathlib, re, sys
out, work, start, end, rc, commit = sys.argv[1:]
work = pathlib.Path(work)
samples = [tuple(map(int, line.split())) for line in (work / "free.log").read_text().splitlines() if len(line.split()) == 2]
stages = []
for line in (work / "run.log").read_text(errors="replace").splitlines():
    at, _, text = line.partition(" ")
    match = re.match(r"== \.ci/run: (.*?) \(\d+ s in\)$", text)
    if match:
        stages.append({"stage": match.group(1), "at_s": int(at) - int(start)})
for i, stage in enumerate(stages):
    stage_end = stages[i + 1]["at_s"] if i + 1 < len(stages) else int(end) - int(start)
    inside = [mb for t, mb in samples if stage["at_s"] <= t - int(start) <= stage_end]
    stage["free_at_start_mb"] = inside[0] if inside else None
    stage["lowest_free_mb"] = min(inside) if inside else None
first = samples[0][1] if samples else None
lowest = min(mb for _, mb in samples) if samples else None
doc = {
    "about": "bench/ci_disk.sh: free space on /var/lib while CI=true bash .ci/run ran in a fresh clone of HEAD, "
    "sampled every 10 s",
    "commit": commit,
    "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    "exit_code": int(rc),
    "seconds": int(end) - int(start),
    "free_at_start_mb": first,
    "lowest_free_mb": lowest,
    "most_written_mb": (first - lowest) if first is not None and lowest is not None else None,
    "free_at_end_mb": samples[-1][1] if samples else None,
    "stages": stages,
    "folders_at_end_mb": {p.split()[1]: int(p.split()[0]) for p in (work / "du.txt").read_text().splitlines() if p.strip()},
}
pathlib.Path(out).write_text(json.dumps(doc, indent=1) + "\n")
print(json.dumps({k: doc[k] for k in ("exit_code", "seconds", "free_at_start_mb", "lowest_free_mb", "most_written_mb")}))
PY
exit "$rc"
