"""The frontier rule: typed blockers, containment of a down capability, global halt, recompute."""

import random
from collections.abc import Mapping
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runs.frontier import (
    STOPPED,
    UNFINISHED,
    ClaimView,
    Frontier,
    TaskNode,
    World,
    build_index,
    dependants,
    frontier,
    recompute,
    touched_by_capability,
    touched_by_claim,
)

Nodes = dict[str, TaskNode]


def run(*tasks: TaskNode) -> Nodes:
    return {task.key: task for task in tasks}


def stored(result: Frontier) -> dict[str, tuple[str, ...]]:
    """What the scheduler keeps: the blockers of every pending task, () when it is ready."""
    return {**dict.fromkeys(result.ready, ()), **result.deferred}


def blockers(nodes: Nodes, world: World, key: str) -> tuple[str, ...]:
    return frontier(nodes, world).deferred.get(key, ())


# A small software-factory run: local work beside the work that needs the forge.
FACTORY = run(
    TaskNode("lint", state="succeeded"),
    TaskNode("tests", prerequisites=("lint",)),
    TaskNode("docs", prerequisites=("lint",)),
    TaskNode("push", prerequisites=("tests",), capabilities=("forge",)),
    TaskNode("open-pr", prerequisites=("push",), capabilities=("forge",), effect="external"),
    TaskNode("changelog", prerequisites=("docs",)),
)


def test_it_defers_only_the_tasks_that_need_the_forge() -> None:
    nodes = {
        **FACTORY,
        "tests": TaskNode("tests", state="succeeded", prerequisites=("lint",)),
        "docs": TaskNode("docs", state="succeeded", prerequisites=("lint",)),
    }
    result = frontier(nodes, World(down=frozenset({"forge"})))
    assert result.ready == ("changelog",)
    assert result.deferred == {
        "push": ("capability:forge",),
        "open-pr": ("capability:forge", "prerequisite:push"),
    }
    assert result.policy == "scoped"


def test_it_readies_every_task_whose_prerequisites_succeeded() -> None:
    result = frontier(FACTORY, World())
    assert result.ready == ("docs", "tests")
    assert result.deferred == {
        "push": ("prerequisite:tests",),
        "open-pr": ("prerequisite:push",),
        "changelog": ("prerequisite:docs",),
    }


@pytest.mark.parametrize(
    ("task", "world", "expected"),
    [
        pytest.param(
            TaskNode("t", prerequisites=("up",)), World(), ("prerequisite:up",), id="prerequisite"
        ),
        pytest.param(
            TaskNode("t", capabilities=("forge", "registry")),
            World(down=frozenset({"registry", "forge"})),
            ("capability:forge", "capability:registry"),
            id="capability",
        ),
        pytest.param(
            TaskNode("t", reads_state_of=("crm", "telemetry")),
            World(down=frozenset({"crm", "telemetry"})),
            ("barrier:freshness",),
            id="freshness",
        ),
        pytest.param(
            TaskNode("t", effect="external"),
            World(down=frozenset({"change-control"}), roles={"authority": "change-control"}),
            ("barrier:authority",),
            id="authority",
        ),
        pytest.param(
            TaskNode("t", effect="external"),
            World(down=frozenset({"telemetry"}), roles={"observability": "telemetry"}),
            ("barrier:observability",),
            id="observability",
        ),
        pytest.param(
            TaskNode("t", effect="external"),
            World(down=frozenset({"snapshots"}), roles={"rollback": "snapshots"}),
            ("barrier:rollback",),
            id="rollback",
        ),
        pytest.param(
            TaskNode("t", effect="external", dependency_confidence="uncertain"),
            World(),
            ("barrier:uncertain-dependency",),
            id="uncertain-dependency",
        ),
        pytest.param(
            TaskNode("t", consumes=("schema", "draft", "gone")),
            World(
                claims={
                    "schema": ClaimView("unverified", load_bearing=True),
                    "draft": ClaimView("unverified", load_bearing=False),
                }
            ),
            ("claim:gone", "claim:schema"),
            id="claim",
        ),
        pytest.param(
            TaskNode("t", consumes=("note",)),
            World(claims={"note": ClaimView("refuted", load_bearing=False)}),
            ("claim:note",),
            id="refuted-claim",
        ),
        pytest.param(
            TaskNode("t"), World(escalations={"t": ("e2", "e1")}), ("escalation:e1", "escalation:e2"),
            id="escalation",
        ),
    ],
)  # fmt: skip
def test_it_names_every_kind_of_blocker(
    task: TaskNode, world: World, expected: tuple[str, ...]
) -> None:
    nodes = run(task, TaskNode("up", state="running"))
    assert blockers(nodes, world, "t") == expected


def test_it_lets_external_work_go_when_the_roles_are_up() -> None:
    nodes = run(TaskNode("deploy", effect="external", capabilities=("deployer",)))
    world = World(down=frozenset({"crm"}), roles={"authority": "change-control"})
    assert frontier(nodes, world).ready == ("deploy",)


def test_a_role_outage_does_not_stop_work_without_external_effect() -> None:
    nodes = run(TaskNode("draft", effect="reversible"), TaskNode("send", effect="external"))
    world = World(down=frozenset({"telemetry"}), roles={"observability": "telemetry"})
    result = frontier(nodes, world)
    assert result.ready == ("draft",)
    assert result.deferred == {"send": ("barrier:observability",)}


def test_a_reviewer_release_lifts_the_uncertain_dependency_stop() -> None:
    nodes = run(TaskNode("t", effect="external", dependency_confidence="uncertain", released=True))
    assert frontier(nodes, World()).ready == ("t",)


def test_verified_claims_let_the_consumer_start() -> None:
    nodes = run(TaskNode("t", consumes=("schema",)))
    world = World(claims={"schema": ClaimView("verified", load_bearing=True)})
    assert frontier(nodes, world).ready == ("t",)


def test_it_bars_a_transaction_when_one_member_is_blocked() -> None:
    nodes = run(
        TaskNode("migrate", transaction="release", capabilities=("db",)),
        TaskNode("deploy", transaction="release"),
        TaskNode("notes"),
    )
    result = frontier(nodes, World(down=frozenset({"db"})))
    assert result.ready == ("notes",)
    # The blocked member is not barred by the members it holds up itself.
    assert result.deferred == {"migrate": ("capability:db",), "deploy": ("barrier:transaction",)}
    assert frontier(nodes, World()).ready == ("deploy", "migrate", "notes")


def test_a_member_waiting_for_a_running_prerequisite_does_not_bar_the_transaction() -> None:
    nodes = run(
        TaskNode("build", state="running"),
        TaskNode("migrate", transaction="release", prerequisites=("build",)),
        TaskNode("deploy", transaction="release"),
    )
    result = frontier(nodes, World())
    assert result.ready == ("deploy",)
    assert result.deferred == {"migrate": ("prerequisite:build",)}


def test_a_member_downstream_of_a_blocked_task_bars_the_transaction() -> None:
    nodes = run(
        TaskNode("fetch", capabilities=("web",)),
        TaskNode("summarise", prerequisites=("fetch",), transaction="report"),
        TaskNode("publish", transaction="report"),
    )
    result = frontier(nodes, World(down=frozenset({"web"})))
    assert result.ready == ()
    assert result.deferred["publish"] == ("barrier:transaction",)


@pytest.mark.parametrize("state", sorted(STOPPED))
def test_a_stopped_prerequisite_blocks_the_transaction(state: str) -> None:
    nodes = run(
        TaskNode("probe", state=state),
        TaskNode("rollout", prerequisites=("probe",), transaction="change"),
        TaskNode("announce", transaction="change"),
    )
    assert frontier(nodes, World()).deferred["announce"] == ("barrier:transaction",)


def test_a_transaction_barrier_carries_across_groups() -> None:
    # "pin" is barred by its group; "bump" waits on it, so "bump"'s own group must wait too.
    nodes = run(
        TaskNode("lock", transaction="deps", capabilities=("registry",)),
        TaskNode("pin", transaction="deps"),
        TaskNode("bump", prerequisites=("pin",), transaction="release"),
        TaskNode("tag", transaction="release"),
    )
    result = frontier(nodes, World(down=frozenset({"registry"})))
    assert result.ready == ()
    assert result.deferred["tag"] == ("barrier:transaction",)
    assert frontier(nodes, World()).ready == ("lock", "pin", "tag")


def test_global_halt_stops_every_pending_task_while_a_needed_capability_is_down() -> None:
    world = World(down=frozenset({"forge", "crm"}), policy="global_halt")
    result = frontier(FACTORY, world)
    assert result.policy == "global_halt"
    assert result.ready == ()
    assert result.deferred["docs"] == ("halt:forge",)
    assert result.deferred["push"] == ("capability:forge", "halt:forge", "prerequisite:tests")


def test_global_halt_goes_on_when_no_unfinished_task_needs_the_capability() -> None:
    nodes = {
        **FACTORY,
        "push": TaskNode("push", state="succeeded", capabilities=("forge",)),
        "open-pr": TaskNode("open-pr", state="cancelled", capabilities=("forge",)),
    }
    result = frontier(nodes, World(down=frozenset({"forge"}), policy="global_halt"))
    assert result.ready == ("docs", "tests")


def test_it_refuses_an_unknown_policy() -> None:
    with pytest.raises(ValueError, match="naive"):
        World(policy="naive")


def test_dependants_are_the_reverse_edges() -> None:
    assert dependants(FACTORY) == {
        "lint": ("docs", "tests"),
        "tests": ("push",),
        "docs": ("changelog",),
        "push": ("open-pr",),
        "open-pr": (),
        "changelog": (),
    }


def test_touched_by_capability_names_the_tasks_whose_conditions_mention_it() -> None:
    nodes = run(
        TaskNode("a", capabilities=("telemetry",)),
        TaskNode("b", reads_state_of=("telemetry",)),
        TaskNode("c", effect="external"),
        TaskNode("d", prerequisites=("a",)),
    )
    world = World(roles={"observability": "telemetry"})
    assert touched_by_capability(nodes, "telemetry", world) == {"a", "b", "c"}
    assert touched_by_capability(nodes, "telemetry", World()) == {"a", "b"}
    index = build_index(nodes)
    assert touched_by_capability(nodes, "telemetry", world, index=index) == {"a", "b", "c"}
    halted = World(policy="global_halt")
    assert touched_by_capability(nodes, "crm", halted) == {"a", "b", "c", "d"}


def test_it_handles_a_chain_ten_thousand_deep() -> None:
    depth = 10_000
    nodes = {
        f"t{i}": TaskNode(f"t{i}", prerequisites=(f"t{i - 1}",) if i else ()) for i in range(depth)
    }
    nodes["t0"] = TaskNode("t0", state="running")
    nodes["last"] = TaskNode("last", prerequisites=(f"t{depth - 1}",), transaction="tx")
    nodes["peer"] = TaskNode("peer", transaction="tx")
    result = frontier(nodes, World())
    assert result.ready == ("peer",)
    assert len(result.deferred) == depth
    # The stop at the root reaches the bottom of the chain, through it, without recursion.
    nodes["t0"] = TaskNode("t0", state="failed")
    updates = recompute(nodes, World(), previous=stored(result), changed=["t0"])
    assert updates == {"peer": ("barrier:transaction",)}


def test_recompute_after_a_capability_returns_only_what_changed() -> None:
    nodes = {
        **FACTORY,
        "tests": TaskNode("tests", state="succeeded", prerequisites=("lint",)),
    }
    down = World(down=frozenset({"forge"}))
    previous = stored(frontier(nodes, down))
    up = World()
    changed = touched_by_capability(nodes, "forge", up)
    assert recompute(nodes, up, previous=previous, changed=changed) == {
        "push": (),
        "open-pr": ("prerequisite:push",),
    }


def test_recompute_evaluates_only_what_the_change_can_reach() -> None:
    class Counting(dict[str, TaskNode]):
        reads: set[str] = set()

        def __getitem__(self, key: str) -> TaskNode:
            self.reads.add(key)
            return super().__getitem__(key)

        def get(self, key: str, default: object = None) -> TaskNode | None:  # type: ignore[override]
            self.reads.add(key)
            return super().get(key)

    nodes = Counting({f"s{i}": TaskNode(f"s{i}") for i in range(1_000)})
    nodes.update(
        {
            "push": TaskNode("push", capabilities=("forge",)),
            "pr": TaskNode("pr", prerequisites=("push",)),
        }
    )
    index = build_index(nodes)
    previous = stored(frontier(nodes, World()))
    nodes.reads = set()
    world = World(down=frozenset({"forge"}))
    changed = touched_by_capability(nodes, "forge", world, index=index)
    updates = recompute(nodes, world, previous=previous, changed=changed, index=index)
    assert updates == {"push": ("capability:forge",)}
    assert nodes.reads <= {"push", "pr"}


def test_recompute_returns_new_pending_tasks_and_drops_finished_ones() -> None:
    nodes = run(TaskNode("a"), TaskNode("b", prerequisites=("a",)))
    previous = stored(frontier(nodes, World()))
    nodes["a"] = TaskNode("a", state="succeeded")
    nodes["c"] = TaskNode("c", prerequisites=("b",))
    assert recompute(nodes, World(), previous=previous, changed=["a", "c"]) == {
        "b": (),
        "c": ("prerequisite:b",),
    }


def test_recompute_reevaluates_everything_when_a_global_halt_starts_or_ends() -> None:
    nodes = run(TaskNode("a", capabilities=("forge",)), TaskNode("b"))
    halted = World(down=frozenset({"forge"}), policy="global_halt")
    previous = stored(frontier(nodes, halted))
    assert previous == {"a": ("capability:forge", "halt:forge"), "b": ("halt:forge",)}
    nodes["a"] = TaskNode("a", state="cancelled", capabilities=("forge",))
    assert recompute(nodes, halted, previous=previous, changed=["a"]) == {"b": ()}


def test_it_handles_a_hundred_thousand_tasks() -> None:
    rng = random.Random(7)
    nodes: Nodes = {}
    for i in range(100_000):
        layer = i // 1_000
        prerequisites = tuple(
            {f"t{(layer - 1) * 1_000 + rng.randrange(1_000)}" for _ in range(3)} if layer else ()
        )
        nodes[f"t{i}"] = TaskNode(
            f"t{i}",
            state="succeeded" if layer < 10 else "pending",
            prerequisites=prerequisites,
            capabilities=(f"c{rng.randrange(20)}",),
            transaction=f"g{i % 500}" if i % 97 == 0 else None,
        )
    result = frontier(nodes, World(down=frozenset({"c3"})))
    assert len(result.ready) + len(result.deferred) == 90_000
    assert result.ready


# Uncertainty fails closed: unknown capabilities, unnamed roles.


def test_an_external_effect_waits_on_a_capability_nobody_reported_on() -> None:
    nodes = run(
        TaskNode("publish", capabilities=("forge",), effect="external"),
        TaskNode("fetch", capabilities=("forge",)),
        TaskNode("branch", capabilities=("forge",), effect="reversible"),
        TaskNode("report", reads_state_of=("forge",)),
    )
    result = frontier(nodes, World(unknown=frozenset({"forge"})))
    assert result.deferred == {"publish": ("capability:forge",)}
    assert result.ready == ("branch", "fetch", "report")
    # Once someone reports it up, the effect goes ahead; down, everything needing it waits.
    assert frontier(nodes, World()).ready == ("branch", "fetch", "publish", "report")
    assert "fetch" in frontier(nodes, World(down=frozenset({"forge"}))).deferred


def test_an_unknown_role_capability_holds_external_effects_like_a_down_one() -> None:
    nodes = run(TaskNode("deploy", effect="external"), TaskNode("build"))
    world = World(roles={"authority": "iam"}, unknown=frozenset({"iam"}))
    assert frontier(nodes, world).deferred == {"deploy": ("barrier:authority",)}


def test_with_the_fleets_setting_unnamed_roles_stop_external_effects_until_released() -> None:
    nodes = run(
        TaskNode("deploy", effect="external"),
        TaskNode("released", effect="external", released=True),
        TaskNode("build", effect="reversible"),
    )
    partly = {"authority": "iam", "observability": "metrics"}  # no rollback named
    world = World(roles=partly, stop_unnamed_roles=True)
    assert world.unnamed_roles == ("rollback",)
    assert frontier(nodes, world).deferred == {"deploy": ("barrier:uncertain-dependency",)}
    # Setting off, or every role named: nothing is uncertain about the effect's conditions.
    assert frontier(nodes, replace(world, stop_unnamed_roles=False)).deferred == {}
    named = {**partly, "rollback": "snapshots"}
    assert frontier(nodes, replace(world, roles=named)).deferred == {}


def test_naming_a_role_re_evaluates_the_external_effects_it_stopped() -> None:
    nodes = run(TaskNode("deploy", effect="external"), TaskNode("build"))
    before = World(roles={"authority": "iam", "observability": "metrics"}, stop_unnamed_roles=True)
    after = replace(before, roles={**before.roles, "rollback": "snapshots"})
    changed = touched_by_capability(nodes, "snapshots", after)
    updates = recompute(nodes, after, previous=stored(frontier(nodes, before)), changed=changed)
    assert updates == {"deploy": ()}


# Properties on random runs.

CAPABILITIES = ("forge", "registry", "crm", "telemetry")
CLAIMS = ("c1", "c2", "c3")


@st.composite
def runs(draw: st.DrawFn) -> Nodes:
    count = draw(st.integers(1, 12))
    nodes: Nodes = {}
    for i in range(count):
        earlier = [f"t{j}" for j in range(i)]
        nodes[f"t{i}"] = TaskNode(
            key=f"t{i}",
            state=draw(
                st.sampled_from(("pending",) * 4 + ("running", "succeeded") * 2 + tuple(STOPPED))
            ),
            prerequisites=tuple(draw(st.lists(st.sampled_from(earlier), max_size=3, unique=True)))
            if earlier
            else (),
            capabilities=tuple(
                draw(st.lists(st.sampled_from(CAPABILITIES), max_size=2, unique=True))
            ),
            reads_state_of=tuple(draw(st.lists(st.sampled_from(CAPABILITIES), max_size=1))),
            effect=draw(st.sampled_from(("none", "reversible", "external"))),
            dependency_confidence=draw(st.sampled_from(("declared", "declared", "uncertain"))),
            transaction=draw(st.sampled_from((None, None, "x", "y"))),
            consumes=tuple(draw(st.lists(st.sampled_from(CLAIMS), max_size=2, unique=True))),
            released=draw(st.booleans()),
            implicit=draw(st.booleans()),
            checks=tuple(draw(st.lists(st.sampled_from(CLAIMS), max_size=1))),
            halted_on=tuple(draw(st.lists(st.sampled_from(CLAIMS), max_size=1))),
        )
    return nodes


@st.composite
def worlds(draw: st.DrawFn, policy: str | None = None) -> World:
    roles = draw(
        st.dictionaries(
            st.sampled_from(("authority", "observability", "rollback")),
            st.sampled_from(CAPABILITIES),
        )
    )
    claims = draw(
        st.dictionaries(
            st.sampled_from(CLAIMS),
            st.builds(
                ClaimView,
                st.sampled_from(("unverified", "verified", "refuted")),
                st.booleans(),
                st.sampled_from((None, *(f"t{i}" for i in range(12)))),
            ),
        )
    )
    escalations = draw(
        st.dictionaries(st.sampled_from([f"t{i}" for i in range(12)]), st.just(("e1",)), max_size=2)
    )
    down = frozenset(draw(st.sets(st.sampled_from(CAPABILITIES), max_size=2)))
    unknown = frozenset(
        draw(st.sets(st.sampled_from([c for c in CAPABILITIES if c not in down]), max_size=2))
    )
    return World(
        down=down,
        unknown=unknown,
        roles=roles,
        claims=claims,
        escalations=escalations,
        policy=policy or draw(st.sampled_from(("scoped", "global_halt"))),
        stop_unnamed_roles=draw(st.booleans()),
    )


def local_blockers(nodes: Mapping[str, TaskNode], world: World, key: str) -> set[str]:
    """DESIGN section 5, rules 1-4 and 6-7, written out plainly for one task."""
    node = nodes[key]
    found = {f"prerequisite:{p}" for p in node.prerequisites if nodes[p].state != "succeeded"}
    found |= {f"capability:{c}" for c in node.capabilities if c in world.down}
    if any(c in world.down for c in node.reads_state_of):
        found.add("barrier:freshness")
    if node.effect == "external":
        found |= {f"capability:{c}" for c in node.capabilities if c in world.unknown}
        not_up = world.down | world.unknown
        found |= {f"barrier:{role}" for role, c in world.roles.items() if c in not_up}
        unnamed = {"authority", "observability", "rollback"} - set(world.roles)
        uncertain = node.dependency_confidence == "uncertain" or (
            world.stop_unnamed_roles and bool(unnamed)
        )
        if uncertain and not node.released:
            found.add("barrier:uncertain-dependency")
    above: set[str] = set()  # every task it depends on, directly or through others
    grow = list(node.prerequisites)
    while grow:
        up = grow.pop()
        if up in nodes and up not in above:
            above.add(up)
            grow.extend(nodes[up].prerequisites)
    named = set(node.consumes)
    if node.implicit:
        named |= {c for c, view in world.claims.items() if view.producer in above}
    for claim in named:
        view = world.claims.get(claim)
        if (
            view is None
            or view.status == "refuted"
            or (view.load_bearing and view.status != "verified")
        ) and claim not in node.checks:
            found.add(f"claim:{claim}")
    for holder in (key, *node.prerequisites):
        for claim in nodes[holder].halted_on:
            view = world.claims.get(claim)
            # Its own halt spares a claim it checks; a halted prerequisite's output never.
            spared = holder == key and claim in node.checks
            if (view is None or view.status != "verified") and not spared:
                found.add(f"claim:{claim}")
    found |= {f"escalation:{e}" for e in world.escalations.get(key, ())}
    return found


def blocked_tasks(nodes: Mapping[str, TaskNode], world: World) -> set[str]:
    """The pending tasks that are blocked (not merely waiting), by naive iteration to a fixed point."""
    pending = [k for k, n in nodes.items() if n.state == "pending"]
    halted = world.policy == "global_halt" and any(
        c in world.down
        for n in nodes.values()
        if n.state in UNFINISHED
        for c in (*n.capabilities, *n.reads_state_of)
    )
    blocked = {
        k
        for k in pending
        if halted
        or any(not b.startswith("prerequisite:") for b in local_blockers(nodes, world, k))
        or any(nodes[p].state in STOPPED for p in nodes[k].prerequisites)
    }
    while True:
        more = {
            k
            for k in pending
            if any(p in blocked for p in nodes[k].prerequisites)
            or any(
                m in blocked
                and m != k
                and nodes[k].transaction is not None
                and nodes[m].transaction == nodes[k].transaction
                for m in pending
            )
        }
        if more <= blocked:
            return blocked
        blocked |= more


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), worlds())
def test_nothing_in_the_ready_frontier_has_a_false_condition(nodes: Nodes, world: World) -> None:
    result = frontier(nodes, world)
    blocked = blocked_tasks(nodes, world)
    pending = {k for k, n in nodes.items() if n.state == "pending"}
    assert set(result.ready) | set(result.deferred) == pending
    assert not set(result.ready) & set(result.deferred)
    for key in result.ready:
        assert not local_blockers(nodes, world, key)
        group = nodes[key].transaction
        assert not any(m != key and nodes[m].transaction == group for m in blocked if group)
    for key, found in result.deferred.items():
        assert found and list(found) == sorted(set(found))
        halts = {b for b in found if b.startswith("halt:")}
        assert set(found) - halts - {"barrier:transaction"} == local_blockers(nodes, world, key)
        if "barrier:transaction" in found:
            group = nodes[key].transaction
            assert any(m != key and nodes[m].transaction == group for m in blocked)


@settings(max_examples=150)
@given(runs(), worlds(policy="scoped"), st.sampled_from(CAPABILITIES))
def test_a_task_outside_every_cut_of_a_down_capability_is_unaffected(
    nodes: Nodes, world: World, capability: str
) -> None:
    up = replace(world, down=world.down - {capability})
    down = replace(world, down=world.down | {capability})
    # The cut: what mentions the capability, closed over dependants and transaction groups.
    cut = touched_by_capability(nodes, capability, down)
    reverse = dependants(nodes)
    grow = list(cut)
    while grow:
        key = grow.pop()
        near = [*reverse[key]]
        near += [
            m for m, n in nodes.items() if n.transaction and n.transaction == nodes[key].transaction
        ]
        for other in near:
            if other not in cut:
                cut.add(other)
                grow.append(other)
    with_it, without_it = stored(frontier(nodes, down)), stored(frontier(nodes, up))
    for key in set(with_it) - cut:
        assert with_it[key] == without_it[key]


@settings(max_examples=100)
@given(runs(), worlds(policy="global_halt"))
def test_global_halt_readies_nothing_while_a_needed_capability_is_down(
    nodes: Nodes, world: World
) -> None:
    needed = {
        c
        for n in nodes.values()
        if n.state in UNFINISHED
        for c in (*n.capabilities, *n.reads_state_of)
    }
    result = frontier(nodes, world)
    if needed & world.down:
        assert result.ready == ()
        for found in result.deferred.values():
            assert {b for b in found if b.startswith("halt:")} == {
                f"halt:{c}" for c in needed & world.down
            }
    else:
        scoped = frontier(nodes, replace(world, policy="scoped"))
        assert (result.ready, result.deferred) == (scoped.ready, scoped.deferred)


@settings(max_examples=100)
@given(runs(), worlds(), st.randoms(use_true_random=False))
def test_the_result_does_not_depend_on_the_order_of_the_mappings(
    nodes: Nodes, world: World, rng: random.Random
) -> None:
    keys = list(nodes)
    rng.shuffle(keys)
    shuffled = {k: nodes[k] for k in keys}
    claims = list(world.claims.items())
    rng.shuffle(claims)
    again = replace(world, claims=dict(claims))
    assert frontier(shuffled, again) == frontier(nodes, world)


@st.composite
def layered_runs(draw: st.DrawFn) -> Nodes:
    """Wider runs in layers, cut part way through (done above, then a mixed layer, then
    pending), with transaction groups spanning layers: what the indexed reach must get right."""
    width, depth = draw(st.integers(2, 6)), draw(st.integers(2, 7))
    done = draw(st.integers(0, depth - 1))
    nodes: Nodes = {}
    for layer in range(depth):
        for lane in range(width):
            key = f"t{layer}-{lane}"
            above = [f"t{layer - 1}-{p}" for p in range(width)] if layer else []
            state = (
                "succeeded"
                if layer < done
                else draw(st.sampled_from(("pending", "running", "succeeded", "failed")))
                if layer == done
                else "pending"
            )
            nodes[key] = TaskNode(
                key=key,
                state=state,
                prerequisites=tuple(
                    draw(st.lists(st.sampled_from(above), max_size=3, unique=True)) if above else []
                ),
                capabilities=tuple(draw(st.lists(st.sampled_from(CAPABILITIES), max_size=1))),
                effect=draw(st.sampled_from(("none", "none", "external"))),
                transaction=draw(
                    st.sampled_from((None, None, None, f"x{lane % 2}", f"y{layer // 2}"))
                ),
                implicit=draw(st.booleans()),
            )
    return nodes


@st.composite
def changes(
    draw: st.DrawFn, graphs: st.SearchStrategy[Nodes] | None = None
) -> tuple[Nodes, World, Nodes, World, set[str], set[str]]:
    """A run, then one change to it: a task finished, a capability changed, a claim checked, an
    escalation answered; with the `changed` and `spread` a caller would pass (only a claim's
    change spreads to every descendant of its producer)."""
    nodes = draw(graphs if graphs is not None else runs())
    world = draw(worlds())
    kind = draw(
        st.sampled_from(("finished", "started", "capability", "claim", "escalation", "halt"))
    )
    new_nodes, new_world = dict(nodes), world
    changed: set[str] = set()
    if kind in ("finished", "started"):
        key = draw(st.sampled_from(sorted(nodes)))
        state = draw(
            st.sampled_from(("succeeded", "failed")) if kind == "finished" else st.just("running")
        )
        new_nodes[key] = replace(nodes[key], state=state)
        changed = {key}
    elif kind == "capability":
        name = draw(st.sampled_from(CAPABILITIES))
        # Reported for the first time (unknown: up or down), or down and back.
        reported_down = name not in world.down and draw(st.booleans())
        down = world.down | {name} if reported_down else world.down - {name}
        new_world = replace(world, down=down, unknown=world.unknown - {name})
        changed = touched_by_capability(new_nodes, name, new_world)
    elif kind == "claim":
        claim = draw(st.sampled_from(CLAIMS))
        view = ClaimView(draw(st.sampled_from(("verified", "refuted"))), draw(st.booleans()))
        producer = world.claims[claim].producer if claim in world.claims else None
        view = replace(view, producer=draw(st.sampled_from((producer, *sorted(nodes)))))
        new_world = replace(world, claims={**world.claims, claim: view})
        # A claim posted (or superseded) changes what its producer's dependants consume.
        changed = touched_by_claim(nodes, world, claim) | touched_by_claim(
            new_nodes, new_world, claim
        )
    elif kind == "halt":
        key = draw(st.sampled_from(sorted(nodes)))
        new_nodes[key] = replace(nodes[key], halted_on=(draw(st.sampled_from(CLAIMS)),))
        changed = {key}
    else:
        if not world.escalations:
            key = draw(st.sampled_from(sorted(nodes)))
            world = replace(world, escalations={key: ("e9",)})
        key = draw(st.sampled_from(sorted(world.escalations)))
        rest = {k: v for k, v in world.escalations.items() if k != key}
        new_world = replace(world, escalations=rest)
        changed = {key}
    return nodes, world, new_nodes, new_world, changed, changed if kind == "claim" else set()


Change = tuple[Nodes, World, Nodes, World, set[str], set[str]]


def agrees(change: Change, cached: bool, spread: bool) -> None:
    nodes, world, new_nodes, new_world, changed, spreading = change
    previous = stored(frontier(nodes, world))
    index = build_index(new_nodes) if cached else None
    updates = recompute(
        new_nodes,
        new_world,
        previous=previous,
        changed=changed,
        index=index,
        spread=spreading if spread else None,
    )
    pending = {k for k, n in new_nodes.items() if n.state == "pending"}
    applied = {k: v for k, v in {**previous, **updates}.items() if k in pending}
    assert applied == stored(frontier(new_nodes, new_world))
    assert all(previous.get(k) != v for k, v in updates.items())


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(changes(), st.booleans(), st.booleans())
def test_recompute_after_one_change_agrees_with_the_frontier_from_scratch(
    change: Change, cached: bool, spread: bool
) -> None:
    agrees(change, cached, spread)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(changes(layered_runs()), st.booleans())
def test_recompute_on_layered_runs_with_groups_and_cuts_agrees_with_the_frontier(
    change: Change, spread: bool
) -> None:
    agrees(change, True, spread)


def test_a_claim_checked_reaches_every_implicit_consumer_below_its_producer() -> None:
    nodes = run(
        TaskNode("plan", state="succeeded"),
        TaskNode("code", state="succeeded", prerequisites=("plan",)),
        TaskNode("ship", prerequisites=("code",), implicit=True),
    )
    refuted = World(claims={"k": ClaimView("refuted", True, producer="plan")})
    verified = World(claims={"k": ClaimView("verified", True, producer="plan")})
    previous = stored(frontier(nodes, refuted))
    assert previous == {"ship": ("claim:k",)}
    changed = touched_by_claim(nodes, verified, "k")
    updates = recompute(
        nodes,
        verified,
        previous=previous,
        changed=changed,
        spread=changed,
        index=build_index(nodes),
    )
    assert updates == {"ship": ()}


def test_a_capability_going_down_evaluates_only_its_tasks_and_their_dependants() -> None:
    """Below a task the capability holds, its dependants already wait on it: nothing further
    down is evaluated unless it can bar a transaction group."""
    chain = [TaskNode(f"t{i}", prerequisites=(f"t{i - 1}",) if i else ()) for i in range(50)]
    nodes = run(TaskNode("push", capabilities=("forge",)), *chain)
    nodes["t0"] = TaskNode("t0", prerequisites=("push",))
    index = build_index(nodes)
    previous = stored(frontier(nodes, World()))
    down = World(down=frozenset({"forge"}))
    seen: list[str] = []

    class Counting(dict):  # the nodes the recompute reads, by key
        def __getitem__(self, key: str) -> TaskNode:
            seen.append(key)
            return super().__getitem__(key)

    changed = touched_by_capability(nodes, "forge", down, index=index)
    updates = recompute(
        Counting(nodes), down, previous=previous, changed=changed, spread=(), index=index
    )
    assert updates == {"push": ("capability:forge",)}
    assert set(seen) <= {"push", "t0"}
    assert updates == {
        k: v for k, v in stored(frontier(nodes, down)).items() if previous.get(k) != v
    }


def test_a_member_barred_by_its_group_blocks_the_member_below_it() -> None:
    """Three members of a transaction, the second below the first through a task outside it;
    the third needs the forge, which goes down. The first is barred (the third has a cause), so
    the task below it is blocked, and so is the second: a cause of its own, which bars the third
    too. The recompute must not take the second as it was before."""
    nodes = run(
        TaskNode("m1", transaction="tx"),
        TaskNode("x", prerequisites=("m1",)),
        TaskNode("m2", prerequisites=("x",), transaction="tx"),
        TaskNode("m3", transaction="tx", capabilities=("forge",)),
    )
    index = build_index(nodes)
    previous = stored(frontier(nodes, World()))
    down = World(down=frozenset({"forge"}))
    changed = touched_by_capability(nodes, "forge", down, index=index)
    updates = recompute(nodes, down, previous=previous, changed=changed, spread=(), index=index)
    assert {**previous, **updates} == stored(frontier(nodes, down))
    assert "barrier:transaction" in updates["m3"]
