"""Tests of kebench.models; ``shared`` holds the session's real model.

Other engineers' CPU jobs share this machine. OpenMP threads that spin while waiting
make torch up to 25 times slower when cores are oversubscribed, so model tests wait
passively (set before torch is first imported; an explicit setting wins).
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
