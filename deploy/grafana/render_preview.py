"""Render a static preview of the Grafana dashboard from a live Prometheus: every panel's queries, as Grafana
would send them (variables = All), drawn with matplotlib at the panels' grid positions.

    python deploy/grafana/render_preview.py --prometheus http://localhost:9090 --minutes 30 \\
        --out deploy/grafana/dashboard-preview.png

Needs matplotlib (pip install matplotlib); only the standard library otherwise. It is a preview of the data
and the layout, not a pixel copy of Grafana.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

DASHBOARD = Path(__file__).resolve().parent / "dashboards" / "scoring-sidecar.json"
BACKGROUND, PANEL, TEXT, GRID = "#111217", "#181b1f", "#ccccdc", "#2c3235"
PALETTE = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a", "#96d98d"]


def substitute(expr: str, rate_interval: str) -> str:
    for name, value in (
        ("$__rate_interval", rate_interval),
        ("$__interval", rate_interval),
        ("$scorer", ".*"),
        ("$agent", ".*"),
        ("$judge_model", ".*"),
        ("$version_agent", ".*"),
        ("$version_scorer", ".*"),
    ):
        expr = expr.replace(name, value)
    return expr


def legend(fmt: str, labels: dict[str, str]) -> str:
    text = fmt
    for key, value in labels.items():
        text = text.replace("{{" + key + "}}", value)
    return text


def query_range(base: str, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{base}/api/v1/query_range?{params}", timeout=30) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def style(ax: Any, title: str) -> None:
    ax.set_facecolor(PANEL)
    ax.set_title(title, color=TEXT, fontsize=9, loc="left", pad=4)
    ax.tick_params(colors=TEXT, labelsize=7)
    for spine in ax.spines.values():
        spine.set_color(GRID)
    ax.grid(color=GRID, linewidth=0.5)


def fmt_unit(value: float, unit: str | None) -> str:
    if unit == "percentunit":
        return f"{value * 100:.0f}%"
    if unit == "currencyUSD":
        return f"${value:.4f}"
    if unit == "s":
        return f"{value:.2f}s"
    return f"{value:.3g}"


def bands(panel: dict[str, Any]) -> list[tuple[str, str]]:
    """(upper, lower) series names of each fillBelowTo override of the panel."""
    found = []
    for override in panel.get("fieldConfig", {}).get("overrides", []):
        for prop in override.get("properties", []):
            if prop["id"] == "custom.fillBelowTo":
                found.append((override["matcher"]["options"], prop["value"]))
    return found


def render(base: str, out: Path, minutes: float, rate_interval: str) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    end = time.time()
    start = end - minutes * 60
    step = max(1.0, minutes * 60 / 200)
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    rows = [p for p in dashboard["panels"] if p["type"] == "row"]
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"]) + 2  # + the title
    unit_px = 0.42
    fig = plt.figure(figsize=(24 * unit_px * 1.6, height * unit_px), facecolor=BACKGROUND)
    fig.text(0.01, 1 - 1.0 / (height), dashboard["title"], color=TEXT, fontsize=14, weight="bold")

    def rect(grid: dict[str, int]) -> list[float]:
        x, y, w, h = grid["x"] / 24, (grid["y"] + 2) / height, grid["w"] / 24, grid["h"] / height
        pad_x, pad_top, pad_bottom = 0.035 / 2, 0.55 / height, 1.1 / height
        return [x + pad_x, 1 - y - h + pad_bottom, w - 2 * pad_x, h - pad_top - pad_bottom]

    for row in rows:
        fig.text(0.01, 1 - (row["gridPos"]["y"] + 2.6) / height, row["title"], color=TEXT, fontsize=11, weight="bold")
    for panel in panels:
        ax = fig.add_axes(rect(panel["gridPos"]))
        style(ax, panel["title"])
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        series: list[tuple[str, list[float], list[float]]] = []
        for target in panel["targets"]:
            for result in query_range(base, substitute(target["expr"], rate_interval), start, end, step):
                xs = [(float(t) - end) / 60 for t, _ in result["values"]]
                ys = [float(v) for _, v in result["values"]]
                series.append((legend(target.get("legendFormat", ""), result["metric"]), xs, ys))
        if panel["type"] == "stat":
            ax.axis("off")
            ax.set_facecolor(PANEL)
            total = [s[2][-1] for s in series if s[2] and not math.isnan(s[2][-1])]
            text = "\n".join(f"{name}: {val:.0f}" for (name, _, _), val in zip(series, total, strict=False))
            ax.text(0.5, 0.45, text or "no data", color="#73bf69", fontsize=16, ha="center", va="center")
            continue
        if panel["type"] == "heatmap":
            by_le = sorted(((float(name) if name != "+Inf" else math.inf, ys) for name, _, ys in series))
            if by_le:
                columns = len(by_le[0][1])
                grid = []
                previous = [0.0] * columns
                for _, ys in by_le[:-1]:  # cumulative buckets → counts per bucket (+Inf equals 1.0 here)
                    grid.append([max(0.0, y - p) for y, p in zip(ys, previous, strict=False)])
                    previous = ys
                ax.imshow(grid, aspect="auto", origin="lower", cmap="inferno", extent=(-minutes, 0, 0, 1))
                ax.set_ylabel("score", color=TEXT, fontsize=7)
            continue
        for upper, lower in bands(panel):  # Grafana's fillBelowTo: a confidence band between two series
            found = {name: (xs, ys) for name, xs, ys in series}
            if upper in found and lower in found and len(found[upper][1]) == len(found[lower][1]):
                ax.fill_between(found[upper][0], found[lower][1], found[upper][1], color="#5794f2", alpha=0.25)
                series = [s for s in series if s[0] not in (upper, lower)]
        for i, (name, xs, ys) in enumerate(series[:12]):
            ax.plot(xs, ys, color=PALETTE[i % len(PALETTE)], linewidth=1.2, label=name[:48])
        if series:
            ax.legend(fontsize=6, loc="upper left", facecolor=PANEL, edgecolor=GRID, labelcolor=TEXT, ncol=2)
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _, u=unit: fmt_unit(v, u)))
        else:
            ax.text(0.5, 0.5, "no data", color=TEXT, ha="center", va="center", transform=ax.transAxes)
        ax.set_xlim(-minutes, 0)
        ax.set_xlabel("minutes", color=TEXT, fontsize=7)
    fig.savefig(out, dpi=110, facecolor=BACKGROUND)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prometheus", default="http://localhost:9090")
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rate-interval", default="1m", help="what $__rate_interval stands for")
    parser.add_argument("--out", type=Path, default=Path("dashboard-preview.png"))
    args = parser.parse_args()
    render(args.prometheus.rstrip("/"), args.out, args.minutes, args.rate_interval)


if __name__ == "__main__":
    main()
