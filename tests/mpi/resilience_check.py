"""Checks for tests/mpi/resilience_test.sh, on two runs' log.dir (metrics.jsonl in each).

  resilience_check.py same REFERENCE RUN --after K
      every step after K that REFERENCE trained has, in RUN, the same loss and gradient norm, bit for
      bit (the last record of each step counts: a resumed run rewrote the steps after its checkpoint)
  resilience_check.py event RUN DETECTOR RESTORED FIRST LAST
      RUN's metrics.jsonl holds one rewind event by DETECTOR that restored step RESTORED and skipped
      iterations FIRST..LAST
Exits non-zero, saying why, when a check fails.
"""
import json
import sys


def records(run):
    with open(f"{run}/metrics.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def trained(run):
    out = {}
    for r in records(run):
        if "loss" in r and "event" not in r:
            out[r["step"]] = (r["loss"], r["grad_norm"])
    return out


def same(reference, run, after):
    ref, got = trained(reference), trained(run)
    steps = [s for s in sorted(ref) if s > after]
    if not steps:
        sys.exit(f"{reference}: no trained step after {after}")
    for s in steps:
        if s not in got:
            sys.exit(f"{run}: step {s} missing (the reference trained it)")
        if got[s] != ref[s]:
            sys.exit(f"{run}: step {s} loss, grad norm {got[s]} differ from {reference}'s {ref[s]}")
    print(f"{run}: steps {steps[0]}-{steps[-1]} equal {reference}'s bit for bit (loss {ref[steps[-1]][0]:.6f})")


def event(run, detector, restored, first, last):
    ev = [r for r in records(run) if r.get("event") == "rewind"]
    if len(ev) != 1:
        sys.exit(f"{run}: {len(ev)} rewind events, expected 1: {ev}")
    e = ev[0]
    want = (detector, int(restored), [int(first), int(last)])
    have = (e["detector"], e["restored_step"], e["skipped_iterations"])
    if have != want:
        sys.exit(f"{run}: rewind event {e} is not detector {want[0]}, restored {want[1]}, skipped {want[2]}")
    print(f"{run}: rewind by {e['detector']} at step {e['step']} restored step {e['restored_step']} from "
          f"{e['restored_from']}, skipped {e['skipped_iterations']}")


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[:1] == ["same"] and len(a) == 5 and a[3] == "--after":
        same(a[1], a[2], int(a[4]))
    elif a[:1] == ["event"] and len(a) == 6:
        event(*a[1:])
    else:
        sys.exit(__doc__)
