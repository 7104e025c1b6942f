#!/usr/bin/env python3
"""Plots training runs with matplotlib: train and val loss against step (tokens on a second
axis), then the learning rate, the grad norm and, when logged, the HellaSwag accuracy.

    python3 scripts/plot_loss.py LOG_DIR [LOG_DIR ...] [-o loss.png] [--log] [--size 1200x1000]

Each LOG_DIR is a trainer's `-o` directory. Its metrics.jsonl (one JSON object per line, see
docs/tools.md) is read when present, else its main.log ("s:N trl:X lr:LR norm:N",
"s:N tel:X", "s:N eval:ACC"). A file path (main.log or metrics.jsonl) works too. Several runs
are overlaid, each in one colour and named after its directory in the legend.
"""
import argparse
import json
import math
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


class Run:
    """The logged series of one run: lists of (step, value), the run's config when known."""

    def __init__(self, name):
        self.name = name
        self.config = {}
        self.train, self.val, self.lr, self.norm, self.eval, self.mfu = [], [], [], [], [], []

    def tokens_per_step(self):
        return self.config.get("tokens_per_step")


def find_log(path):
    """A log directory (or a log file) -> (name, the file to read)."""
    if os.path.isfile(path):
        return os.path.basename(os.path.dirname(os.path.abspath(path))), path
    if not os.path.isdir(path):
        sys.exit(f"error: {path}: no such log directory")
    for f in ("metrics.jsonl", "main.log"):
        if os.path.isfile(os.path.join(path, f)):
            return os.path.basename(os.path.abspath(path)), os.path.join(path, f)
    sys.exit(f"error: {path}: has neither metrics.jsonl nor main.log")


def read_jsonl(run, path):
    for k, line in enumerate(open(path), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            sys.exit(f"error: {path}:{k}: not a JSON object")
        if "config" in rec:
            run.config.update(rec["config"])
            continue
        s = rec.get("step")
        for key, series in (("train_loss", run.train), ("val_loss", run.val), ("lr", run.lr),
                            ("grad_norm", run.norm), ("hellaswag", run.eval), ("mfu", run.mfu)):
            if rec.get(key) is not None and s is not None:  # null: a non-finite number
                series.append((s, rec[key]))


LOG_LINE = re.compile(r"s:(\d+) (.*)")


def read_main_log(run, path):
    keys = {"trl": run.train, "tel": run.val, "lr": run.lr, "norm": run.norm, "eval": run.eval}
    for line in open(path):
        m = LOG_LINE.match(line.strip())
        if not m:
            continue
        step = int(m.group(1))
        for field in m.group(2).split():
            key, _, value = field.partition(":")
            if key in keys:
                try:
                    v = float(value)
                except ValueError:
                    continue
                if math.isfinite(v):  # a skipped non-finite step logs nan
                    keys[key].append((step, v))


def load_run(path):
    name, file = find_log(path)
    run = Run(name)
    (read_jsonl if file.endswith(".jsonl") else read_main_log)(run, file)
    if not run.train and not run.val:
        sys.exit(f"error: {file}: no train or val loss in it")
    return run


def title_of(runs):
    if len(runs) > 1:
        return "  vs  ".join(r.name for r in runs)
    r = runs[0]
    c = r.config
    if not c:
        return r.name
    parts = [r.name]
    if "model" in c:
        parts.append(f"{c['model']} ({c.get('parameters', 0) / 1e6:.1f}M params)")
    if "tokens_per_step" in c:
        parts.append(f"{c['tokens_per_step']} tok/step (B {c.get('B')}, T {c.get('T')}, ranks {c.get('ranks')})")
    if "lr" in c:
        parts.append(f"lr {c['lr']:g} {c.get('schedule', '')}".rstrip())
    return " | ".join(parts)


def plot_series(ax, series, **kw):
    if series:
        ax.plot([s for s, _ in series], [v for _, v in series], **kw)


def plot(runs, out, log_scale, width, height):
    has_eval = any(r.eval for r in runs)
    panels = 4 if has_eval else 3
    dpi = 100
    fig, axes = plt.subplots(panels, 1, sharex=True, figsize=(width / dpi, height / dpi), dpi=dpi,
                             gridspec_kw={"height_ratios": [3] + [1] * (panels - 1)})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, r in enumerate(runs):
        c = colors[k % len(colors)]
        plot_series(axes[0], r.train, color=c, lw=1.0, alpha=0.6, label=f"{r.name} train")
        plot_series(axes[0], r.val, color=c, lw=2.0, ls="--", marker="o", ms=4, label=f"{r.name} val")
        plot_series(axes[1], r.lr, color=c, lw=1.2, label=r.name)
        plot_series(axes[2], r.norm, color=c, lw=0.8, label=r.name)
        if has_eval:
            plot_series(axes[3], r.eval, color=c, lw=1.5, marker="o", ms=4, label=r.name)
    ax = axes[0]
    ax.set_title(title_of(runs), fontsize=10)
    ax.set_ylabel("loss (nats per token)")
    if log_scale:
        ax.set_yscale("log")
    if all(v > 0 for r in runs for _, v in r.norm):
        axes[2].set_yscale("log")   # one spike would flatten the rest on a linear axis
    ax.legend(fontsize=8, loc="upper right")
    tps = {r.tokens_per_step() for r in runs}
    if len(tps) == 1 and None not in tps:
        t = tps.pop()
        top = ax.secondary_xaxis("top", functions=(lambda s, t=t: s * t / 1e6, lambda m, t=t: m * 1e6 / t))
        top.set_xlabel("tokens (millions)")
    axes[1].set_ylabel("learning rate")
    axes[1].ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    axes[2].set_ylabel("grad norm")
    if has_eval:
        axes[3].set_ylabel("HellaSwag acc")
    axes[-1].set_xlabel("step")
    for a in axes:
        a.grid(True, alpha=0.3)
    fig.align_ylabels(axes)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)


def parse_size(text):
    m = re.fullmatch(r"(\d+)x(\d+)", text)
    if not m or not (100 <= int(m.group(1)) <= 8000 and 100 <= int(m.group(2)) <= 8000):
        raise argparse.ArgumentTypeError(f"{text}: want WIDTHxHEIGHT in pixels, 100..8000 each")
    return int(m.group(1)), int(m.group(2))


def main(argv=None):
    ap = argparse.ArgumentParser(description="plot train_gpt2 runs (loss, lr, grad norm, HellaSwag)")
    ap.add_argument("logs", nargs="+", metavar="LOG_DIR", help="a run's log directory (-o); several overlay")
    ap.add_argument("-o", "--out", default="loss.png", help="output PNG (default loss.png)")
    ap.add_argument("--log", action="store_true", help="log scale for the loss (the grad norm always has one)")
    ap.add_argument("--size", type=parse_size, default=(1200, 1000), help="WIDTHxHEIGHT pixels (default 1200x1000)")
    a = ap.parse_args(argv)
    logs = a.logs
    if len(logs) > 1 and logs[-1].endswith(".png") and not os.path.isdir(logs[-1]):
        a.out, logs = logs[-1], logs[:-1]   # the old form: plot_loss.py main.log out.png
    runs = [load_run(p) for p in logs]
    plot(runs, a.out, a.log, *a.size)
    print(f"wrote {a.out} ({len(runs)} run{'s' if len(runs) > 1 else ''})")


if __name__ == "__main__":
    main()
