"""Long-run flatness log: runs a tessel command (bench or train) and writes one CSV row per step with
the step time the command printed and the process's resident set size read from /proc at that moment.

Usage: long_run.py OUT.csv -- TESSEL_BINARY bench CONFIG --steps 2000 [--set ...]
Lines "... step N: T s, ..." (tessel bench) give the step and its time; the RSS is VmRSS of the child
when the line arrives. Works with any binary printing such lines, so an older build can be measured
the same way."""
import re
import subprocess
import sys

STEP = re.compile(r"step (\d+): ([0-9.]+) s")
HELD = re.compile(r"(\d+) GEMM primitives, ([0-9.]+) MB pooled")  # printed by newer builds only


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def main():
    out, cmd = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1)
    with open(out, "w") as f:
        f.write("step,step_s,rss_mb,gemm_primitives,pooled_mb\n")
        for line in proc.stdout:
            m = STEP.search(line)
            if m:
                held = HELD.search(line)
                extra = f"{held.group(1)},{held.group(2)}" if held else ","
                f.write(f"{m.group(1)},{m.group(2)},{rss_mb(proc.pid):.1f},{extra}\n")
                f.flush()
            else:
                sys.stdout.write(line)  # the command's other output (summary, JSON) goes to our stdout
    sys.exit(proc.wait())


if __name__ == "__main__":
    main()
