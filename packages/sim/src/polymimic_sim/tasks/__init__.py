"""Simulated tasks: what a task is, the registry that builds one by name, and the simulators.

`registry` names every task and family (`make_task`, `suite_tasks`, `expert_variant`, ...);
`task_types` is the interface every task gives (`SimTask`, `Step`) and its errors, below the
registry so that each family names it without importing what builds it. One module per
simulator family: `metaworld_tasks`; `aloha_tasks` (joints), `aloha_ee_tasks` (end-effector
poses, the head camera, the masked arms), `hands_tasks` (a person's hands) and
`aloha_as_hands` (the robot in the hands' layout). `camera_frames` holds camera poses in the
project's convention and `rendering` headless MuJoCo rendering, both the families' own. Nothing
here imports rollouts or recording: they build on tasks. Public names are `polymimic_sim`'s.
"""
