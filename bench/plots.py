"""The bench's figures as PNGs, drawn with matplotlib from the JSON files of bench/run.py (--json):

    .venv/bin/python bench/plots.py --json scale.json append-local.json append-s3.json --out docs/perf/

  throughput_vs_partitions.png  rec/s and commit duration by partition count (a --mode scale JSON, partitions phase)
  recovery_vs_history.png       process start -> first commit, first START, first data commit by history length
                                (a --mode scale JSON, history phase)
  latency_cdf.png               produce -> visible latency, one curve per append JSON with a latency phase (its
                                storage in the legend: local vs S3)
  rss_over_time.png             the RSS of each phase's process tree over time (append JSONs: raw, lakesink, sss,
                                latency)

A figure is drawn when some JSON holds its figures, and left out (said so) otherwise. Each title says what was
measured, and below it the code (commit) and the machine the JSON names.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RSS_PHASES = ("raw", "lakesink", "sss", "latency")


def where(run: dict) -> str:
    """The code and the machine of a run, short: `<commit> (+ uncommitted changes) · 2 CPUs (...), 7.8 GiB RAM`."""
    machine = run.get("machine", "?").split(", load average")[0]
    commit, _, changes = run.get("code", "code unknown").partition(" + ")
    return f"{commit}{' + uncommitted changes' if changes else ''} · {machine}"


def _numbers_axis(ax, x: list[int]) -> None:
    """A log axis ticked at the numbers measured, written plainly."""
    ax.set_xscale("log")
    ax.set_xticks(x, [f"{v:,}" for v in x])
    ax.minorticks_off()


def label(run: dict) -> str:
    args = run.get("args", {})
    return f"{args.get('storage', 'local')}, {Path(run['path']).stem}"


def _figure(title: str, runs: list[dict], ncols: int = 1):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(6.4 * ncols, 4.6), squeeze=False)
    subtitle = "\n".join(sorted({where(r) for r in runs}))
    fig.suptitle(f"{title}\n{subtitle}", fontsize=9)
    return fig, axes[0]


def _save(fig, out: Path, name: str) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = out / name
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def scale_runs(runs: list[dict], phase: str, key: str):
    """(run, its figures in order, the numbers they are for, a suffix for its PNG's name when several JSONs have
    `phase`) of each scale JSON that has `phase`; `key` is where the phase keeps its figures by number (partitions,
    commits of history)."""
    having = [run for run in runs if run["results"].get(phase, {}).get(key)]
    for run in having:
        table = run["results"][phase][key]
        keys = sorted(table, key=int)
        suffix = f"-{Path(run['path']).stem}" if len(having) > 1 else ""
        yield run, [table[k] for k in keys], [int(k) for k in keys], suffix


def throughput_vs_partitions(runs: list[dict], out: Path) -> list[Path]:
    paths = []
    for run, parts, x, suffix in scale_runs(runs, "partitions", "by_partitions"):
        a = run["args"]
        fig, (left, right) = _figure(f"lakesink by partitions, tasks.max=1: a backlog of {a.get('scale_records', 0):,} "
                                     f"records (throughput), then {a.get('scale_stream_rate', 0):,} records/s "
                                     f"(commit duration)", [run], ncols=2)
        left.plot(x, [p.get("warm_rps") or 0 for p in parts], "o-")
        left.set(xlabel="partitions", ylabel="records/s (warm)", title="throughput", ylim=(0, None))
        p50 = [p.get("commit_p50_s") for p in parts]
        right.plot(x, p50, "o-", label="commit p50 (WRITE-STATUS -> ACK)")
        right.plot(x, [p.get("commit_max_s") for p in parts], "s--", label="commit max")
        if p50[0]:
            right.plot(x, [p50[0] * p / x[0] for p in x], ":", color="grey", label=f"linear from {x[0]} partitions")
        right.set(xlabel="partitions", ylabel="seconds", title="commit duration", ylim=(0, None))
        for ax in (left, right):
            _numbers_axis(ax, x)
        right.legend(fontsize=8)
        paths.append(_save(fig, out, f"throughput_vs_partitions{suffix}.png"))
    return paths


def _latency_interval_ms(args: dict):
    """The latency phase's transaction.interval.ms (its own since --latency-interval-ms; the run's before)."""
    return args.get("latency_interval_ms") or args.get("txn_interval_ms")


def recovery_vs_history(runs: list[dict], out: Path) -> list[Path]:
    paths = []
    for run, hist, x, suffix in scale_runs(runs, "history", "by_history"):
        fig, (ax,) = _figure("lakesink recovery by table history: seconds after process start", [run])
        for key, name in (("first_commit_s", "first commit (epoch claim)"), ("first_start_s", "first START-COMMIT"),
                          ("first_data_commit_s", "first data commit visible")):
            ax.plot(x, [h.get(key) for h in hist], "o-", label=name)
        ax.set(xlabel="commits in the table's history", ylabel="seconds", ylim=(0, None))
        _numbers_axis(ax, x)
        ax.legend(fontsize=8)
        paths.append(_save(fig, out, f"recovery_vs_history{suffix}.png"))
    return paths


def latency_cdf(runs: list[dict], out: Path) -> list[Path]:
    with_latency = [r for r in runs if r["results"].get("latency", {}).get("sample_ms")]
    if not with_latency:
        return []
    fig, (ax,) = _figure("lakesink produce -> visible latency", with_latency)
    for run in with_latency:
        lat = run["results"]["latency"]
        sample = lat["sample_ms"]
        ys = [i / (len(sample) - 1) for i in range(len(sample))] if len(sample) > 1 else [1.0]
        ax.plot([v / 1000 for v in sample], ys, label=f"{label(run)}: {lat['achieved_rate']:,.0f} rec/s, "
                                                       f"{lat['measured']:,} records, txn interval "
                                                       f"{_latency_interval_ms(run['args'])} ms")
    ax.set(xlabel="seconds from produce to visible in the table", ylabel="fraction of records", ylim=(0, 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return [_save(fig, out, "latency_cdf.png")]


def rss_over_time(runs: list[dict], out: Path) -> list[Path]:
    lines = [(run, phase, run["results"][phase]["rss_series"]["seconds_mb"]) for run in runs for phase in RSS_PHASES
             if (run["results"].get(phase) or {}).get("rss_series", {}).get("seconds_mb")]
    if not lines:
        return []
    fig, (ax,) = _figure("RSS of each phase's process tree (python + JVM) over time", [r for r, _, _ in lines])
    for run, phase, series in lines:
        ax.plot([t for t, _ in series], [mb for _, mb in series], label=f"{phase} ({label(run)})")
    ax.set(xlabel="seconds since sampling began (lakesink: process start; latency: its first START)",
           ylabel="RSS MB", ylim=(0, None))
    ax.legend(fontsize=8)
    return [_save(fig, out, "rss_over_time.png")]


PLOTS = (throughput_vs_partitions, recovery_vs_history, latency_cdf, rss_over_time)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", nargs="+", required=True, help="JSON files of bench/run.py --json")
    p.add_argument("--out", required=True, help="the directory the PNGs go to")
    args = p.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    runs = []
    for path in args.json:
        run = json.loads(Path(path).read_text())
        run["path"] = path
        runs.append(run)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for plot in PLOTS:
        paths = plot(runs, out)
        print(f"{plot.__name__}: {', '.join(map(str, paths))}" if paths else f"{plot.__name__}: no figures for it "
                                                                             f"in {', '.join(args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
