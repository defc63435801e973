"""Checks a declared task graph: unique keys, known prerequisites, no cycle. Pure."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GraphError:
    loc: str
    msg: str


def check_graph(
    new: Sequence[tuple[str, Sequence[str] | None]],
    *,
    existing: Mapping[str, Sequence[str]] | None = None,
    loc: str = "data.tasks",
    positions: Sequence[int] | None = None,
) -> list[GraphError]:
    """Errors in `new` tasks (key, prerequisites) added to an `existing` graph, every one named.

    A cycle among the valid edges is named alongside duplicate keys and unknown prerequisites.
    `positions` gives each task's index in the request when some tasks are left out (they did
    not parse); prerequisites of None mean unreadable: the key counts, its edges are not checked.
    """
    existing = existing or {}
    at = list(positions) if positions is not None else list(range(len(new)))
    errors: list[GraphError] = []
    seen: dict[str, int] = {}
    for i, (key, _) in enumerate(new):
        if key in existing:
            errors.append(
                GraphError(f"{loc}.{at[i]}.key", f"task {key!r} already exists in the run")
            )
        elif key in seen:
            errors.append(
                GraphError(
                    f"{loc}.{at[i]}.key",
                    f"duplicate task key {key!r} (also at {loc}.{at[seen[key]]})",
                )
            )
        else:
            seen[key] = i
    known = set(existing) | set(seen)
    edges: dict[str, tuple[str, ...]] = {}
    for i, (key, prerequisites) in enumerate(new):
        for j, prerequisite in enumerate(prerequisites or ()):
            if prerequisite not in known:
                errors.append(
                    GraphError(
                        f"{loc}.{at[i]}.prerequisites.{j}", f"unknown prerequisite {prerequisite!r}"
                    )
                )
            elif prerequisite == key:
                errors.append(
                    GraphError(f"{loc}.{at[i]}.prerequisites.{j}", f"task {key!r} requires itself")
                )
        if seen.get(key) == i:
            edges[key] = tuple(p for p in prerequisites or () if p in known and p != key)
    cycle = find_cycle(edges)
    if cycle:
        path = " -> ".join([*cycle, cycle[0]])
        errors.append(GraphError(f"{loc}.{at[seen[cycle[0]]]}.prerequisites", f"cycle: {path}"))
    return errors


def find_cycle(edges: Mapping[str, Sequence[str]]) -> list[str]:
    """One cycle among the tasks, as keys in order, or [] (iterative: deep chains are fine).

    Edges to tasks outside `edges` are ignored: tasks already stored cannot depend on new ones.
    """
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(edges, white)
    for root in sorted(edges):
        if colour[root] != white:
            continue
        path: list[str] = []
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            node, index = stack.pop()
            if index == 0:
                colour[node] = grey
                path.append(node)
            children = [c for c in edges[node] if c in edges]
            if index < len(children):
                stack.append((node, index + 1))
                child = children[index]
                if colour[child] == grey:
                    return path[path.index(child) :]
                if colour[child] == white:
                    stack.append((child, 0))
            else:
                colour[node] = black
                path.pop()
    return []
