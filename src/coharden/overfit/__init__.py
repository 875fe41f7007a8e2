"""Test overfitting (``coharden overfit``): changed-line coverage of a test over a fix (:mod:`.coverage`, measured
in the test process by :mod:`.linecov_plugin`), the reward of a (fix, test) pair (:mod:`.reward`), the
reward-guided refinement loop with an LLM critic (:mod:`.refine`), its outputs (:mod:`.report`) and the command
line (:mod:`coharden.cli.overfit`). ``coharden eval --overfit DIR`` grades the outputs
(:mod:`coharden.evaluation.refinement`).
"""
