"""bench/frontier: the frontier of a 100,000-task run, from scratch and after one capability goes
down, against networkx doing the same (descendants of the affected tasks, then filtering).

The run is a layered random DAG (1,000 lanes x 100 layers, ~3 prerequisites each from nearby lanes
of the layer before, 20 capabilities, transactions in 1% of the lanes, fixed seed), a third of the
way through. The forge, needed by 1% of the tasks (the push at the end of each lane), goes down.
The second case scatters those tasks over the last twenty layers: the reach of the change is larger,
and so is the incremental cost (it follows the reach, not the run). In the third, ten of the pushes
are in transactions: to tell whether a member waiting on 60 layers of pending work is blocked or
merely waiting, recompute has to walk up those layers (the stored blockers say `prerequisite:`
for both), so that case costs about as much as the full frontier.

Run: `.venv/bin/python bench/frontier.py [--tasks 100000] [--repeat 5]`. Prints timings and ratios.
"""

import argparse
import gc
import random
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import networkx as nx  # noqa: E402

from runs.frontier import (  # noqa: E402
    PREREQUISITE,
    STOPPED,
    TRANSACTION,
    Frontier,
    GraphIndex,
    TaskNode,
    World,
    build_index,
    frontier,
    recompute,
    touched_by_capability,
)

WIDTH = 1_000
WINDOW = 8
FORGE = "forge"
OTHERS = [f"c{i:02d}" for i in range(19)]


def make_run(
    tasks: int, *, scattered: bool, groups_at_the_end: bool, seed: int = 20261202
) -> dict[str, TaskNode]:
    rng = random.Random(seed)
    layers = tasks // WIDTH
    forge_tasks: set[tuple[int, int]]
    if scattered:
        spots = [(layer, lane) for layer in range(layers - 20, layers) for lane in range(WIDTH)]
        forge_tasks = set(rng.sample(spots, tasks // 100))
    else:
        forge_tasks = {(layers - 1, lane) for lane in range(WIDTH)}
    done_until = layers // 3
    nodes: dict[str, TaskNode] = {}
    for layer in range(layers):
        for lane in range(WIDTH):
            key = f"t{layer}-{lane}"
            prerequisites: tuple[str, ...] = ()
            if layer:
                near = {
                    min(WIDTH - 1, max(0, lane + rng.randint(-WINDOW, WINDOW))) for _ in range(3)
                }
                prerequisites = tuple(sorted(f"t{layer - 1}-{p}" for p in near))
            capabilities = tuple(sorted(set(rng.sample(OTHERS, rng.randint(0, 2)))))
            if (layer, lane) in forge_tasks:
                capabilities = (*capabilities, FORGE)
            if layer < done_until:
                state = "succeeded"
            elif layer == done_until:
                state = rng.choice(("running", "running", "succeeded", "pending"))
            else:
                state = "pending"
            # One lane in a hundred runs part of its work as transactions of four layers.
            in_group = layer >= layers - 4 if groups_at_the_end else 40 <= layer < 60
            transaction = f"tx{lane}-{layer // 4}" if lane % 100 == 7 and in_group else None
            nodes[key] = TaskNode(
                key,
                state=state,
                prerequisites=prerequisites,
                capabilities=capabilities,
                reads_state_of=(rng.choice(OTHERS),) if rng.random() < 0.05 else (),
                effect="external" if rng.random() < 0.02 else "none",
                transaction=transaction,
                weight=rng.randint(1, 5),
            )
    return nodes


# networkx doing the same: the graph, the directly blocked tasks, their descendants, a filter.


def local_blockers(node: TaskNode, nodes: Mapping[str, TaskNode], world: World) -> list[str]:
    found = [PREREQUISITE + p for p in node.prerequisites if nodes[p].state != "succeeded"]
    found += ["capability:" + c for c in node.capabilities if c in world.down]
    if any(c in world.down for c in node.reads_state_of):
        found.append("barrier:freshness")
    if node.effect == "external":
        found += [f"barrier:{role}" for role, c in sorted(world.roles.items()) if c in world.down]
    return found


def nx_graph(nodes: Mapping[str, TaskNode]) -> "nx.DiGraph[str]":
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(nodes)
    graph.add_edges_from((p, key) for key, node in nodes.items() for p in node.prerequisites)
    return graph


def nx_evaluate(
    graph: "nx.DiGraph[str]", nodes: Mapping[str, TaskNode], world: World, keys: Any
) -> dict[str, tuple[str, ...]]:
    """Blockers of the pending tasks among `keys` (closed over descendants and groups)."""
    pending = [k for k in keys if nodes[k].state == "pending"]
    found = {k: local_blockers(nodes[k], nodes, world) for k in pending}
    seeds = {
        k
        for k in pending
        if any(not b.startswith(PREREQUISITE) for b in found[k])
        or any(nodes[p].state in STOPPED for p in nodes[k].prerequisites)
    }
    groups: dict[str, list[str]] = {}
    for k in pending:
        if nodes[k].transaction is not None:
            groups.setdefault(nodes[k].transaction, []).append(k)  # type: ignore[arg-type]
    causes = set(seeds)
    blocked: set[str] = set()
    own: set[str] = set()
    while True:
        for seed in sorted(seeds - blocked):
            if seed not in blocked:
                blocked.add(seed)
                blocked |= nx.descendants(graph, seed)
        own = {
            k for k in blocked if k in causes or any(p in blocked for p in graph.predecessors(k))
        }
        more = {
            m
            for group in groups.values()
            if any(k in own for k in group)
            for m in group
            if m not in blocked
        }
        if not more:
            break
        seeds |= more
    for group in groups.values():
        holders = [k for k in group if k in own and nodes[k].state == "pending"]
        for k in group:
            if len(holders) - (k in holders) > 0:
                found[k].append(TRANSACTION)
    return {k: tuple(sorted(set(v))) for k, v in found.items()}


def nx_frontier(nodes: Mapping[str, TaskNode], world: World) -> Frontier:
    graph = nx_graph(nodes)
    return nx_frontier_on(graph, nodes, world)


def nx_frontier_on(
    graph: "nx.DiGraph[str]", nodes: Mapping[str, TaskNode], world: World
) -> Frontier:
    evaluated = nx_evaluate(graph, nodes, world, nodes)
    return Frontier(
        policy=world.policy,
        ready=tuple(sorted(k for k, v in evaluated.items() if not v)),
        deferred={k: evaluated[k] for k in sorted(evaluated) if evaluated[k]},
    )


def nx_incremental(
    graph: "nx.DiGraph[str]", nodes: Mapping[str, TaskNode], world: World, touched: set[str]
) -> dict[str, tuple[str, ...]]:
    reach = set(touched)
    for key in touched:
        reach |= nx.descendants(graph, key)
    return nx_evaluate(graph, nodes, world, reach)


def reach_of(nodes: Mapping[str, TaskNode], touched: set[str], index: GraphIndex) -> set[str]:
    """What recompute evaluates: the touched tasks closed over dependants and transactions."""
    seen, stack = set(touched), list(touched)
    while stack:
        key = stack.pop()
        transaction = nodes[key].transaction
        near = [*index.dependants[key], *(index.groups[transaction] if transaction else ())]
        for other in near:
            if other not in seen:
                seen.add(other)
                stack.append(other)
    return seen


def best(function: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times = []
    result = None
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return min(times), result


def stored(result: Frontier) -> dict[str, tuple[str, ...]]:
    return {**dict.fromkeys(result.ready, ()), **result.deferred}


def case(name: str, nodes: dict[str, TaskNode], repeat: int, *, goals: bool) -> None:
    up = World()
    down = World(down=frozenset({FORGE}))
    index = build_index(nodes)
    previous = stored(frontier(nodes, up))

    ours_full, full = best(lambda: frontier(nodes, down), repeat)
    nx_full, nx_result = best(lambda: nx_frontier(nodes, down), repeat)
    graph = nx_graph(nodes)
    nx_full_cached, _ = best(lambda: nx_frontier_on(graph, nodes, down), repeat)
    index_time, _ = best(lambda: build_index(nodes), repeat)

    def ours_incremental() -> dict[str, tuple[str, ...]]:
        touched = touched_by_capability(nodes, FORGE, down, index=index)
        # As the scheduler passes it for a capability's change: no claim changed, none spreads.
        return recompute(nodes, down, previous=previous, changed=touched, index=index, spread=())

    def theirs_incremental() -> dict[str, tuple[str, ...]]:
        touched = {k for k, n in nodes.items() if FORGE in n.capabilities}
        return nx_incremental(graph, nodes, down, touched)

    ours_inc, updates = best(ours_incremental, repeat)
    nx_inc, _ = best(theirs_incremental, repeat)

    assert nx_result == full, "networkx and the frontier disagree"
    pending = {k for k, n in nodes.items() if n.state == "pending"}
    applied = {k: v for k, v in {**previous, **updates}.items() if k in pending}
    assert applied == stored(full), "recompute disagrees with the frontier from scratch"
    touched = touched_by_capability(nodes, FORGE, down, index=index)
    reach = len(reach_of(nodes, touched, index))

    print(f"\n{name}: {len(nodes):,} tasks, {len(pending):,} pending, ready {len(full.ready):,}")
    print(f"  forge needed by {len(touched):,} tasks, {reach:,} below them;", end=" ")
    print(f"blockers changed for {len(updates):,}")
    print(f"  full frontier, ours                 {ours_full * 1000:9.1f} ms")
    print(f"  full, networkx (graph built)        {nx_full * 1000:9.1f} ms")
    print(f"  full, networkx (graph cached)       {nx_full_cached * 1000:9.1f} ms")
    print(f"  incremental, ours (index cached)    {ours_inc * 1000:9.1f} ms")
    print(f"  incremental, networkx (cached)      {nx_inc * 1000:9.1f} ms")
    print(f"  index build (once per graph)        {index_time * 1000:9.1f} ms")
    full_goal, incremental_goal = (
        ("(goal <= 1)", "(goal >= 20x)") if goals else ("", "(goal >= 10x)")
    )
    print(f"  ratio full ours/networkx (built)    {ours_full / nx_full:9.2f}  {full_goal}")
    print(f"  ratio full ours/networkx (cached)   {ours_full / nx_full_cached:9.2f}")
    print(f"  speedup full/incremental, ours      {ours_full / ours_inc:9.1f}x {incremental_goal}")
    # networkx re-filters the reach only: it misses blockedness inherited from outside it, and
    # its result is not checked, so this last figure flatters it.
    print(f"  speedup incremental nx/ours         {nx_inc / ours_inc:9.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args, _ = parser.parse_known_args()  # `make bench` hands every bench the same arguments
    print(f"Python {sys.version.split()[0]}, networkx {nx.__version__}, best of {args.repeat}")
    for name, scattered, at_the_end in (
        ("forge at the end of each lane, transactions mid-run", False, False),
        ("forge scattered over the last 20 layers, transactions mid-run", True, False),
        ("forge at the end of each lane, 10 of them in transactions", False, True),
    ):
        nodes = make_run(args.tasks, scattered=scattered, groups_at_the_end=at_the_end)
        case(name, nodes, args.repeat, goals=not scattered and not at_the_end)


if __name__ == "__main__":
    main()
