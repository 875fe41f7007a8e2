"""The fast path of test runs: the warm fork server and its init (``forkserver.py``, ``forkserver_main.py``,
``forkserver_procs.py``), collect once and its zygotes (``collect_once.py``, ``zygotes.py``), the project kept
imported between runs (``warm_plan.py``, ``warm_state.py``, ``warm.py``, ``warm_bodies.py``) and the second lane
(``lanes.py``). Nothing outside this package imports it but :mod:`coharden.execution.run_site` (``RunSite``),
the one door the plain path (sandbox, runner, verdicts) goes through; ``tests/test_layers.py`` checks that."""
