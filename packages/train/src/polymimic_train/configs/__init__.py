"""The Hydra config tree of the train app (also reachable as configs/ at the repo root)."""
