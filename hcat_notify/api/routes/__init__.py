"""The API's routes, one module per resource: ``dones`` (the done check and
mark-set-done), ``tables`` (tables and partitions), ``events``, ``monitor`` (health,
readiness, metrics) and ``status_page``."""
