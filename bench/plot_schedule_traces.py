#!/usr/bin/env python3
"""Draws pipeline timelines from Chrome trace files (`tessel schedule --trace`, one track per rank)
as one PNG, a panel per trace, for docs/pipeline-schedules.md.

Usage: plot_schedule_traces.py [--xlabel=TEXT] OUT.png TITLE=TRACE.json [TITLE=TRACE.json ...] (split at the
last "="). Times are the trace's milliseconds (the simulator writes one unit as 1 ms).
F blue, B orange, W green (chunk 1 lighter), F&B pairs hatched; idle time stays white. A real step's
sends and receives are not drawn; its MoE all-to-alls (log.pipeline_trace under fused F&B pairs) are
drawn grey on a thin row under their rank, from start to the wait's return."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"F": ("#1f77b4", "#8fbbd9"), "B": ("#ff7f0e", "#ffbf86"), "W": ("#2ca02c", "#95cf95")}


def spans(path):
    events = json.load(open(path))["traceEvents"]
    return [e for e in events if e.get("ph") == "X"]


def main():
    args = sys.argv[1:]
    xlabel = "time (units of one stage's F)"
    if args and args[0].startswith("--xlabel="):
        xlabel = args.pop(0).split("=", 1)[1]
    out, panels = args[0], [a.rsplit("=", 1) for a in args[1:]]
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 1.0 + 1.1 * len(panels) * 1.6), squeeze=False)
    for ax, (title, path) in zip(axes[:, 0], panels):
        every = spans(path)
        ev = [e for e in every if e["name"] in COLOURS]
        ranks = max(e["tid"] for e in ev) + 1
        end = max(e["ts"] + e["dur"] for e in every)
        busy = sum(e["dur"] for e in ev) / ranks
        for e in every:  # transfers: the rank's track is tid - ranks (trace.cpp)
            if "made_by" in e["args"]:
                ax.barh(e["tid"] - ranks + 0.5, e["dur"] / 1e3, left=e["ts"] / 1e3, height=0.18, color="#888888",
                        edgecolor="black", linewidth=0.2)
        for e in ev:
            colour = COLOURS[e["name"]][e["args"]["chunk"] % 2]
            ax.barh(e["tid"], e["dur"] / 1e3, left=e["ts"] / 1e3, height=0.8, color=colour, edgecolor="black",
                    linewidth=0.3, hatch="//" if e["args"]["pair"] else None)
            if e["dur"] / 1e3 >= 0.45:
                ax.text((e["ts"] + e["dur"] / 2) / 1e3, e["tid"], str(e["args"]["mb"]), ha="center", va="center",
                        fontsize=6)
        ax.set_yticks(range(ranks))
        ax.set_yticklabels([f"rank {r}" for r in range(ranks)], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, end / 1e3)
        ax.set_title(f"{title}: makespan {end / 1e3:g}, bubble {(end - busy) / 1e3:g}", fontsize=9, loc="left")
        ax.tick_params(axis="x", labelsize=7)
    axes[-1, 0].set_xlabel(xlabel, fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
