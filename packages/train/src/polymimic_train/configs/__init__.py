"""The Hydra config tree of the train app (also reachable as configs/ at the repo root).

Importing it registers the resolvers its configs use (polymimic_train.resolvers).
"""

from polymimic_train import resolvers as resolvers
