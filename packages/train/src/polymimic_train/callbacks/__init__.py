"""Callbacks the configs name.

Overlay videos (`trajectory_video`), the per-step error plot (`step_error_plot`),
gradient-norm statistics (`grad_norm_monitor`), step timing (`step_timing`) and data-fault
reports (`data_fault_monitor`). Import the modules themselves: this package imports nothing.
"""
