"""What the evaluation report (``coharden eval``) and the real-bugs study report share: statistics
(:mod:`.stats`), reading result rows (:mod:`.rows`), drawing figures (:mod:`.figures`). Pure functions over
JSON-able rows; no package below reporting imports this one."""
