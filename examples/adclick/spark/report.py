"""The reconciliation report: JSON for machines, Markdown with a CTR chart for people."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from examples.adclick.spark.reference import Reconciliation


def ctr_chart(campaigns: list[dict[str, Any]], path: Path) -> Path:
    """Grouped bars: click-through rate per campaign, reference join vs streaming output."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    names = [c["campaign"] for c in campaigns]
    xs = range(len(names))
    width = 0.4
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(names)), 4.0), dpi=100)
    ax.bar([x - width / 2 for x in xs], [c["ctr"] for c in campaigns], width, label="reference")
    ax.bar(
        [x + width / 2 for x in xs], [c["stream_ctr"] for c in campaigns], width, label="streamapp"
    )
    ax.set_xticks(list(xs), names, rotation=30, ha="right")
    ax.set_ylabel("click-through rate")
    ax.set_title("CTR per campaign: Spark reference join vs streamapp output")
    ax.legend(loc="lower right", framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def markdown(result: Reconciliation, chart: Path, extra: dict[str, Any]) -> str:
    verdict = "OK" if result.ok else "DISCREPANCIES FOUND"
    lines = [
        "# Ad-click join reconciliation",
        "",
        f"**{verdict}**: the streaming output against a batch join of the raw topics in Spark.",
        "",
        "| what | count |",
        "| --- | ---: |",
        f"| impressions | {result.impressions} |",
        f"| clicks | {result.clicks} |",
        f"| undecodable records | {result.undecodable} |",
        f"| attributions expected (reference) | {result.expected} |",
        f"| output records | {result.output_records} |",
        f"| joined (in both) | {result.joined} |",
        f"| missing | {result.missing} |",
        f"| duplicated | {result.duplicated} |",
        f"| mismatched | {result.mismatched} |",
        f"| unexpected | {result.unexpected} |",
    ]
    lines += [f"| {k} | {v} |" for k, v in extra.items()]
    lines += [
        "",
        "## Per campaign",
        "",
        "| campaign | impressions | clicks | spend | CTR | streamapp clicks | streamapp CTR |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in result.campaigns:
        lines.append(
            f"| {c['campaign']} | {c['impressions']} | {c['clicks']} | "
            f"{c['spend_micros'] / 1e6:.2f} | {c['ctr']:.4f} | {c['stream_clicks']} | "
            f"{c['stream_ctr']:.4f} |"
        )
    lines += ["", f"![CTR per campaign]({chart.name})", ""]
    for kind, rows in result.samples.items():
        if rows:
            lines += [f"## Some {kind}", "", "```"]
            lines += [json.dumps(r, sort_keys=True) for r in rows]
            lines += ["```", ""]
    return "\n".join(lines)


def write_report(result: Reconciliation, out_dir: Path, extra: dict[str, Any]) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    chart = ctr_chart(result.campaigns, out_dir / "ctr_per_campaign.png")
    data = {**asdict(result), "ok": result.ok, "extra": extra}
    json_path = out_dir / "reconciliation.json"
    json_path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    md_path = out_dir / "reconciliation.md"
    md_path.write_text(markdown(result, chart, extra))
    return {"json": json_path, "markdown": md_path, "chart": chart}
