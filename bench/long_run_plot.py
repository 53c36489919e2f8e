"""Plot and summarise bench/long_run.py logs: RSS and the step time's moving median (50 steps) per step,
one line per log. Prints, for each log, RSS and median step time at the steps asked for and the change
between the first and the last of them.
Usage: long_run_plot.py OUT.png STEP_A STEP_B LABEL=LOG.csv [LABEL=LOG.csv ...]"""
import csv
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

WINDOW = 50


def read(path):
    rows = list(csv.DictReader(open(path)))
    return [int(r["step"]) for r in rows], [float(r["step_s"]) for r in rows], [float(r["rss_mb"]) for r in rows]


def moving_median(xs):
    return [statistics.median(xs[max(0, i - WINDOW + 1):i + 1]) for i in range(len(xs))]


def main():
    png, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    fig, (ax_rss, ax_t) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for arg in sys.argv[4:]:
        label, path = arg.split("=", 1)
        steps, times, rss = read(path)
        med = moving_median(times)
        ax_rss.plot(steps, rss, label=label)
        ax_t.plot(steps, med, label=label)
        at = {s: i for i, s in enumerate(steps)}
        if a in at and b in at:
            ia, ib = at[a], at[b]
            print(f"{label}: RSS {rss[ia]:.1f} MB at step {a}, {rss[ib]:.1f} MB at step {b} "
                  f"({100 * (rss[ib] / rss[ia] - 1):+.2f}%); median step time over {WINDOW} steps "
                  f"{med[ia]:.4f} s at step {a}, {med[ib]:.4f} s at step {b} ({100 * (med[ib] / med[ia] - 1):+.1f}%)")
        else:
            print(f"{label}: {len(steps)} steps logged (steps {a} and {b} not both present); "
                  f"RSS {rss[0]:.1f} -> {rss[-1]:.1f} MB")
    ax_rss.set_ylabel("RSS (MB)")
    ax_t.set_ylabel(f"step time, median of {WINDOW} (s)")
    ax_t.set_xlabel("step")
    ax_rss.legend()
    ax_rss.grid(alpha=0.3)
    ax_t.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


if __name__ == "__main__":
    main()
