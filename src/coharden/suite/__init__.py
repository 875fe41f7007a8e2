"""``coharden suite``: adversarial hardening of a whole test suite under a mechanical mutation-kill oracle.

operators (whole-module mutants) -> runner (kill oracle: baseline, forced-fail, per-mutant pytest runs) ->
guard (add-only application of LLM-written tests) -> tester / critic (LLM roles) -> loop (rounds) ->
compare (arms x replicates, cluster bootstrap) and prereg (hashed plan stored before the run).
"""
