"""What the work tells the layers above it, without knowing them."""

from django.dispatch import Signal

# The retry policy decided a person must look at the task (its Decision is stored and the task
# is escalated). Sent inside the deciding transaction with `decision` and `attempt`; the desk
# opens the escalation (or finds the open one) and asks for a packet.
escalation_needed = Signal()

# The retry policy failed the run (a deterministic tool's step failed the same way again). Sent
# inside the deciding transaction with `run`, `cause` and `at`; the desk closes what of the run
# still waits for a person.
run_failed = Signal()
