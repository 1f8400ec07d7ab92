"""The API's routes, one module per resource: ``tables`` (tables, partitions, dones),
``events``, ``monitor`` (health, readiness, metrics) and ``status_page``."""
