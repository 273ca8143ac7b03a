"""Closed-loop rollouts: a trained policy acting in simulated tasks, and its success rate.

`closed_loop` runs episodes in one simulator (`evaluate`, `evaluate_policy`,
`evaluate_checkpoint`, `summarise_suite`); `parallel` runs them in several simulator
processes in lockstep, the policy batched across them, each simulator a process of
`task_workers`; `episodes` holds what both loops share (an episode's tally, its `Outcome`,
the summary with its Wilson interval, the videos); `rollout_recording` writes them to rerun.
Builds on `polymimic_sim.tasks`. Public names are `polymimic_sim`'s.
"""
