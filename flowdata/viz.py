"""Pictures of a graph as the compiler sees it: groups, passes, roles, and a run overlay.

:func:`to_dot` draws a graphviz ``Digraph``; its DOT source (``.source``) needs no
``dot`` binary, rendering to SVG/PNG/PDF does. :func:`to_mermaid` writes the same structure
as a Mermaid flowchart for Markdown.

What the picture shows:

- every group as a cluster with a dotted border, labelled with its source, its kind and,
  when a report is given, its sample count; the per-sample nodes inside;
- Collect nodes just outside the cluster they close (DOT cannot place a node *on* a
  border), drawn with the group's colour and reached by bold "crow's foot" edges;
- batch nodes (run once per collated batch, after collation, where the loader is
  iterated) in a dashed cluster of their own beside their group's, labelled "after
  collation", reached by edges ending in a diamond and labelled ``Batch[T]``;
- the pass of every per-sample, Collect and batch node (fill colour, and ``pass k`` in the label);
- node shapes by role: input (dashed ellipse), once (rounded box), source (bold cds),
  per-sample (box), Collect (inverted trapezium), reduction (double octagon), batch (3-D
  box), and a legend;
- edge labels with the value's type when ``show_types``;
- with ``report=``: each node's share of the time as a white-to-red fill, its call count
  and time, and the samples it made skip.

With ``outputs``, only what they need is drawn (the rest is left out, not greyed).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from flowdata.errors import FlowdataError
from flowdata.graph import BUILTINS, Graph
from flowdata.node import Role
from flowdata.plan import Analysis, pass_levels
from flowdata.report import Report
from flowdata.types import type_name

__all__ = ["to_dot", "to_mermaid"]

_SHAPES: dict[str, dict[str, str]] = {
    "input": {"shape": "ellipse", "style": "dashed"},
    "once": {"shape": "box", "style": "rounded"},
    "source": {"shape": "cds", "style": "bold,filled", "fillcolor": "#e8f0fe"},
    "per-sample": {"shape": "box", "style": "filled"},
    "collect": {"shape": "invtrapezium", "style": "filled"},
    "reduction": {"shape": "doubleoctagon", "style": "filled"},
    "batch": {"shape": "box3d", "style": "filled"},
}
_PASS_FILL = ["#ffffff", "#fff4d6", "#e3f6e3", "#f3e5f5", "#e0f2f1"]
_GROUP_COLORS = ["#1a73e8", "#e37400", "#188038", "#a142f4", "#d93025"]


def _kind(name: str, graph: Graph, analysis: Analysis) -> str:
    if name not in graph.nodes:
        return "input"
    role = analysis.roles[name]
    if role is Role.COLLECT:
        return "reduction" if graph.nodes[name].reducer is not None else "collect"
    return str(role.value)


def _drawn(graph: Graph, outputs: Iterable[str] | None) -> tuple[set[str], set[str]]:
    """Nodes and inputs to draw."""
    if outputs is None:
        nodes = set(graph.nodes)
    else:
        wanted = list(outputs)
        unknown = [o for o in wanted if o not in graph.nodes]
        if unknown:
            raise FlowdataError(f"cannot draw unknown node(s) {', '.join(map(repr, unknown))}")
        nodes = set(graph.ancestors(wanted))
    inputs = {
        p.name
        for n in nodes
        for p in graph.nodes[n].params
        if p.name not in graph.nodes and p.name not in BUILTINS
    }
    return nodes, inputs


def _overlay(report: Report | None) -> tuple[dict[str, float], dict[str, int]]:
    if report is None:
        return {}, {}
    total = sum(report.node_seconds.values()) or 1.0
    share = {n: s / total for n, s in report.node_seconds.items()}
    skips: dict[str, int] = {}
    for s in report.skipped:
        skips[s.node] = skips.get(s.node, 0) + 1
    return share, skips


def _heat(share: float) -> str:
    """White (no time) to red (all the time)."""
    level = int(255 - 200 * max(0.0, min(1.0, share)))
    return f"#ff{level:02x}{level:02x}"


def to_dot(
    graph: Graph,
    analysis: Analysis,
    *,
    outputs: Iterable[str] | None = None,
    show_types: bool = True,
    show_passes: bool = True,
    orient: str = "LR",
    report: Report | None = None,
    legend: bool = True,
) -> Any:
    """The picture as a ``graphviz.Digraph`` (DOT source always; rendering needs ``dot``)."""
    try:
        import graphviz
    except ImportError as exc:  # pragma: no cover - graphviz is a dependency of the extras
        raise FlowdataError("drawing needs the graphviz package\n  fix: pip install graphviz") from exc

    nodes, inputs = _drawn(graph, outputs)
    levels = pass_levels(graph, analysis)
    share, skips = _overlay(report)
    dot = graphviz.Digraph("flowdata", graph_attr={"rankdir": orient, "fontname": "Helvetica", "fontsize": "11"})
    dot.attr("node", fontname="Helvetica", fontsize="10")
    dot.attr("edge", fontname="Helvetica", fontsize="9")
    sources = [n for n in graph.toposort() if n in nodes and analysis.roles.get(n) is Role.SOURCE]
    color = {g: _GROUP_COLORS[i % len(_GROUP_COLORS)] for i, g in enumerate(sources)}

    def node_attrs(name: str) -> dict[str, str]:
        kind = _kind(name, graph, analysis)
        attrs = dict(_SHAPES[kind])
        lines = [name]
        if name in graph.nodes:
            node = graph.nodes[name]
            if show_types and kind in ("source", "once", "collect", "reduction", "batch"):
                lines.append(f"Batch[{type_name(node.type)}]" if kind == "batch" else type_name(node.type))
            if show_passes and name in levels:
                lines.append(f"pass {levels[name]}")
            if kind in ("per-sample", "collect", "reduction", "batch") and "fillcolor" not in attrs:
                attrs["fillcolor"] = _PASS_FILL[(levels.get(name, 1) - 1) % len(_PASS_FILL)]
            if kind in ("collect", "reduction", "batch"):
                attrs["color"] = color.get(analysis.group_of[name], "black")
            if node.reducer is not None:
                lines.append(f"@reduce({node.reducer.cls.__name__})")
            attrs["tooltip"] = f"{node.signature}\n{node.location}"
        if report is not None and name in graph.nodes:
            calls = report.node_calls.get(name)
            if name in share:
                styles = [x for x in attrs.get("style", "").split(",") if x]
                attrs["style"] = ",".join(styles if "filled" in styles else [*styles, "filled"])
                attrs["fillcolor"] = _heat(share[name])
                lines.append(f"{calls or 0} calls, {report.node_seconds[name]:.3g}s ({share[name]:.0%})")
            if skips.get(name):
                lines.append(f"{skips[name]} skipped")
                attrs["color"] = "#d93025"
                attrs["penwidth"] = "2"
        attrs["label"] = "\n".join(lines)
        return attrs

    clusters: dict[str, list[str]] = {g: [] for g in sources}
    batches: dict[str, list[str]] = {g: [] for g in sources}
    outside: list[str] = []
    for name in graph.toposort():
        if name not in nodes:
            continue
        role = analysis.roles.get(name)
        if role is Role.SOURCE:
            clusters[name].insert(0, name)
        elif role is Role.PER_SAMPLE:
            clusters[analysis.group_of[name]].append(name)
        elif role is Role.BATCH and analysis.group_of[name] in batches:
            batches[analysis.group_of[name]].append(name)
        else:
            outside.append(name)
    for g, members in clusters.items():
        node = graph.nodes[g]
        label = f"group '{g}' ({node.source})"
        if report is not None and g in report.seen:
            label += f", {report.seen[g]} samples seen"
        with dot.subgraph(name=f"cluster_{g}") as sub:
            sub.attr(label=label, style="dotted,rounded", color=color[g], penwidth="2", fontcolor=color[g])
            for m in members:
                sub.node(m, **node_attrs(m))
        if batches[g]:
            with dot.subgraph(name=f"cluster_{g}_batches") as sub:
                sub.attr(label=f"batches of '{g}', after collation", style="dashed,rounded", color=color[g],
                         penwidth="2", fontcolor=color[g])
                for m in batches[g]:
                    sub.node(m, **node_attrs(m))
    for name in sorted(inputs):
        dot.node(name, **node_attrs(name))
    for name in outside:
        dot.node(name, **node_attrs(name))

    for name in sorted(nodes):  # sorted: the same picture whatever the hash seed
        node = graph.nodes[name]
        for p in node.params:
            if p.name not in nodes and p.name not in inputs:
                continue
            attrs: dict[str, str] = {}
            if show_types:
                producer = graph.nodes.get(p.name)
                shown = type_name(producer.type if producer is not None else p.type)
                attrs["label"] = f"Collect[{shown}]" if p.collect else f"Batch[{shown}]" if p.batch else shown
            if p.batch:
                attrs.update(arrowhead="diamond", penwidth="2")
                group = analysis.group_of.get(name)
                if group is not None and group in color:
                    attrs["color"] = color[group]
            if p.collect:
                attrs.update(style="bold", arrowhead="crow", penwidth="2")
                group = analysis.group_of.get(name)
                if group is not None and group in color:
                    attrs["color"] = color[group]
            dot.edge(p.name, name, **attrs)

    if legend:
        with dot.subgraph(name="cluster_legend") as leg:
            leg.attr(label="legend", style="rounded", color="#9aa0a6", fontcolor="#5f6368")
            previous = None
            kinds = ["input", "once", "source", "per-sample", "collect", "reduction"]
            if any(analysis.roles.get(n) is Role.BATCH for n in nodes):
                kinds.append("batch")  # only where a picture has one: older pictures stay as they were
            for kind in kinds:
                key = f"legend_{kind.replace('-', '_')}"
                attrs = dict(_SHAPES[kind])
                attrs.setdefault("fillcolor", _PASS_FILL[0])
                leg.node(key, label=kind, **attrs)
                if previous is not None:
                    leg.edge(previous, key, style="invis")
                previous = key
            if show_passes:
                for k in (1, 2):
                    key = f"legend_pass{k}"
                    leg.node(key, label=f"pass {k}", shape="box", style="filled", fillcolor=_PASS_FILL[k - 1])
                    leg.edge(previous, key, style="invis")
                    previous = key
    return dot


def _mermaid_id(name: str) -> str:
    return "n_" + "".join(c if c.isalnum() else "_" for c in name)


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def to_mermaid(graph: Graph, analysis: Analysis, *, outputs: Collection[str] | None = None, orient: str = "LR") -> str:
    """The graph as a Mermaid flowchart: groups as subgraphs, Collect edges thick."""
    nodes, inputs = _drawn(graph, outputs)
    levels = pass_levels(graph, analysis)
    shapes = {
        "input": ('(["', '"])'),
        "once": ('("', '")'),
        "source": ('[/"', '"/]'),
        "per-sample": ('["', '"]'),
        "collect": ('[\\"', '"/]'),
        "reduction": ('{{"', '"}}'),
        "batch": ('[["', '"]]'),
    }

    def line(name: str) -> str:
        kind = _kind(name, graph, analysis)
        label = name + (f" · pass {levels[name]}" if name in levels else "")
        left, right = shapes[kind]
        return f"{_mermaid_id(name)}{left}{_mermaid_text(label)}{right}"

    out = [f"flowchart {orient}"]
    for name in sorted(inputs):
        out.append(f"  {line(name)}")
    order = [n for n in graph.toposort() if n in nodes]
    for g in (n for n in order if analysis.roles.get(n) is Role.SOURCE):
        out.append(f'  subgraph {_mermaid_id("group_" + g)}["group {_mermaid_text(g)} ({graph.nodes[g].source})"]')
        for n in order:
            if n == g or (analysis.roles.get(n) is Role.PER_SAMPLE and analysis.group_of[n] == g):
                out.append(f"    {line(n)}")
        out.append("  end")
        batch = [n for n in order if analysis.roles.get(n) is Role.BATCH and analysis.group_of[n] == g]
        if batch:
            out.append(f'  subgraph {_mermaid_id("batches_" + g)}["batches of {_mermaid_text(g)}, after collation"]')
            out.extend(f"    {line(n)}" for n in batch)
            out.append("  end")
    for n in order:
        if analysis.roles.get(n) not in (Role.SOURCE, Role.PER_SAMPLE, Role.BATCH):
            out.append(f"  {line(n)}")
    for n in order:
        for p in graph.nodes[n].params:
            if p.name in nodes or p.name in inputs:
                arrow = "==>|Collect|" if p.collect else "-.->|Batch|" if p.batch else "-->"
                out.append(f"  {_mermaid_id(p.name)} {arrow} {_mermaid_id(n)}")
    return "\n".join(out) + "\n"
