"""Environments for real repositories and verified reproduction of real bugs.

``inference`` reads a repository's packaging / tox / nox / CI files into an :class:`~.plan.EnvPlan`;
``dockerfile`` renders it for Docker; ``build`` builds it (a cached virtual environment, or a Docker image);
``smoke`` runs a sample of the repository's tests and judges environment failures only; ``refine`` lets a model
patch the plan from the errors; ``mockenv`` points model-provider variables at the local mock server;
``reproduce`` checks (and with a model, writes) fail-to-pass reproduction tests that do not mock the code under
test (``mockdetect``); ``mining`` turns exported issues and pull requests into SWE-bench-style records.
"""
