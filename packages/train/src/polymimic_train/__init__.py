"""polymimic-train: the thin app that composes data, policy, strategy and eval under Hydra."""
