"""Multicast planning: one source, several destinations, a shared edge carrying data once.

``plan_multicast`` (in ``api``) is the entry; ``model`` is the MILP, ``paths`` the routes,
``solve`` the drive and the plan, ``compare`` the rows it is weighed against, ``text`` its
report lines. Nothing is imported here, so ``plan``'s text forms load no solver.
"""
