"""What the fleet's core tells the layers above it, without knowing them."""

from django.dispatch import Signal

# The reconciler's beat (fleet.tasks.reconcile), with `now`: each receiver finds the work whose
# broker message may have been lost, enqueues it again, and returns {what: how many}.
reconciling = Signal()
