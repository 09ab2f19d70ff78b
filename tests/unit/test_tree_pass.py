"""The tree pass's trees: a plan's own multicast trees, paths merged into one tree when they
form one, and pruning to the destinations with work (relays kept, dead branches cut)."""

from __future__ import annotations

import dataclasses

from skyplane_ops.testing.transfer import make_plan
from skyplane_ops.transfer.tree_pass import plan_trees, prune

S, A, B, C = "test:s", "test:a", "test:b", "test:c"


def test_paths_sharing_an_edge_merge_into_one_tree() -> None:
    plan = dataclasses.replace(make_plan([S, A], [S, A, B], [S, A, C]), dsts=(A, B, C))
    assert plan_trees(plan) == [(1.0, {S: [A], A: [B, C]})]


def test_paths_reaching_a_region_from_two_others_are_no_tree() -> None:
    plan = dataclasses.replace(make_plan([S, A, B], [S, C, B]), dsts=(B,))
    assert plan_trees(plan) is None


def test_a_multicast_plans_own_trees_are_used() -> None:
    plan = make_plan([S, A])
    trees = [{"share": 0.25, "next_hops": {S: [A]}}, {"share": 0.75, "next_hops": {S: [B]}}]
    plan = dataclasses.replace(plan, details={"multicast": {"trees": trees}})
    assert plan_trees(plan) == [(0.25, {S: [A]}), (0.75, {S: [B]})]


def test_prune_keeps_relays_to_the_sinks_and_cuts_the_rest() -> None:
    tree = {S: [A, C], A: [B]}
    assert prune(tree, {B}) == {S: [A], A: [B]}  # A relays, C is cut
    assert prune(tree, {A, C}) == {S: [A, C], A: []}
