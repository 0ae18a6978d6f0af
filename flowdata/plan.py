"""Structure: roles, groups and passes. Pure data, computed once and never mutated.

:func:`analyze` reads a whole :class:`~flowdata.graph.Graph` and gives every node its
:class:`~flowdata.node.Role` and group, reporting every structural problem (FD2xx).
:func:`make_plan` narrows that to what some outputs need and splits each group's work
into passes:

- a Collect node's *level* is the pass that feeds it: 1 unless something it reads (a
  per-sample value or a once value) needs a Collect result of the same group first;
- a per-sample node's level is 1 plus the level of any Collect node of its own group it
  depends on (``normalized(feature, feature_stats)`` is pass 2 when ``feature_stats``
  collects ``feature``);
- pass ``k`` computes only the per-sample nodes the Collect nodes of level ``k`` (and
  requested per-sample outputs of that level) need: each node is computed only in the
  passes that need it.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from flowdata.errors import GraphProblem, InputError
from flowdata.graph import BUILTINS, Graph
from flowdata.node import Node, Param, Role
from flowdata.spelling import near, plural_pair
from flowdata.types import is_iterator, type_name

__all__ = ["Analysis", "GroupPlan", "PassPlan", "Plan", "analyze", "make_plan", "pass_levels"]


@dataclass(frozen=True)
class Analysis:
    """Roles and groups of every node of a graph.

    Attributes:
        roles: Role of every node.
        group_of: The group (source name) of every source, per-sample node and Collect node
            (the group a Collect node closes).
        closes: For a source that takes ``Collect[...]``: the group it closes.
        problems: Structural problems found (empty for a valid graph).
    """

    roles: Mapping[str, Role]
    group_of: Mapping[str, str]
    closes: Mapping[str, str]
    problems: tuple[GraphProblem, ...]

    def per_sample(self, name: str) -> bool:
        """True for per-sample nodes and sources (whose value, to a reader, is one item)."""
        return self.roles.get(name) in (Role.PER_SAMPLE, Role.SOURCE)

    def batch(self, name: str) -> bool:
        """True for batch nodes (run once per collated batch of their group)."""
        return self.roles.get(name) is Role.BATCH


def _generator_hint(producer: Node | None) -> str:
    """The fix for a generator annotated ``Iterator[T]`` where a source was meant."""
    if producer is None:
        return ""
    if not (is_iterator(producer.type) or inspect.isgeneratorfunction(producer.origin or producer.fn)):
        return ""
    args = getattr(producer.type, "__args__", None) or ("T",)
    item = type_name(args[0]) if not isinstance(args[0], str) else args[0]
    return (f"'{producer.name}' yields items: to make each one a sample, annotate it '-> Parallel[{item}]' "
            f"(or Sequential[{item}]) instead of '-> {type_name(producer.type)}'")


def _typo_hint(graph: Graph, name: str) -> str:
    """The fix when ``name`` is computed once only because it (or a node it reads) reads
    an input spelt almost like a node (``length(wrod: str)`` for ``word``)."""
    for upstream in graph.toposort(graph.ancestors([name])):
        for p in graph.nodes[upstream].params:
            if p.name not in graph.inputs:
                continue
            meant = near(p.name, graph.nodes)
            if meant is None or plural_pair(p.name, meant) or meant == upstream:
                continue
            node = graph.nodes[meant]
            via = "" if upstream == name else f", and '{name}' reads '{upstream}'"
            return (f"'{upstream}' reads '{p.name}', which no node makes, so it is an input{via}: did you mean "
                    f"node '{meant}' ({node.location})? rename the parameter '{p.name}' to '{meant}'")
    return ""


def _problem(code: str, title: str, node: Node, message: str, fix: str, *others: Node,
             expected: str = "", actual: str = "") -> GraphProblem:
    return GraphProblem(
        code=code,
        title=title,
        message=message,
        node=node.name,
        locations=(node.location, *(o.location for o in others)),
        expected=expected,
        actual=actual,
        fix=fix,
    )


def analyze(graph: Graph) -> Analysis:
    """Gives every node a role and a group; reports structural problems (FD2xx).

    Assumes the graph has no cycle (cycles are reported before this runs).
    """
    roles: dict[str, Role] = {}
    group_of: dict[str, str] = {}
    closes: dict[str, str] = {}
    problems: list[GraphProblem] = []

    def group_read(name: str) -> str | None:
        """The group whose samples reading ``name`` yields, or None for a whole value."""
        role = roles.get(name)
        if role is Role.SOURCE:
            return name
        if role is Role.PER_SAMPLE:
            return group_of[name]
        return None

    for name in graph.toposort():
        node = graph.nodes[name]
        per_sample: dict[str, str] = {}  # group -> a param that brought it
        collected: dict[str, str] = {}
        batched: dict[str, str] = {}  # group -> a Batch[...] param, or a param reading a batch node
        uses_builtin = [p.name for p in node.params if p.name in BUILTINS and p.name not in graph.nodes]
        for p in node.params:
            g = group_read(p.name)
            if p.batch and p.name in BUILTINS and p.name not in graph.nodes:
                continue  # the batch's sample indices or generators, given with the batch
            if p.batch or roles.get(p.name) is Role.BATCH:
                problem = _batch_param(graph, node, p, roles, group_of)
                if problem is not None:
                    problems.append(problem)
                elif p.batch:
                    batched.setdefault(g or group_of[p.name], p.name)
                else:  # a plain parameter reading a batch node: FD211/FD212 below
                    batched.setdefault(group_of[p.name], "")
                continue
            if p.collect:
                if g is None:
                    producer = graph.nodes.get(p.name)
                    what = "an input" if producer is None else f"{roles[p.name].value} node '{p.name}'"
                    problems.append(_problem(
                        "FD202", "collect-outside-group", node,
                        f"'{name}' collects '{p.name}', but '{p.name}' is {what}: "
                        "it has one value, not one per sample",
                        _generator_hint(producer) or _typo_hint(graph, p.name) or f"take '{p.name}: {type_name(p.type)}' without Collect, "
                        "or collect a per-sample node of a group",
                        *([producer] if producer else []),
                        expected=f"'{p.name}' computed once per sample (inside a group)",
                        actual=f"'{p.name}' computed once per call",
                    ))
                else:
                    collected.setdefault(g, p.name)
            elif g is not None:
                per_sample.setdefault(g, p.name)
        if len(collected) > 1:
            groups = ", ".join(f"'{p}' (group '{g}')" for g, p in collected.items())
            problems.append(_problem(
                "FD203", "collect-mixed-groups", node,
                f"'{name}' collects from two groups: {groups}; their samples do not line up",
                "collect each group in its own node, then combine the two results",
                expected="every Collect parameter from one group",
                actual=f"groups {', '.join(repr(g) for g in collected)}",
            ))
        if len(per_sample) > 1:
            groups = ", ".join(f"'{p}' (group '{g}')" for g, p in per_sample.items())
            problems.append(_problem(
                "FD204", "join-groups", node,
                f"'{name}' joins per-sample values of two groups: {groups}",
                "Collect one group first and pass its result as a whole value, or yield pairs "
                "from a single source",
                *(graph.nodes[g] for g in per_sample),
                expected="per-sample values of one group",
                actual=f"groups {', '.join(repr(g) for g in per_sample)}",
            ))
        if node.batch_params or node.batch or batched:
            plain_builtins = [b for b in uses_builtin if not node.param(b).batch]
            problems.extend(_batch_node(graph, node, roles, per_sample, collected, batched, plain_builtins))
            joined = list(dict.fromkeys([*batched, *per_sample]))
            if len(joined) > 1 and len(per_sample) <= 1:
                problems.append(_problem(
                    "FD204", "join-groups", node,
                    f"'{name}' joins batches of two groups: {', '.join(repr(g) for g in joined)}; their "
                    "samples do not line up",
                    "compute each group's batches in its own loader, or yield pairs from a single source",
                    *(graph.nodes[g] for g in joined),
                    expected="batches of one group", actual=f"groups {', '.join(repr(g) for g in joined)}",
                ))
            if joined and node.source is None:
                roles[name] = Role.BATCH
                group_of[name] = joined[0]
                continue
        if node.source is not None and uses_builtin:
            problems.append(_problem(
                "FD208", "source-reads-builtin", node,
                f"source '{name}' reads {', '.join(repr(b) for b in uses_builtin)}, which exists only per "
                f"sample, once '{name}' has yielded it",
                "number the items inside the source (enumerate), or read the builtin in a per-sample node",
                expected="a source reading inputs, once values and Collect results",
                actual=f"parameters {', '.join(repr(b) for b in uses_builtin)}",
            ))
        if node.source is not None:
            roles[name] = Role.SOURCE
            group_of[name] = name
            if per_sample:
                g, via = next(iter(per_sample.items()))
                problems.append(_problem(
                    "FD205", "nested-source", node,
                    f"source '{name}' reads '{via}', a per-sample value of group '{g}': "
                    "a source inside a group (nested groups) is not supported",
                    f"yield the inner items from '{g}' directly, or take '{via}: Collect[...]' "
                    "to close the group first",
                    graph.nodes[g],
                ))
            if collected:
                closes[name] = next(iter(collected))
            continue
        if collected:
            roles[name] = Role.COLLECT
            group_of[name] = next(iter(collected))
            if per_sample:
                g, via = next(iter(per_sample.items()))
                problems.append(_problem(
                    "FD206", "collect-and-per-sample", node,
                    f"'{name}' takes Collect parameters and also the per-sample value '{via}' "
                    f"of group '{g}'",
                    f"split it: one node collects, another per-sample node reads '{via}' and the "
                    "collected result",
                ))
            continue
        if per_sample:
            roles[name] = Role.PER_SAMPLE
            group_of[name] = next(iter(per_sample))
            continue
        roles[name] = Role.ONCE
        if uses_builtin:
            problems.append(_problem(
                "FD207", "builtin-outside-group", node,
                f"'{name}' reads {', '.join(repr(b) for b in uses_builtin)}, which exists only "
                f"per sample, but '{name}' reads no per-sample value",
                "read a value of the group too, or drop the parameter",
            ))
    for name, node in graph.nodes.items():
        if node.vectorized and roles.get(name) is not Role.PER_SAMPLE:
            what = roles[name].value if name in roles else "not per-sample"
            problems.append(_problem(
                "FD209", "vectorized-not-per-sample", node,
                f"'{name}' is @vectorized, but it is a {what} node: only a per-sample node is "
                "called on a chunk of samples",
                "drop @vectorized, or make it read a per-sample value of a group",
                expected="a per-sample node", actual=f"a {what} node",
            ))
    return Analysis(
        roles=MappingProxyType(roles),
        group_of=MappingProxyType(group_of),
        closes=MappingProxyType(closes),
        problems=tuple(problems),
    )


def _batch_param(graph: Graph, node: Node, p: Param, roles: Mapping[str, Role],
                 group_of: Mapping[str, str]) -> GraphProblem | None:
    """FD210 for a ``Batch[...]`` parameter reading a whole value; FD213 for a Collect
    parameter reading a batch node (its values are batches, not samples)."""
    role = roles.get(p.name)
    producer = graph.nodes.get(p.name)
    if p.collect:
        assert producer is not None
        return _problem(
            "FD213", "batch-into-collect", node,
            f"'{node.name}' collects '{p.name}', a batch node: it runs once per batch, after collation, in "
            "the process that iterates the loader, so no pass can feed its values to a Collect",
            f"collect the per-sample value '{p.name}' reads, or compute '{node.name}' from a per-sample node",
            producer, expected="Collect of a per-sample node", actual=f"batch node '{p.name}'",
        )
    if not p.batch or role in (Role.PER_SAMPLE, Role.SOURCE, Role.BATCH):
        return None
    what = "an input" if producer is None else f"a {role.value if role else 'whole'} node"
    return _problem(
        "FD210", "batch-outside-group", node,
        f"'{node.name}' takes '{p.name}' as Batch[{type_name(p.type)}], but '{p.name}' is {what}: it has one "
        "value, not one per sample, so there is no batch of it",
        f"take '{p.name}: {type_name(p.type)}' without Batch (a batch node may read whole values as they are), "
        "or read a per-sample node of the group",
        *([producer] if producer else []),
        expected=f"'{p.name}' computed once per sample (or by a batch node)", actual=f"'{p.name}' is {what}",
    )


def _collated_name(tp: object) -> str:
    """What torch's default_collate makes of values of type ``tp``, as a type name."""
    name = type_name(tp)
    if tp in (int, float, bool) or name.startswith(("torch.Tensor", "numpy.")):
        return "torch.Tensor"
    return f"list[{name}]" if tp in (str, bytes) else name


def _batch_node(graph: Graph, node: Node, roles: Mapping[str, Role], per_sample: Mapping[str, str],
                collected: Mapping[str, str], batched: Mapping[str, str], builtins: list[str]) -> list[GraphProblem]:
    """The rules of a node that reads ``Batch[...]`` values or a batch node, or returns
    ``Batch[...]`` (FD211, FD212, FD213, FD214, FD215)."""
    name = node.name
    out: list[GraphProblem] = []
    plain_batch = [p for p in node.params if not p.batch and not p.collect and roles.get(p.name) is Role.BATCH]
    if node.source is not None:
        via = next((v for v in batched.values() if v), "") or (plain_batch[0].name if plain_batch else "")
        out.append(_problem(
            "FD212", "batch-feeds-per-sample", node,
            f"source '{name}' reads '{via}' as a batch: batch values exist only after collation, in the process "
            "that iterates the loader, long after the source has yielded its items",
            "read whole values in the source, and batches in a batch node",
        ))
        return out
    is_batch = bool(node.batch_params) or node.batch
    if plain_batch and per_sample and not is_batch:
        p = plain_batch[0]
        out.append(_problem(
            "FD212", "batch-feeds-per-sample", node,
            f"'{name}' reads the per-sample value '{next(iter(per_sample.values()))}' and the batch node "
            f"'{p.name}': a batch node runs after collation, in the process that iterates the loader, so it "
            "cannot feed per-sample work",
            f"make '{name}' a batch node (Batch[...] parameters and return), or read the per-sample value "
            f"'{p.name}' reads instead",
            graph.nodes[p.name], expected="per-sample values only", actual=f"batch node '{p.name}'",
        ))
        return out
    for p in plain_batch:
        out.append(_problem(
            "FD211", "batch-needs-marker", node,
            f"'{name}' reads the batch node '{p.name}' as {type_name(p.type)}: its value is a whole batch",
            f"annotate the parameter as '{p.name}: Batch[{type_name(p.type)}]' and the return as "
            f"'-> Batch[{type_name(node.type)}]'",
            graph.nodes[p.name], expected=f"{p.name}: Batch[{type_name(p.type)}]", actual=f"{p.name}: {type_name(p.type)}",
        ))
    if not is_batch:
        return out
    for g, via in per_sample.items() if node.batch_params or plain_batch else ():
        shown, collated = type_name(node.param(via).type), _collated_name(graph.nodes[via].type)
        out.append(_problem(
            "FD211", "batch-needs-marker", node,
            f"'{name}' is a batch node (it reads Batch[...] values), but takes the per-sample value '{via}' of "
            f"group '{g}' as {shown}: a batch node is called once per batch",
            f"annotate the parameter as '{via}: Batch[{collated}]' (the collated batch)",
            graph.nodes[via], expected=f"{via}: Batch[{collated}]", actual=f"{via}: {shown}",
        ))
    if collected:
        via = next(iter(collected.values()))
        out.append(_problem(
            "FD213", "batch-into-collect", node,
            f"'{name}' is a batch node but takes Collect parameter '{via}': a batch node reads batches, and "
            "whole values as they are",
            f"collect '{via}' in a node of its own and pass its result to '{name}' as a whole value",
        ))
    if builtins:
        wanted = {"sample_index": "sample_index: Batch[torch.Tensor]",
                  "sample_rng": "sample_rng: Batch[list[torch.Generator]]"}
        shown = ", ".join(f"'{b}: {type_name(node.param(b).type)}'" for b in builtins)
        out.append(_problem(
            "FD214", "batch-reads-builtin", node,
            f"batch node '{name}' reads {shown}, which exists once per sample: a batch node receives the batch's",
            f"annotate it as '{', '.join(wanted[b] for b in builtins)}' (one per sample of the batch)",
            expected=", ".join(wanted[b] for b in builtins), actual=shown,
        ))
    if not node.batch:
        out.append(_problem(
            "FD215", "batch-return", node,
            f"'{name}' reads Batch[...] values, so it runs once per batch, but returns {type_name(node.type)}",
            f"declare '-> Batch[{type_name(node.type)}]' (a value whose first dimension is the batch)",
            expected=f"-> Batch[{type_name(node.type)}]", actual=f"-> {type_name(node.type)}",
        ))
    elif not node.batch_params and not plain_batch:
        out.append(_problem(
            "FD215", "batch-return", node,
            f"'{name}' returns Batch[{type_name(node.type)}] but reads no batch: nothing makes it run once per batch",
            f"read a per-sample node as 'x: Batch[...]', or declare '-> {type_name(node.type)}'",
            expected="at least one Batch[...] parameter", actual=f"{node.signature}",
        ))
    return out


@dataclass(frozen=True)
class PassPlan:
    """One pass over a group's samples.

    Attributes:
        number: 1, 2, ...
        computes: Per-sample nodes computed for each sample, producers first.
        feeds: Collect nodes (and sources that collect) fed by this pass.
        outputs: Per-sample values delivered by this pass: the requested ones, and those
            its batch nodes read.
        needs: Whole values (once nodes, inputs, Collect results) the pass reads.
        batches: Batch nodes computed on the collated batches of this pass's outputs,
            producers first (the whole values they read are not in ``needs``: they are
            read where the batches are, never in the workers).
    """

    number: int
    computes: tuple[str, ...]
    feeds: tuple[str, ...]
    outputs: tuple[str, ...]
    needs: tuple[str, ...]
    batches: tuple[str, ...] = ()


@dataclass(frozen=True)
class GroupPlan:
    """A source and the per-sample work it opens.

    Attributes:
        source: Name of the source node; also the group's name.
        kind: ``"parallel"`` or ``"sequential"``.
        per_sample: Every needed per-sample node of the group, producers first.
        collects: Needed Collect nodes closing the group (sources that collect included).
        passes: The passes, in order.
    """

    source: str
    kind: str
    per_sample: tuple[str, ...]
    collects: tuple[str, ...]
    passes: tuple[PassPlan, ...]

    def pass_of(self, name: str) -> PassPlan:
        """The pass that feeds Collect node ``name`` (or delivers output ``name``)."""
        for p in self.passes:
            if name in p.feeds or name in p.outputs or name in p.batches:
                return p
        raise KeyError(name)


@dataclass(frozen=True)
class Plan:
    """What one call computes: pure, printable data.

    Attributes:
        outputs: Requested names.
        inputs: Inputs the call reads (supplied or defaulted).
        once: Once nodes computed, producers first (Collect nodes are in their group).
        groups: Groups the call runs.
        overrides: Names whose values the caller supplied instead of computing them.
    """

    outputs: tuple[str, ...]
    inputs: tuple[str, ...]
    once: tuple[str, ...]
    groups: tuple[GroupPlan, ...]
    overrides: tuple[str, ...] = ()

    def group(self, source: str) -> GroupPlan:
        """The group opened by ``source``."""
        for g in self.groups:
            if g.source == source:
                return g
        raise KeyError(source)

    def __str__(self) -> str:
        lines = [f"plan for {', '.join(self.outputs)}"]
        if self.inputs:
            lines.append(f"  inputs: {', '.join(self.inputs)}")
        if self.overrides:
            lines.append(f"  overrides: {', '.join(self.overrides)}")
        if self.once:
            lines.append(f"  once: {', '.join(self.once)}")
        for g in self.groups:
            lines.append(f"  group '{g.source}' ({g.kind})")
            for p in g.passes:
                lines.append(f"    pass {p.number}")
                lines.append(f"      computes: {', '.join(p.computes) or '-'}")
                if p.feeds:
                    lines.append(f"      feeds:    {', '.join(p.feeds)}")
                if p.outputs:
                    lines.append(f"      yields:   {', '.join(p.outputs)}")
                if p.batches:
                    lines.append(f"      batches:  {', '.join(p.batches)} (after collation)")
                if p.needs:
                    lines.append(f"      reads:    {', '.join(p.needs)}")
        return "\n".join(lines)


def make_plan(
    graph: Graph,
    analysis: Analysis,
    outputs: Iterable[str],
    inputs: Collection[str] = (),
    overrides: Collection[str] = (),
    *,
    allow_per_sample: bool = True,
    check_inputs: bool = True,
) -> Plan:
    """Narrows the graph to what ``outputs`` need and splits groups into passes.

    Args:
        graph: The graph.
        analysis: Its analysis (with no problems).
        outputs: Requested node names.
        inputs: Names of inputs the caller supplies.
        overrides: Node names whose values the caller supplies.
        allow_per_sample: Whether per-sample outputs may be requested (the training
            iterator) or not (``execute()``).
        check_inputs: Whether a missing input is an error (not for a plan only printed).

    Raises:
        InputError: unknown outputs, per-sample outputs where not allowed, missing inputs.
    """
    outputs = tuple(dict.fromkeys(outputs))
    _check_outputs(graph, analysis, outputs, inputs, overrides, allow_per_sample)
    needed = _needed(graph, outputs, overrides, analysis)
    called = needed - set(overrides)  # a source overridden with its items is not called
    # An input is missing when a reader this call needs has no default for it (a reader
    # the call does not need, default or not, does not count).
    missing = sorted(
        name
        for name, spec in graph.inputs.items()
        if name not in inputs and any(n.name in called and not p.optional for n, p in spec.readers)
    )
    if missing and check_inputs:
        lines = []
        unread = graph.unread(inputs)
        for name in missing:
            readers = [f"{n.name} ({n.location})" for n, p in graph.inputs[name].readers
                       if n.name in called and not p.optional]  # those with no default for it
            line = f"  '{name}': read by {', '.join(readers)}"
            given = near(name, unread, cutoff=0.6)
            node = near(name, graph.nodes)
            if node is not None and plural_pair(name, node):
                node = None  # a source 'word(words)' reading its plural input: the idiom, not a typo
            if given:
                line += f" (did you mean the input '{given}' you gave?)"
            elif node:
                line += f" (did you mean node '{node}'? a parameter spelt like no node is an input)"
            lines.append(line)
        raise InputError(
            f"missing input{'s' if len(missing) > 1 else ''} {', '.join(repr(m) for m in missing)}:\n"
            + "\n".join(lines)
            + f"\n  fix: pass inputs={{{', '.join(repr(m) + ': ...' for m in missing)}}}"
        )
    order = [n for n in graph.toposort(needed)]
    used_inputs = tuple(
        name for name, spec in graph.inputs.items() if any(n.name in called for n, _ in spec.readers)
    )
    once = tuple(n for n in order if analysis.roles[n] is Role.ONCE)
    levels = _Levels(graph, analysis, overrides)
    groups = []
    for source in (n for n in order if analysis.roles[n] is Role.SOURCE):
        groups.append(_group_plan(graph, analysis, levels, source, order, outputs))
    return Plan(
        outputs=outputs,
        inputs=used_inputs,
        once=once,
        groups=tuple(groups),
        overrides=tuple(o for o in overrides if o in graph.nodes),
    )


def _check_outputs(
    graph: Graph,
    analysis: Analysis,
    outputs: tuple[str, ...],
    inputs: Collection[str],
    overrides: Collection[str],
    allow_per_sample: bool,
) -> None:
    unknown = [o for o in outputs if o not in graph.nodes and o not in inputs]
    as_input = [o for o in unknown if o in graph.inputs]
    if as_input:
        raise InputError(
            f"'{as_input[0]}' is an input of the graph, not a node: nothing computes it\n"
            f"  fix: pass it in inputs={{'{as_input[0]}': ...}} to get it back, or ask for a node"
        )
    if unknown:
        hints = []
        for u in unknown:
            close = near(u, graph.nodes, cutoff=0.6)
            hints.append(f"'{u}'" + (f" (did you mean '{close}'?)" if close else ""))
        raise InputError(
            f"unknown output{'s' if len(unknown) > 1 else ''} {', '.join(hints)}: no node has that name\n"
            f"  fix: ask for one of the graph's nodes: {', '.join(sorted(graph.nodes))}"
        )
    for o in overrides:
        if analysis.roles.get(o) is Role.PER_SAMPLE:
            raise InputError(
                f"cannot override '{o}': it is {analysis.roles[o].value} in group "
                f"'{analysis.group_of[o]}' (one value per sample)\n"
                "  fix: override a once or Collect node, or pass different inputs"
            )
    if allow_per_sample:
        groups = {analysis.group_of[o] for o in outputs
                  if (analysis.per_sample(o) or analysis.batch(o)) and o not in overrides}
        if len(groups) > 1:
            raise InputError(
                f"per-sample outputs come from several groups ({', '.join(sorted(groups))}); "
                "one call iterates one group\n  fix: ask for the outputs of one group per call"
            )
        return
    for o in outputs:
        if analysis.per_sample(o) and o not in overrides:
            g = analysis.group_of[o]
            node = graph.nodes[o]
            raise InputError(
                f"'{o}' ({node.location}) is per-sample in group '{g}': it has one value per "
                "sample, and execute() returns whole values\n"
                f"  fix: add a Collect node, e.g. 'def all_{o}({o}: Collect[{type_name(node.type)}]) "
                f"-> list[{type_name(node.type)}]: return list({o})', or use "
                f"driver.run_sample(['{o}'], index=0) to inspect one sample"
            )


def _needed(graph: Graph, outputs: tuple[str, ...], overrides: Collection[str], analysis: Analysis) -> frozenset[str]:
    """What the outputs need, stopping at overrides. An overridden source stays (its group
    runs over the items given), but not what it reads."""
    given_sources = {o for o in overrides if analysis.roles.get(o) is Role.SOURCE}
    return graph.ancestors(outputs, stop=overrides) - (set(overrides) - given_sources)


class _Levels:
    """Pass levels, memoised. A helper of make_plan, not part of the plan."""

    def __init__(self, graph: Graph, analysis: Analysis, overrides: Collection[str] = ()):
        self.graph = graph
        self.analysis = analysis
        self.overrides = frozenset(overrides)
        self._level: dict[str, int] = {}
        self._after: dict[tuple[str, str], int] = {}

    def level(self, name: str) -> int:
        """Pass of a per-sample node or of the pass feeding a Collect node."""
        if name in self._level:
            return self._level[name]
        an = self.analysis
        node = self.graph.nodes[name]
        g = an.closes.get(name) if an.roles[name] is Role.SOURCE else an.group_of[name]
        lvl = 1
        for p in node.params:
            if p.name not in self.graph.nodes:
                continue
            if an.roles[p.name] in (Role.PER_SAMPLE, Role.BATCH) and an.group_of[p.name] == g:
                lvl = max(lvl, self.level(p.name))
            elif an.roles[p.name] is Role.SOURCE and p.name == g:
                pass
            elif g is not None:
                lvl = max(lvl, 1 + self.after(p.name, g))
        self._level[name] = lvl
        return lvl

    def after(self, name: str, group: str) -> int:
        """The last pass of ``group`` whose results the whole value ``name`` depends on (0: none)."""
        key = (name, group)
        if key not in self._after:
            an = self.analysis
            role = an.roles.get(name)
            if role is None or name in self.overrides:
                result = 0  # an input, or a value the caller supplied
            elif (role is Role.COLLECT and an.group_of[name] == group) or an.closes.get(name) == group:
                result = self.level(name)
            else:
                result = max((self.after(d, group) for d in self.graph.deps(name)), default=0)
            self._after[key] = result
        return self._after[key]


def _group_plan(
    graph: Graph,
    analysis: Analysis,
    levels: _Levels,
    source: str,
    order: list[str],
    outputs: tuple[str, ...],
) -> GroupPlan:
    in_group = [n for n in order if analysis.roles[n] is Role.PER_SAMPLE and analysis.group_of[n] == source]
    collects = [
        n
        for n in order
        if (analysis.roles[n] is Role.COLLECT and analysis.group_of[n] == source)
        or analysis.closes.get(n) == source
    ]
    batches = [n for n in order if analysis.roles[n] is Role.BATCH and analysis.group_of[n] == source]
    wanted_outputs = list(dict.fromkeys(
        [o for o in outputs if o in in_group or o == source]
        + [p.name for b in batches for p in graph.nodes[b].batch_params if analysis.per_sample(p.name)]))
    feeds_by_level: dict[int, list[str]] = {}
    for c in collects:
        feeds_by_level.setdefault(levels.level(c), []).append(c)
    # Batch nodes run on the batches of the pass that delivers the outputs: the last one
    # any of them (or a requested per-sample output) needs.
    out_level = max([levels.level(o) if o != source else 1 for o in wanted_outputs]
                    + [levels.level(b) for b in batches], default=0)
    numbers = sorted(set(feeds_by_level) | ({out_level} if wanted_outputs else set()))
    passes = []
    for k in numbers:
        feeds = tuple(feeds_by_level.get(k, ()))
        outs = tuple(wanted_outputs) if k == out_level else ()
        roots = [p.name for c in feeds for p in graph.nodes[c].params if p.collect]
        roots += [o for o in outs]
        computes = _closure_in_group(graph, analysis, source, roots)
        computes_ordered = tuple(n for n in in_group if n in computes)
        needs = sorted(
            {
                p.name
                for n in (*computes_ordered, source)
                for p in graph.nodes[n].params
                if not p.collect
                and p.name != source
                and (p.name in graph.nodes or p.name not in BUILTINS)
                and not (analysis.roles.get(p.name) is Role.PER_SAMPLE and analysis.group_of[p.name] == source)
            }
        )
        passes.append(PassPlan(k, computes_ordered, feeds, outs, tuple(needs),
                               tuple(batches) if k == out_level else ()))
    return GroupPlan(
        source=source,
        kind=graph.nodes[source].source or "parallel",
        per_sample=tuple(in_group),
        collects=tuple(collects),
        passes=tuple(passes),
    )


def _closure_in_group(graph: Graph, analysis: Analysis, source: str, roots: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    stack = [r for r in roots if analysis.roles.get(r) is Role.PER_SAMPLE]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        for d in graph.deps(n):
            if analysis.roles[d] is Role.PER_SAMPLE and analysis.group_of[d] == source:
                stack.append(d)
    return seen


def pass_levels(graph: Graph, analysis: Analysis) -> dict[str, int]:
    """The pass of every per-sample node, of the pass feeding every Collect node, and of
    the pass whose batches every batch node reads."""
    levels = _Levels(graph, analysis)
    return {
        name: levels.level(name)
        for name, role in analysis.roles.items()
        if role in (Role.PER_SAMPLE, Role.COLLECT, Role.BATCH) or (role is Role.SOURCE and name in analysis.closes)
    }
