"""Fixtures for tests and benchmarks only: writers of other tools' formats and local servers.

`write_lerobot_dataset` writes a LeRobot v3 dataset as lerobot does (needs the `lerobot`
extra); `S3TestServer` runs moto's S3 server on 127.0.0.1 (moto comes from the test
dependencies). No module of the library imports this subpackage (the import-layer test holds
it), so nothing here runs on a user's machine unless a test or a benchmark asks for it.
"""

import lazy_loader

# The public names and their modules: one table, in __init__.pyi.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
