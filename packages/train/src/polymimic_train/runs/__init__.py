"""Run bookkeeping.

Run directories and their record (`run_dirs`), what a run writes at its start and end
(`run_record`), checkpoints written atomically with `last.ckpt` (`checkpoints`) and the
metrics CSV appended across resumes (`metrics_csv`), and the W&B run of `logger=wandb`, one
per run directory across resumes (`wandb_run`). Import the modules themselves: this
package imports nothing, so `train --help` stays light.
"""
