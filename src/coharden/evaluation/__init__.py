"""Evaluation and reports (``coharden eval``): grade any system's fixes and tests, side by side.

* :mod:`.inputs` - prediction sets (SWE-bench / SWT-bench files) and test-injection experiments;
* :mod:`.records` - the per-round record schema the CoHarden loop writes (``--runs DIR``);
* :mod:`.grading` - mechanical grades: Resolved (SWE-bench semantics), F->P, MPE class and laxity, own-test
  verdicts; cached in the SQLite store;
* :mod:`.metrics` - the report's numbers from the grades (pure), with the definitions of every rate;
* :mod:`.report` - Markdown and a self-contained HTML page with plots;
* :mod:`.runner` - the whole pipeline, as the CLI runs it.
"""
