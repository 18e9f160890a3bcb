"""milepost: a durable workflow engine for NoETL playbooks."""

__version__ = "0.1.0"
