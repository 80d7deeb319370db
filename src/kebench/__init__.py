"""kebench: does a knowledge edit to a language model really take hold?"""

import os

# torch's OpenMP threads spin while they wait; on a CPU shared with other jobs (a
# laptop, CI) that made edits up to 25 times slower. Waiting passively changes no
# result. It must be set before torch is first imported; an explicit setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
