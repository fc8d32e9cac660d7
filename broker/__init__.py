"""trioq: a Trio job-queue broker that speaks the bunqueue TCP protocol."""

__version__ = "0.1.0"
