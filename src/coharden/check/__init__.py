"""``coharden check``: MPE of the regression test of a commit (or a branch) in the user's own git repository.

:mod:`.commit` reads the commit into a fix and a test (and says plainly why one cannot be checked),
:mod:`.run` builds an instance from it and runs :func:`coharden.mpe.evaluate.evaluate` unchanged,
:mod:`.render` writes what a reviewer reads (Markdown, SARIF, JUnit, the terminal summary)."""
