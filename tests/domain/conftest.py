"""Tests of the pure decision core.

Real: every domain module (matching, ladder, budgets, breaker, rate limit, the planner and the
real cron `schedule`). Faked: the cluster, by `fake_cluster.FakeCluster`, a few lines that
apply the planner's effects to NodeViews (cordon sets unschedulable and our taint, replace
removes the node) and report step progress the way the engine would. Time is a value passed
in; nothing sleeps.
"""
