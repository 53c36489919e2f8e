"""Summary of bench/fp8_convergence.sh's runs: per recipe the final and the best eval loss, the
train loss over the last 100 steps, each with its relative difference from bf16, and a PNG of the
loss curves. Usage: fp8_summary.py OUT_DIR PNG RECIPE... (recipe "none" is the bf16 baseline)."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    rows = [json.loads(l) for l in open(path)]
    train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    evals = [(r["step"], r["eval_loss"]) for r in rows if "eval_loss" in r]
    return train, evals


def main():
    out, png, recipes = sys.argv[1], sys.argv[2], sys.argv[3:]
    runs = {r: read(f"{out}/{r}/metrics.jsonl") for r in recipes}
    stats = {}
    for r, (train, evals) in runs.items():
        last = [l for s, l in train if s > train[-1][0] - 100]
        best = min(evals, key=lambda e: e[1])
        stats[r] = (evals[-1], best, sum(last) / len(last))
    base = stats.get("none")

    def rel(x, b):
        return "-" if base is None else f"{100 * (x - b) / b:+.2f}%"

    print("| recipe | final eval loss (step) | vs bf16 | best eval loss (step) | vs bf16 | train loss, last 100 steps | vs bf16 |")
    print("|---|---|---|---|---|---|---|")
    for r, (final, best, tr) in stats.items():
        name = "bf16" if r == "none" else r
        if r == "none":
            print(f"| {name} | {final[1]:.4f} ({final[0]}) | - | {best[1]:.4f} ({best[0]}) | - | {tr:.4f} | - |")
        else:
            print(f"| {name} | {final[1]:.4f} ({final[0]}) | {rel(final[1], base[0][1])} | {best[1]:.4f} ({best[0]}) | "
                  f"{rel(best[1], base[1][1])} | {tr:.4f} | {rel(tr, base[2])} |")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r, (train, evals) in runs.items():
        steps, losses = zip(*train)
        k = 20  # running mean for readability
        smooth = [sum(losses[max(0, i - k + 1):i + 1]) / len(losses[max(0, i - k + 1):i + 1]) for i in range(len(losses))]
        line, = ax.plot(steps, smooth, lw=1, label=("bf16" if r == "none" else f"fp8 {r}") + " (train, 20-step mean)")
        es, el = zip(*evals)
        ax.plot(es, el, "o--", color=line.get_color(), ms=3, lw=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_ylim(top=6)
    ax.set_title("demo model (6.5M Llama) on fortunes: bf16 vs FP8 recipes (dashed: eval loss)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
